from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from zapomni.services.query.fusion import (
    Candidate,
    Context,
    collapse,
    fuse_scores,
    share_page,
    single,
)
from zapomni.services.query.hits import shape_hit
from zapomni.services.query.keyword import stem, term_counts, terms
from zapomni.services.query.search import candidate_depth, hnsw_k, meta_pairs, pool_terms
from zapomni.shared.protocol.validation import decode_search
from zapomni.workers.store import meta_pairs as stored_pairs


def row(memory: str, idx: int, start: int = 0, end: int = 10, score: float = 0.0) -> list:
    return [memory, f"{memory}:{idx}", f"text {idx}", score, start, end]


def test_hit_from_a_candidate():
    # of the memory, fetched for hits: tags, source, metadata, created_at, occurred_at, parts
    fields = [["t"], "src", '{"page": 2}', 1767225600.0, 1767139200.0, None]
    hit = shape_hit(single("vector", [(row("m", 0), 0.75)])[0], fields)
    assert hit.score == 0.75 and hit.why["vector"].rank == 1
    assert hit.metadata == {"page": 2} and hit.tags == ["t"] and hit.source == "src"
    assert hit.created_at == "2026-01-01T00:00:00+00:00" and hit.also_matched == 0
    assert hit.occurred_at == "2025-12-31T00:00:00+00:00"


def test_weights_tilt_the_fusion():
    vector = [(row("a", 0), 0.9), (row("b", 0), 0.8)]
    keyword = [(row("b", 0), 9.0), (row("a", 0), 1.0)]
    assert fuse_scores({"vector": vector, "keyword": keyword}, {"vector": 2, "keyword": 1},
                       50)[0].memory_id == "a"
    assert fuse_scores({"vector": vector, "keyword": keyword}, {"vector": 1, "keyword": 2},
                       50)[0].memory_id == "b"


def test_score_fusion_keeps_the_margin_of_a_sure_signal():
    # keyword is sure of c (far ahead of the rest); vector barely prefers a over c
    vector = [(row("a", 0), 0.62), (row("c", 0), 0.61), (row("b", 0), 0.60), (row("d", 0), 0.2)]
    keyword = [(row("c", 0), 12.0), (row("b", 0), 2.0), (row("a", 0), 1.9)]
    weights = {"vector": 1, "keyword": 1}
    fused = fuse_scores({"vector": vector, "keyword": keyword}, weights, 50)
    assert [c.memory_id for c in fused] == ["c", "a", "b", "d"]
    assert fused[0].why["keyword"].rank == 1 and fused[0].why["vector"].rank == 2
    assert all(0 < c.score < 1 for c in fused) and fused[0].score > 0.8
    # a chunk only one signal found ranks below one both found with the same scores
    assert "keyword" not in fused[-1].why


def test_score_fusion_of_a_single_or_tied_list():
    only = fuse_scores({"vector": [(row("a", 0), 0.5)], "keyword": []}, {}, 50)
    assert [c.memory_id for c in only] == ["a"] and only[0].score > 0.5
    tied = fuse_scores({"vector": [(row("a", 0), 0.5), (row("b", 0), 0.49), (row("c", 0), 0.1)],
                        "keyword": [(row("b", 0), 3.0)]}, {}, 50)
    assert tied[0].memory_id == "b"  # found by both beats a slightly better vector score
    # below the head counts as not found: a longer list does not reorder the top
    long = [(row(f"x{i}", 0), 1.0 - i / 100) for i in range(60)]
    top = [c.memory_id for c in fuse_scores({"vector": long, "keyword": long[:3]}, {}, 20)]
    assert top[:3] == ["x0", "x1", "x2"] and top[20:] == sorted(top[20:])


def test_context_lifts_the_turn_next_to_a_strong_match():
    # q (the question turn) is found by both signals; its answer a by neither; x and y are
    # unrelated memories the signals found weakly, and a's neighbour is q
    vector = [(row("q", 0), 0.9), (row("x", 0), 0.5), (row("y", 0), 0.45), (row("z", 0), 0.4)]
    keyword = [(row("q", 0), 9.0), (row("y", 0), 2.0), (row("x", 0), 1.0), (row("z", 0), 0.5)]
    ranked, weights = {"vector": vector, "keyword": keyword}, {"vector": 1, "keyword": 1}
    plain = fuse_scores(ranked, weights, 50)
    links = {"a": ["q"], "q": ["a"], "y": ["z"], "z": ["y"]}
    lifted = fuse_scores(ranked, weights, 50, Context(links, [row("a", 0)], 0.5))
    order = [c.memory_id for c in lifted]
    assert order[:2] == ["q", "a"]  # the answer joins, right behind its question
    answer = lifted[1]
    assert answer.why["context"].rank == 1 and answer.why["context"].score > 0
    assert set(answer.why) == {"context"}
    # the best neighbour of q (a, at the floor before the lift) lends nothing
    assert "context" not in lifted[0].why and lifted[0].score == plain[0].score
    # nothing with no neighbours moves, and x has none
    x_plain = next(c for c in plain if c.memory_id == "x")
    assert next(c for c in lifted if c.memory_id == "x").score == x_plain.score
    assert fuse_scores(ranked, weights, 50, Context({}, [], 0.5))[0].score == plain[0].score


def test_overlapping_chunks_of_one_memory_fold_into_the_best():
    candidates = [Candidate(row=row("m", 1, 90, 200)), Candidate(row=row("m", 0, 0, 100)),
                  Candidate(row=row("m", 5, 500, 600)), Candidate(row=row("n", 0, 0, 100))]
    kept = collapse(candidates)
    assert [c.row[1] for c in kept] == ["m:1", "m:5", "n:0"]
    assert [c.also_matched for c in kept] == [1, 0, 0]
    # pure: the candidates are untouched, so folding the same list again counts the same
    assert [c.also_matched for c in candidates] == [0, 0, 0, 0]
    assert [c.also_matched for c in collapse(candidates)] == [1, 0, 0]


def test_one_memory_holds_at_most_the_cap_and_lists_the_rest_under_its_best():
    ranked = [Candidate(row=row("big", i, 100 * i, 100 * i + 90)) for i in range(5)]
    ranked[3:3] = [Candidate(row=row("small", 0))]
    ranked.append(Candidate(row=row("other", 0)))
    page = share_page(ranked, 3)
    assert [c.row[1] for c in page] == ["big:0", "big:1", "big:2", "small:0", "other:0"]
    assert [c.row[1] for c in page[0].more] == ["big:3", "big:4"]
    assert all(not c.more for c in page[1:])
    assert share_page(ranked, 0) == ranked  # 0: no cap
    assert all(not c.more for c in ranked)  # the candidates themselves are left as they are


def test_the_cap_keeps_the_order_in_which_memories_first_appear():
    # so a ranking of memories (one document per memory, as in the retrieval benchmark)
    # is the same with and without the cap; the cap only brings more memories into a page
    memories = "abcabbbbdaaaec"
    ranked = [Candidate(row=row(m, i, 100 * i, 100 * i + 90)) for i, m in enumerate(memories)]
    first = list(dict.fromkeys(c.memory_id for c in ranked))
    for cap in (1, 2, 3):
        page = share_page(ranked, cap)
        assert list(dict.fromkeys(c.memory_id for c in page)) == first
        assert max(sum(c.memory_id == m for c in page) for m in first) == cap
    assert [c.row[1] for c in share_page(ranked, 2)[:6]] == ["a:0", "b:1", "c:2", "a:3", "b:4",
                                                            "d:8"]


def test_a_hit_lists_its_memorys_further_matches_with_their_offsets():
    ranked = single("vector", [(row("big", i, 100 * i, 100 * i + 90), 0.9 - i / 10)
                               for i in range(5)])
    hit = shape_hit(share_page(ranked, 2)[0], [[], "", "{}", 0.0, 0.0, None])
    assert [(m.chunk_id, m.char_start, m.char_end, m.score) for m in hit.more] == [
        ("big:2", 200, 290, 0.7), ("big:3", 300, 390, 0.6), ("big:4", 400, 490, 0.5)]
    assert shape_hit(share_page(ranked, 2)[1], [[], "", "{}", 0.0, 0.0, None]).more == []


def test_keyword_query_is_only_ever_words():
    assert terms("What is the capital of Australia?") == ["capital", "australia"]
    hostile = '@text:{x} -"drop" | * (a|b) ~c %d% $p 1999 Ünïcode'
    assert terms(hostile) == ["text", "drop", "1999", "ünïcode"]
    assert terms("the of and, to!?") == []
    assert terms("***") == []
    assert terms("Dog dog DOG cat") == ["dog", "cat"]


def test_candidate_depths():
    plain = decode_search("q", 10, None, None)
    filtered = decode_search("q", 10, {"tags": ["a"]}, None)
    assert candidate_depth(plain) == 50
    assert candidate_depth(decode_search("q", 100, None, None)) == 300
    assert hnsw_k(plain, 50) == 100 and hnsw_k(filtered, 50) == 500
    assert hnsw_k(filtered, 300) == 1000


def test_metadata_filters_match_what_workers_store():
    stored = stored_pairs('{"lang": "en", "page": 12, "draft": false, "nested": {"a": 1}}')
    assert stored == ['draft=false', 'lang="en"', 'page=12']
    wanted = meta_pairs({"page": 12, "lang": "en"})
    assert set(wanted) <= set(stored)
    assert not set(meta_pairs({"page": "12"})) <= set(stored)  # "12" is not 12
    assert meta_pairs(None) is None


def scored(text: str, idf: dict[str, float], avgdl: float, matched: list[str] | None = None
           ) -> float:
    from zapomni.services.query.keyword import bm25, term_counts
    from zapomni.shared.text.words import count_words

    counts = term_counts([text], frozenset(idf))[0]
    return bm25(counts, count_words(text), idf, avgdl=avgdl, matched=matched or [])


def test_bm25_saturates_and_normalises_length():
    from zapomni.services.query.keyword import stem

    assert [stem(w) for w in ("directors", "studies", "glass", "running", "cat")] == \
        ["director", "studi", "glass", "run", "cat"]
    idf = {stem("lighthouse"): 2.0, "storm": 1.0}  # keys stemmed: "lighthous"
    once = scored("The lighthouse stood.", idf, avgdl=3)
    thrice = scored("Lighthouse lighthouse lighthouse stood.", idf, avgdl=3)
    assert 0 < once < thrice < 3 * once  # more occurrences help, with diminishing returns
    short = scored("lighthouse storm", idf, avgdl=10)
    padded = scored("lighthouse storm " + "filler " * 40, idf, avgdl=10)
    assert short > padded  # the same matches in a longer chunk count for less
    assert scored("nothing relevant here", idf, avgdl=3) == 0
    # a term the full-text index matched counts once even where stem() does not see it
    assert scored("nothing relevant here", idf, avgdl=3, matched=["storm"]) > 0


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(list("abcdeisy İ_-.,0'\n\u00e9\u0301")),
                        max_size=80), max_size=4),
       st.lists(st.text(alphabet="abcdeisy0", min_size=1, max_size=6), min_size=1,
                max_size=4))
def test_term_counts_equal_counting_every_token(texts, words):
    """Counting only the words that may stem to a query term, in the texts scanned as one,
    finds in each text what stemming every word of it finds, and the stored length is the
    number of those words."""
    from zapomni.shared.text.words import WORD, count_words

    stems = frozenset(stem(w) for w in words)
    expected = []
    for text in texts:
        tokens = [stem(w) for w in WORD.findall(text.lower())]
        expected.append({s: tokens.count(s) for s in stems if s in tokens})
        assert count_words(text) == len(tokens)
    assert term_counts(texts, stems) == expected


def test_term_counts_find_snowballs_irregular_forms():
    """"lying" stems to "lie", which shares one letter with it: still counted."""
    stems = frozenset(stem(w) for w in ("lies", "dies", "ties", "happy"))
    assert term_counts(["Lying, dying and tying; happiness."], stems) == \
        [{"lie": 1, "die": 1, "tie": 1, "happi": 1}]


def test_common_terms_do_not_choose_the_keyword_pool_unless_all_are_common():
    weighted = [["the", 0.1], ["ferry", 4.0], ["pier", 3.5]]
    df = {"the": 9_000, "ferry": 12, "pier": 40}
    assert pool_terms(weighted, df, 1_000) == [["ferry", 4.0], ["pier", 3.5]]
    assert pool_terms(weighted, df, 30) == [["ferry", 4.0]]
    assert pool_terms(weighted, df, 5) == [["ferry", 4.0]]  # all common: the rarest
    assert pool_terms(weighted, df, 10_000) == weighted
