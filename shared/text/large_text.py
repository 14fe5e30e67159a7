"""Chunking a large text fast: split by characters, then count tokens word by word.

The token-sized splitter (shared/text/chunking.py) tokenizes candidate sections again and again:
~13.5 s for 1.6 MB here. For a large text, ``split_large`` splits by characters (Rust, ~40 ms
a MB) with a capacity calibrated on samples of the text to stay under the token budget, then
counts each chunk's tokens from its words: the tokenizer's pre-tokenizer cuts text only at
whitespace and punctuation, so a chunk's tokens are the sum of its words' tokens, and each
distinct word is tokenized once (a 10 MB text has ~50k). The few chunks still over the
budget are split again by the token splitter. Offsets, the budget and overlap hold as for
short texts, and so do the blocks of paragraphs (shared/text/paragraphs.py): each section is cut
in the same blocks as the token splitter would cut it, and only blocks over the budget are
split by characters.

The text is split in sections of about ``SECTION_CHARS``, cut at a paragraph break (else a
line break, a sentence's end, a space), each split and counted in turn (the words' counts
shared), so that the caller hears how far it got (the ingest task shows it); a chunk never
spans two sections and does not overlap across the cut, which is where a paragraph ends.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Callable

import numpy as np
from semantic_text_splitter import TextSplitter
from tokenizers import Tokenizer

from zapomni.shared.text.paragraphs import PARAGRAPH_TOKENS, Pieces, split_blocks, split_over

SAMPLES = 32  # windows of the text tokenized to calibrate characters per token
SAMPLE_CHARS = 4096
SAFETY = 0.9  # of the calibrated capacity: most chunks then fit without a second split
SECTION_CHARS = 500_000  # split and counted at a time, so that progress can be told
SEAMS = ("\n\n", "\n", ". ", " ")  # where a section ends, best first


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(a word or punctuation mark with the whitespace before it, a punctuation mark beyond
    the BMP) as the BERT normaliser and pre-tokenizer see them: control characters are
    dropped (they split nothing), whitespace and each punctuation mark split. The classes
    hold BMP ranges only (Python's re then looks characters up in a table, 3x faster than a
    list of ranges); a text with punctuation beyond the BMP is tokenized chunk by chunk."""
    space, punct, astral = [], [], []
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        category = unicodedata.category(char)
        if category[0] == "P" or (32 < code < 127 and not char.isalnum()):
            (punct if code < 0x10000 else astral).append(code)
        elif char in "\t\n\r" or category[0] == "Z":
            space.append(code)
    p, s = _ranges(punct), _ranges(space)
    core = f"(?:[^{p}{s}]+|[{p}])"
    return re.compile(f"[{s}]*{core}"), re.compile(f"[{_ranges(astral)}]")


def _ranges(codes: list[int]) -> str:
    """A regex character class's body for these code points, runs as ranges."""
    out, start = [], 0
    for i, code in enumerate(codes):
        if i + 1 == len(codes) or codes[i + 1] != code + 1:
            first = re.escape(chr(codes[start]))
            out.append(first if start == i else f"{first}-{re.escape(chr(code))}")
            start = i + 1
    return "".join(out)


def chars_per_token(text: str, tokenizer: Tokenizer) -> float:
    """Characters per token in the densest tenth of ``SAMPLES`` windows spread over the text."""
    step = max(1, (len(text) - SAMPLE_CHARS) // SAMPLES)
    windows = [text[i : i + SAMPLE_CHARS] for i in range(0, len(text), step)][:SAMPLES]
    if not windows:
        return 1.0
    encoded = tokenizer.encode_batch_fast(windows, add_special_tokens=False)
    ratios = [len(w) / max(1, len(e.ids)) for w, e in zip(windows, encoded, strict=True)]
    return max(1.0, float(np.percentile(ratios, 10)))


Table = tuple[np.ndarray, np.ndarray, np.ndarray]  # words' starts, ends, tokens before each


def word_table(text: str, tokenizer: Tokenizer, known: dict[str, int]) -> Table | None:
    """Where each word of ``text`` starts and ends and the tokens before it (one more entry:
    the total), or None for a text with punctuation beyond the BMP (count those exactly). A
    word is counted with the whitespace before it stripped: what ``str.strip`` removes is
    whitespace or control characters, which the normaliser drops, so the count is the same.
    ``known``: words' counts from the text's sections before, added to."""
    tile, astral = _patterns()
    if max(text, default=" ") > "\uffff" and astral.search(text):
        return None
    tiles = tile.findall(text)
    words = list(map(str.lstrip, tiles))
    ends = np.cumsum(np.fromiter(map(len, tiles), dtype=np.int64, count=len(tiles)))
    starts = ends - np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    distinct = list(set(words).difference(known))
    known.update(zip(distinct, (len(e.ids) for e in tokenizer.encode_batch_fast(
        distinct, add_special_tokens=False)), strict=True))
    total = np.concatenate(([0], np.cumsum(np.fromiter(map(known.__getitem__, words),
                                                       dtype=np.int64, count=len(words)))))
    return starts, ends, total


def table_counts(table: Table, pieces: Pieces, tokenizer: Tokenizer) -> list[int]:
    """Tokens of each chunk of the text of ``table``, from its words' counts; a chunk that
    cuts a word in two is tokenized whole."""
    starts, ends, total = table
    begin = np.array([s for s, _ in pieces], dtype=np.int64)
    end = begin + np.fromiter((len(p) for _, p in pieces), dtype=np.int64, count=len(pieces))
    first = np.searchsorted(starts, begin, side="left")
    last = np.searchsorted(ends, end, side="right")
    counts = (total[last] - total[first]).tolist()
    cut = [i for i in range(len(pieces)) if (first[i] > 0 and ends[first[i] - 1] > begin[i])
           or (last[i] < len(starts) and starts[last[i]] < end[i])]
    for i, tokens in zip(cut, exact_counts([pieces[i] for i in cut], tokenizer), strict=True):
        counts[i] = tokens
    return counts


def counts_by(table: Table | None, tokenizer: Tokenizer, pieces: Pieces) -> list[int]:
    """Tokens of each chunk: from ``table`` (word_table), or exactly without one."""
    if table is None:
        return exact_counts(pieces, tokenizer)
    return table_counts(table, pieces, tokenizer)


def exact_counts(pieces: Pieces, tokenizer: Tokenizer) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch_fast([p for _, p in pieces],
                                                           add_special_tokens=False)]


def sections(text: str, size: int = SECTION_CHARS) -> list[tuple[int, int]]:
    """(start, end) of consecutive sections of about ``size`` characters covering ``text``,
    each but the last ending at the best seam of its last tenth."""
    bounds, start = [], 0
    while len(text) - start > size:
        end = start + size
        for seam in SEAMS:
            at = text.rfind(seam, end - size // 10, end)
            if at > start:
                end = at + len(seam)
                break
        bounds.append((start, end))
        start = end
    return [*bounds, (start, len(text))]


def split_large(text: str, tokenizer: Tokenizer, capacity: int, overlap: int,
                token_splitter: TextSplitter, progress: Callable[[float], None] | None = None,
                paragraph_tokens: int = PARAGRAPH_TOKENS) -> tuple[Pieces, list[int]]:
    """(start, chunk) pieces of ``text`` and their token counts, none over ``capacity``.
    ``progress``: called with the share of the text done after each section.
    ``paragraph_tokens``: as for the token splitter, each section is cut in blocks of
    paragraphs first (shared/text/paragraphs.py), the same blocks as the token splitter's."""
    ratio = chars_per_token(text, tokenizer) * SAFETY
    chars = max(16, int(capacity * ratio))
    splitter = TextSplitter((chars // 2, chars), overlap=min(int(overlap * ratio),
                                                             chars // 2 - 1), trim=True)
    pieces: Pieces = []
    counts: list[int] = []
    known: dict[str, int] = {}
    for start, end in sections(text):
        section = text[start:end]
        count = functools.partial(counts_by, word_table(section, tokenizer, known), tokenizer)
        found, found_counts = split_blocks(section, splitter, count, paragraph_tokens,
                                           capacity)
        counts += found_counts
        pieces += [(start + s, p) for s, p in found]
        if progress is not None:
            progress(end / max(1, len(text)))
    if max(counts, default=0) <= capacity:
        return pieces, counts
    # the few chunks still over the budget, split again by tokens
    return split_over(pieces, counts, capacity, token_splitter,
                      functools.partial(exact_counts, tokenizer=tokenizer))
