from services.query.search import candidate_depth, shape_hit
from shared.validation import decode_search


def test_hit_from_a_row():
    row = ["mem_1", "mem_1:0", "text", 0.25, 0, 4, ["t"], "src", '{"page": 2}', 1767225600.0]
    hit = shape_hit(row)
    assert hit.score == 0.75  # cosine distance -> similarity
    assert hit.metadata == {"page": 2} and hit.tags == ["t"] and hit.source == "src"
    assert hit.created_at == "2026-01-01T00:00:00+00:00"


def test_far_vectors_score_zero_not_negative():
    row = ["m", "m:0", "t", 1.4, 0, 1, None, None, None, None]
    hit = shape_hit(row)
    assert hit.score == 0.0 and hit.tags == [] and hit.metadata == {} and hit.source == ""


def test_filters_fetch_more_candidates():
    plain = decode_search("q", 10, None, None)
    filtered = decode_search("q", 10, {"tags": ["a"]}, None)
    assert candidate_depth(plain) == 30
    assert candidate_depth(filtered) == 200
    assert candidate_depth(decode_search("q", 100, {"tags": ["a"]}, None)) == 1000
