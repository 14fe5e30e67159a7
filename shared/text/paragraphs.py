"""Paragraphs first: where a text's chunks may end before the splitter cuts inside them.

A text of several paragraphs (blank lines between them) is cut at its paragraph breaks into
blocks: a paragraph stands alone once it has ``floor`` tokens, a shorter one (a title, a
greeting, a one-line note) joins the paragraphs after it until the run has ``floor``, and a
short run left at the end joins the block before it when both fit one chunk. A block that fits
the budget is one chunk; a longer one is split by the splitter, inside the block only.

Why not the splitter's own capacity range: semantic-text-splitter ends a chunk at the first
section that brings it within ``(min, max)``, at the highest level whose first section fits.
With ``min`` at half the budget, two or three short paragraphs share a chunk, so
one chunk stands for several topics; with a small ``min``, a paragraph longer than the budget
is cut into single sentences. Blocks keep both: paragraph-sized chunks where paragraphs fit,
chunks filled to half the budget inside a long one.

Both chunking paths use this: the token splitter's (shared/text/chunking.py) and the large texts'
(shared/text/large_text.py), with the same paragraphs, counts and blocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from semantic_text_splitter import TextSplitter

# a line break, only horizontal whitespace, another line break (and what follows of them)
PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
Spans = list[tuple[int, int]]
Pieces = list[tuple[int, str]]  # (start, text) of each chunk
# a run of paragraphs with this many tokens that fits a chunk is a chunk of its own, so chunks
# end at paragraph breaks (at most half the budget; docs/benchmarks.md, "Paragraphs first")
PARAGRAPH_TOKENS = 32
Count = Callable[[Pieces], list[int]]  # tokens of each piece


def paragraphs(text: str) -> Spans:
    """(start, end) of each paragraph: the text between blank lines, whitespace trimmed at
    both ends; none when the text is only whitespace."""
    spans: Spans = []
    start = 0
    for match in PARAGRAPH_BREAK.finditer(text):
        spans.append(_trimmed(text, start, match.start()))
        start = match.end()
    spans.append(_trimmed(text, start, len(text)))
    return [(s, e) for s, e in spans if e > s]


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    piece = text[start:end]
    stripped = piece.lstrip()
    start += len(piece) - len(stripped)
    return start, start + len(stripped.rstrip())


def blocks(spans: Spans, counts: list[int], floor: int, capacity: int) -> Spans:
    """Runs of consecutive paragraphs (``spans`` with their token ``counts``): each closes
    once it has ``floor`` tokens; a last run under ``floor`` joins the one before when the two
    fit ``capacity``. (start of the first, end of the last) of each run."""
    runs: list[list[int]] = []  # [first paragraph, last paragraph, tokens]
    for i, tokens in enumerate(counts):
        if runs and runs[-1][2] < floor:
            runs[-1][1:] = [i, runs[-1][2] + tokens]
        else:
            runs.append([i, i, tokens])
    if len(runs) > 1 and runs[-1][2] < floor and runs[-2][2] + runs[-1][2] <= capacity:
        last = runs.pop()
        runs[-1][1:] = [last[1], runs[-1][2] + last[2]]
    return [(spans[first][0], spans[last][1]) for first, last, _ in runs]


def split_blocks(text: str, splitter: TextSplitter, count: Count, floor: int,
                 capacity: int) -> tuple[Pieces, list[int]]:
    """(start, chunk) pieces of ``text`` and their tokens: its blocks of paragraphs, each
    that has more than ``capacity`` tokens split by ``splitter``. A text of one paragraph, or
    that fits one chunk: the splitter alone, over the whole text."""
    spans = paragraphs(text)
    sizes = count([(s, text[s:e]) for s, e in spans]) if len(spans) > 1 else []
    if sum(sizes) <= capacity:
        pieces = splitter.chunk_indices(text)
        return pieces, count(pieces)
    runs = [(s, text[s:e]) for s, e in blocks(spans, sizes, floor, capacity)]
    return split_over(runs, count(runs), capacity, splitter, count)


def split_over(pieces: Pieces, counts: list[int], capacity: int, splitter: TextSplitter,
               count: Count) -> tuple[Pieces, list[int]]:
    """The pieces (with their ``counts``) that fit ``capacity`` as they are, each of the
    others split by ``splitter`` and its parts counted by ``count``."""
    kept: Pieces = []
    kept_counts: list[int] = []
    for (start, piece), tokens in zip(pieces, counts, strict=True):
        if tokens <= capacity:
            kept.append((start, piece))
            kept_counts.append(tokens)
        else:
            found = [(start + s, p) for s, p in splitter.chunk_indices(piece)]
            kept += found
            kept_counts += count(found)
    return kept, kept_counts
