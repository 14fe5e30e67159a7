"""Large texts are split by characters, and their chunks' tokens counted word by word
(shared/text/large_text.py): the same contract as the token splitter's — offsets into the text,
never over the budget, overlap kept — and the counts are the tokenizer's own."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zapomni.shared.text.chunking import LARGE_TEXT, Chunker
from zapomni.shared.text.large_text import counts_by, exact_counts, split_large, word_table

# letters, digits, punctuation (ASCII and not), symbols, marks, controls, odd spaces,
# ideographs and characters beyond the BMP (an emoji, a Ugaritic word divider: punctuation)
ALPHABET = list("abcXYZ019 .,;:!?-_'\"()[]{}<>/\\@#$%^&*~`|+=\n\t\r") + [
    "é", "İ", "ß", "\u0301", "\u00a0", "\u2028", "\u3000", "\x0b", "\x0c", "\x1f", "\x00",
    "\u200b", "\ufeff", "©", "€", "«", "»", "—", "…", "日", "本", "語", "で", "ي", "\U0001f600",
    "\U0001039f", "\u1fef", "\ufffd"]
WORDS = st.text(alphabet=st.sampled_from(ALPHABET), min_size=1, max_size=12)
TEXTS = st.lists(WORDS, max_size=300).map(" ".join)


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker(chunk_tokens=32, overlap=6)


@settings(max_examples=150, deadline=None)
@given(text=TEXTS)
def test_split_large_keeps_the_contract(chunker, text):
    pieces, counts = split_large(text, chunker.tokenizer, chunker.capacity, chunker.overlap,
                                 chunker._splitter)
    assert counts == exact_counts(pieces, chunker.tokenizer)
    assert all(0 < c <= chunker.capacity for c in counts if c)
    for start, piece in pieces:
        assert piece and text[start : start + len(piece)] == piece
    assert all(a[0] < b[0] for a, b in zip(pieces, pieces[1:], strict=False))


@settings(max_examples=150, deadline=None)
@given(text=TEXTS, cuts=st.lists(st.integers(0, 4000), max_size=20))
def test_counts_word_by_word_equal_the_tokenizers(chunker, text, cuts):
    """Also for chunks that begin or end inside a word or in whitespace."""
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [(a, text[a:b]) for a, b in zip(points, points[1:], strict=False) if b > a]
    table = word_table(text, chunker.tokenizer, {})
    assert counts_by(table, chunker.tokenizer, pieces) == exact_counts(pieces, chunker.tokenizer)


def test_a_large_text_is_chunked_with_offsets_budget_and_overlap():
    rng = random.Random(3)
    vocabulary = ["memory", "retrieval", "graph", "lighthouse", "keeper", "Zürich", "naïve",
                  "co-operation", "3.14", "e-mail", "antidisestablishmentarianism", "日本"]
    sentences = [" ".join(rng.choices(vocabulary, k=rng.randint(3, 8))).capitalize() + "."
                 for _ in range(30_000)]
    text = " ".join(sentences)  # one paragraph: the splitter overlaps by whole sentences
    assert len(text) > LARGE_TEXT
    chunker = Chunker(chunk_tokens=256, overlap=32)
    chunks = chunker.split(text)
    assert [c.idx for c in chunks] == list(range(len(chunks)))
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert all(0 < c.tokens <= 254 for c in chunks)
    assert [c.tokens for c in chunks[:50]] == [len(e.ids) for e in chunker.tokenizer.encode_batch(
        [c.text for c in chunks[:50]], add_special_tokens=False)]
    overlapping = sum(1 for a, b in zip(chunks, chunks[1:], strict=False)
                      if b.char_start < a.char_end)
    assert overlapping >= len(chunks) // 2
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(text.rstrip())
    # sized towards the budget, not split into crumbs
    assert sorted(c.tokens for c in chunks)[len(chunks) // 2] > 254 // 3
