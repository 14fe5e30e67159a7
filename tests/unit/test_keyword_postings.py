"""The keyword pool chosen from cached postings (services/query/postings.py) is the pool
query's (cypher_search.KEYWORD_POOL_ALL: sum of idf x score per chunk in the terms'
order, best first, ties by chunk id, the first ``over``), and the cache stays bounded."""

import numpy as np
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from zapomni.services.query.frequencies import StampedCache
from zapomni.services.query.postings import TermPostings, choose_pool, pool_rows


def postings(pairs: list[tuple[int, float]]) -> TermPostings:
    return TermPostings(np.array([n for n, _ in pairs], dtype=np.int64),
                        np.array([f"chunk-{n:03d}" for n, _ in pairs], dtype=object),
                        np.array([s for _, s in pairs], dtype=np.float64))


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


TERM = st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0.5, 1.0, 1.25, 2.0])),
                max_size=30, unique_by=lambda p: p[0])


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(TERM, min_size=1, max_size=4), st.lists(st.sampled_from([0.3, 1.7, 2.9]),
                                                        min_size=4, max_size=4),
       st.integers(1, 50))
def test_the_pool_is_the_pool_querys_to_the_last_tie(terms, idfs, over):
    weighted = [[f"t{i}", idfs[i]] for i in range(len(terms))]
    lists = {f"t{i}": pairs for i, pairs in enumerate(terms)}
    expected = summed_in_falkordb(weighted, lists, over)
    chosen = choose_pool(weighted, {t: postings(p) for t, p in lists.items()}, over)
    assert [[cid, score, matched] for cid, _, score, matched in chosen] == expected
    assert all(cid == f"chunk-{node:03d}" for cid, node, _, _ in chosen)


def test_no_postings_no_pool():
    assert choose_pool([["absent", 2.0]], {"absent": postings([])}, 10) == []


def test_the_cache_is_bounded_by_postings_and_keyed_by_stamp():
    cache = StampedCache(10, size=len)
    cache.put("ns", "s1", {"a": postings([(1, 1.0)] * 6), "b": postings([(2, 1.0)] * 3)})
    assert set(cache.get("ns", "s1", ["a", "b"])) == {"a", "b"}
    assert cache.get("ns", "s2", ["a", "b"]) == {}  # written since: counted again
    assert cache.get("other", "s1", ["a"]) == {}
    cache.put("ns", "s1", {"c": postings([(3, 1.0)] * 4)})  # 13 held: "a" (oldest) goes
    assert set(cache.get("ns", "s1", ["a", "b", "c"])) == {"b", "c"}
    assert cache.held == 7
    cache.put("ns", "s2", {"b": postings([(2, 1.0)] * 2)})  # replaced, not added
    assert cache.held == 6


def test_pool_rows_keep_the_chosen_order_and_drop_reused_nodes():
    """Rows come back in any order; a node freed by a delete and reused by another chunk
    since the postings were read is not taken for the chunk chosen."""
    chosen = [("c-b", 2, 3.0, ["x"]), ("c-a", 1, 2.0, ["x", "y"]), ("c-c", 3, 1.0, ["y"]),
              ("c-d", 4, 0.5, ["y"])]
    rows = [[3, "m3", "c-c", "text c", 0, 6, 2], [1, "m1", "c-a", "text a", 0, 6, 2],
            [2, "m2", "c-new", "reused", 0, 6, 1], [4, "m4", "c-d", "text d", 0, 6, None]]
    assert pool_rows(chosen, rows, 2) == [["m1", "c-a", "text a", 2.0, 0, 6, ["x", "y"], 2],
                                          ["m3", "c-c", "text c", 1.0, 0, 6, ["y"], 2]]
