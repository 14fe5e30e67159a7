"""Paragraphs first (shared/text/paragraphs.py): a text longer than a chunk is cut at its paragraph
breaks into blocks, each a chunk when it fits, split inside itself when it does not; the
large-text path cuts the same blocks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zapomni.shared.text.chunking import Chunker
from zapomni.shared.text.large_text import split_large
from zapomni.shared.text.paragraphs import PARAGRAPH_TOKENS, blocks, paragraphs

WORDS = ["memory", "retrieval", "graph", "lighthouse", "keeper", "Zürich", "naïve", "fog",
         "co-operation", "3.14", "e-mail", "antidisestablishmentarianism", "日本", "dawn"]
BREAKS = ["\n\n", "\n\n\n", "\n \n", "\r\n\r\n", "\n\t\n  "]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(3, 12))).capitalize() + "."


def paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(sentence(rng) for _ in range(sentences))


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Paragraphs from a title-like line to several chunks long, between blank lines of
    every kind, sometimes with single line breaks inside."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    parts = [paragraph(rng, draw(st.integers(1, 14)))
             for _ in range(draw(st.integers(1, 12)))]
    parts = [p.replace(". ", ".\n", 1) if draw(st.booleans()) else p for p in parts]
    text = "".join(part + draw(st.sampled_from(BREAKS)) for part in parts)
    return draw(st.sampled_from(["", "  \n"])) + text


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    return Chunker(chunk_tokens=48, overlap=8, paragraph_tokens=12)


def block_spans(chunker: Chunker, text: str) -> list[tuple[int, int]]:
    """The blocks of a text cut at paragraph breaks; none when it fits one chunk (then the
    splitter takes it whole, as before)."""
    spans = paragraphs(text)
    counts = chunker.count([(s, text[s:e]) for s, e in spans])
    if sum(counts) <= chunker.capacity:
        return []
    return blocks(spans, counts, chunker.paragraph_tokens, chunker.capacity)


def fitting(chunker: Chunker, text: str, runs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(s, e) for s, e in runs if chunker.count([(0, text[s:e])])[0] <= chunker.capacity}


def test_paragraphs_are_the_text_between_blank_lines_trimmed():
    text = "  Title\n\nFirst line\nsame paragraph.  \n \t\n\r\n\nLast.\n\n \n"
    assert [text[s:e] for s, e in paragraphs(text)] == [
        "Title", "First line\nsame paragraph.", "Last."]
    assert paragraphs(" \n\n \n") == []


def test_blocks_close_at_the_floor_and_a_short_last_run_joins_the_one_before():
    spans = [(i * 10, i * 10 + 5) for i in range(6)]
    # a title (3) joins the next; 40 stands alone; 5 + 4 + 30 close at 39; a last 2 joins
    assert blocks(spans, [3, 20, 40, 5, 4, 30], floor=12, capacity=60) == [
        (0, 15), (20, 25), (30, 55)]
    assert blocks(spans[:3], [3, 20, 2], floor=12, capacity=60) == [(0, 25)]
    # ... unless the two would not fit one chunk
    assert blocks(spans[:3], [3, 50, 8], floor=12, capacity=60) == [(0, 15), (20, 25)]


@settings(max_examples=120, deadline=None)
@given(text=texts())
def test_chunks_keep_the_contract_and_end_at_paragraph_breaks(chunker, text):
    chunks = chunker.split(text)
    assert [c.idx for c in chunks] == list(range(len(chunks)))
    assert all(text[c.char_start : c.char_end] == c.text for c in chunks)
    assert all(0 < c.tokens <= chunker.capacity for c in chunks)
    assert [c.tokens for c in chunks] == chunker.count([(0, c.text) for c in chunks])
    covered = {i for c in chunks for i in range(c.char_start, c.char_end)}
    assert all(i in covered for i, char in enumerate(text) if not char.isspace())
    runs = block_spans(chunker, text)
    if not runs:
        return
    spans = {(c.char_start, c.char_end) for c in chunks}
    assert all(any(s <= a and b <= e for s, e in runs) for a, b in spans)  # none across
    assert {e for _, e in runs} <= {b for _, b in spans}  # each block ends a chunk
    assert fitting(chunker, text, runs) <= spans  # a block that fits is one chunk


def test_joined_paragraphs_are_chunked_one_by_one():
    """The mixed benchmark's case (docs/benchmarks.md): titled paragraphs of 30-150 tokens
    joined into one text are each a chunk, title and all (before: 5 of 40 were, the others
    shared chunks); the one longer than a chunk is split inside itself."""
    rng = random.Random(21)
    docs = [f"Entry {i}\n\n{paragraph(rng, 30 if i == 7 else rng.randint(3, 8))}"
            for i in range(40)]
    text = "\n\n".join(docs)
    paragraph_first = Chunker(chunk_tokens=256, overlap=32)
    sizes = paragraph_first.count([(0, d) for d in docs])
    assert min(sizes) >= PARAGRAPH_TOKENS and max(sizes) > paragraph_first.capacity
    chunks = [c.text for c in paragraph_first.split(text)]
    assert len(chunks) > 40 and all(doc in chunks for doc, size in zip(docs, sizes, strict=True)
                                     if size <= paragraph_first.capacity)
    before = paragraph_first._splitter.chunk_indices(text)  # the splitter alone
    assert sum(piece in docs for _, piece in before) < len(docs) // 2


def test_one_long_paragraph_is_split_as_before():
    """Paragraphs only come into it at paragraph breaks: a title and a paragraph longer than
    a chunk (a SciFact abstract) are cut where the splitter alone cuts them."""
    rng = random.Random(8)
    text = "A title of the abstract\n\n" + paragraph(rng, 40)
    new = Chunker(64, 8)
    assert [(c.char_start, c.char_end) for c in new.split(text)] == [
        (s, s + len(p)) for s, p in new._splitter.chunk_indices(text)]


@settings(max_examples=60, deadline=None)
@given(text=texts())
def test_the_large_text_path_cuts_the_same_blocks(chunker, text):
    """split_large (characters first) ends chunks at the same paragraph breaks as the token
    splitter: every block that fits is one chunk in both, and no chunk crosses a block."""
    pieces, counts = split_large(text, chunker.tokenizer, chunker.capacity, chunker.overlap,
                                 chunker._splitter, paragraph_tokens=chunker.paragraph_tokens)
    assert counts == chunker.count(pieces) and max(counts, default=0) <= chunker.capacity
    assert all(text[s : s + len(p)] == p for s, p in pieces)
    runs = block_spans(chunker, text)
    if not runs:
        return
    plain = {(c.char_start, c.char_end) for c in chunker.split(text)}
    large = {(s, s + len(p)) for s, p in pieces}
    assert fitting(chunker, text, runs) <= plain & large
    assert all(any(s <= a and b <= e for s, e in runs) for a, b in large)


def test_paragraph_tokens_stay_below_half_a_chunk():
    assert Chunker(48, 8, paragraph_tokens=1000).paragraph_tokens == 23
