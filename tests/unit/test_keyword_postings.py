"""The keyword pool chosen from the best postings of each term (services/query/postings.py:
a threshold algorithm over prefixes read best score first, with probes) is the exhaustive
sum's (sum of idf x score per chunk over every posting, in the terms' order, best first,
ties by chunk id, the first ``over``), to the bit and to the last tie, however deep the
prefixes are read and in whatever order FalkorDB returns equal scores; and the cache stays
bounded."""

import random

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from zapomni.services.query.frequencies import StampedCache
from zapomni.services.query.postings import (
    DEEPER,
    ROW_BYTES,
    TermTop,
    as_members,
    as_top,
    pool_rows,
    top_pool,
)


def postings(pairs: list[tuple[int, float]]) -> TermTop:
    return as_top([[n, f"chunk-{n:03d}", s] for n, s in pairs], None)


def summed_in_falkordb(weighted, lists, over):
    """What the pool query computes, row by row: UNWIND the terms, sum per chunk."""
    sums: dict[str, float] = {}
    matched: dict[str, list[str]] = {}
    for term, idf in weighted:
        for node, score in lists[term]:
            cid = f"chunk-{node:03d}"
            sums[cid] = sums.get(cid, 0.0) + idf * score
            matched.setdefault(cid, []).append(term)
    best = sorted(sums, key=lambda cid: (-sums[cid], cid))[:over]
    return [[cid, sums[cid], matched[cid]] for cid in best]


def threshold(weighted, lists, over, first, shuffle):
    """keyword_pool's rounds against postings held here: prefixes best first (equal scores
    in ``shuffle``'s order, as FalkorDB may return them), ``first`` deep, four times deeper
    when asked, probes answered from the whole lists. The pool and the postings read."""
    def prefix(term, limit):
        ranked = sorted(lists[term], key=lambda p: (-p[1], shuffle.random()))
        rows = [[n, f"chunk-{n:03d}", s] for n, s in ranked[: limit + 1]]
        members = ",".join(str(n) for n, _ in shuffle.sample(lists[term], len(lists[term])))
        return as_top(rows, limit, as_members([[members]]))

    tops = {term: prefix(term, first) for term, _ in weighted}
    while True:
        chosen, needs = top_pool(weighted, tops, over)
        if not needs.deeper and not needs.probes:
            return chosen, sum(len(top.node_ids) + len(top.probed) for top in tops.values())
        for term in needs.deeper:
            tops[term] = prefix(term, DEEPER * len(tops[term].scores))
        for term, nodes in needs.probes.items():
            held = dict(lists[term])
            tops[term] = tops[term].with_probes({n: (f"chunk-{n:03d}", held[n]) if n in held
                                                  else None for n in nodes})


TERM = st.lists(st.tuples(st.integers(0, 60), st.sampled_from([0.25, 0.5, 1.0, 1.25, 2.0])),
                max_size=40, unique_by=lambda p: p[0])


@hypothesis_settings(max_examples=400, deadline=None)
@given(st.lists(TERM, min_size=1, max_size=4),
       st.lists(st.sampled_from([0.3, 1.7, 2.9, 0.1]), min_size=4, max_size=4),
       st.integers(1, 50), st.integers(1, 45), st.randoms(use_true_random=False))
def test_the_pool_is_the_exhaustive_sums_to_the_last_tie(terms, idfs, over, first, shuffle):
    weighted = [[f"t{i}", idfs[i]] for i in range(len(terms))]
    lists = {f"t{i}": pairs for i, pairs in enumerate(terms)}
    expected = summed_in_falkordb(weighted, lists, over)
    chosen, _ = threshold(weighted, lists, over, first, shuffle)
    assert [[cid, score, matched] for cid, _, score, matched in chosen] == expected
    assert all(cid == f"chunk-{node:03d}" for cid, node, _, _ in chosen)


def test_a_rare_term_settles_the_pool_without_the_common_ones_tail():
    """Ten chunks hold a rare term; 5,000 a common one, mostly at low scores: the pool of
    ten is settled from the common term's first postings and ten probes."""
    shuffle = random.Random(1)
    common = [(n, 1.0 if n < 50 else 0.25) for n in range(5_000)]
    rare = [(n, 1.0) for n in range(4_000, 4_010)]
    weighted = [["rare", 6.0], ["common", 0.5]]
    lists = {"rare": rare, "common": common}
    chosen, read = threshold(weighted, lists, 10, 100, shuffle)
    expected = summed_in_falkordb(weighted, lists, 10)
    assert [[cid, score, matched] for cid, _, score, matched in chosen] == expected
    assert read <= 100 + 10 + 10


def test_no_postings_no_pool():
    assert top_pool([["absent", 2.0]], {"absent": postings([])}, 10)[0] == []


def test_the_cache_is_bounded_by_size_and_keyed_by_stamp():
    cache = StampedCache(10, size=len)
    cache.put("ns", "s1", {"a": [0] * 6, "b": [0] * 3})
    assert set(cache.get("ns", "s1", ["a", "b"])) == {"a", "b"}
    assert cache.get("ns", "s2", ["a", "b"]) == {}  # written since: counted again
    assert cache.get("other", "s1", ["a"]) == {}
    cache.put("ns", "s1", {"c": [0] * 4})  # 13 held: "a" (oldest) goes
    assert set(cache.get("ns", "s1", ["a", "b", "c"])) == {"b", "c"}
    assert cache.held == 7
    cache.put("ns", "s2", {"b": [0] * 2})  # replaced, not added
    assert cache.held == 6


def test_a_term_costs_its_rows_and_members():
    """A prefix row holds a chunk id and a score (ROW_BYTES), a member a node id; a term
    read whole has no members apart from its rows."""
    whole = postings([(1, 1.0), (2, 0.5)])
    part = as_top([[1, "chunk-001", 1.0], [2, "chunk-002", 0.5]], 1, as_members([["1,2,9"]]))
    assert whole.size() == 2 * ROW_BYTES
    assert part.size() == ROW_BYTES + 3 * 4  # node ids below 2^31: 4 bytes each
    assert part.with_probes({9: ("chunk-009", 0.25)}).size() == 2 * ROW_BYTES + 3 * 4


def test_pool_rows_keep_the_chosen_order_and_drop_reused_nodes():
    """Rows come back in any order; a node freed by a delete and reused by another chunk
    since the postings were read is not taken for the chunk chosen."""
    chosen = [("c-b", 2, 3.0, ["x"]), ("c-a", 1, 2.0, ["x", "y"]), ("c-c", 3, 1.0, ["y"]),
              ("c-d", 4, 0.5, ["y"])]
    rows = [[3, "m3", "c-c", "text c", 0, 6, 2], [1, "m1", "c-a", "text a", 0, 6, 2],
            [2, "m2", "c-new", "reused", 0, 6, 1], [4, "m4", "c-d", "text d", 0, 6, None]]
    assert pool_rows(chosen, rows, 2) == [["m1", "c-a", "text a", 2.0, 0, 6, ["x", "y"], 2],
                                          ["m3", "c-c", "text c", 1.0, 0, 6, ["y"], 2]]
