"""Chunking large texts: the token splitter against the character split with word-by-word
token counts (shared/text/large_text.py) that Chunker uses from LARGE_TEXT characters.

    ./dev bench chunking [--mb 1.6 10] [--compare-mb 1.6] [--paragraph-tokens 32]

The text: SciFact's titles and abstracts (../shared/data/scifact) as paragraphs, repeated to
size. One thread for the tokenizer (RAYON_NUM_THREADS=1 is set here) and CPU seconds beside
wall seconds (the host is shared). For the ``--compare-mb`` text both ways: chunks, tokens
per chunk (p10 / p50 / p90), the share of chunks that end a sentence or a paragraph, the
share overlapping the next. Both ways cut paragraphs first as the product does
(PARAGRAPH_TOKENS, shared/text/paragraphs.py). Prints a table; writes
tests/bench/results/chunking.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from zapomni.shared.text.chunking import PARAGRAPH_TOKENS, Chunker  # noqa: E402
from zapomni.shared.text.large_text import split_large  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"
RESULTS = ROOT / "tests" / "bench" / "results"
SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")


def text_of(mb: float) -> str:
    with DATA.open() as lines:
        paragraphs = [f"{d['title']}\n\n{d['text']}" for d in map(json.loads, lines)]
    text = "\n\n".join(paragraphs)
    size = int(mb * 1_000_000)
    return (text * (size // len(text) + 1))[:size]


def token_way(chunker: Chunker, text: str) -> tuple[list[tuple[int, str]], list[int]]:
    return chunker.split_text(text)


def fast_way(chunker: Chunker, text: str) -> tuple[list[tuple[int, str]], list[int]]:
    return split_large(text, chunker.tokenizer, chunker.capacity, chunker.overlap,
                       chunker._splitter, paragraph_tokens=chunker.paragraph_tokens)


def measure(name: str, way, chunker: Chunker, text: str) -> dict:
    wall, cpu = time.perf_counter(), time.process_time()
    pieces, counts = way(chunker, text)
    row = {"way": name, "paragraph_tokens": chunker.paragraph_tokens,
           "mb": round(len(text) / 1e6, 2), "wall_s": round(time.perf_counter()
           - wall, 2), "cpu_s": round(time.process_time() - cpu, 2), "chunks": len(pieces),
           "max_tokens": max(counts)}
    assert all(text[s : s + len(p)] == p for s, p in pieces)
    ends = [s + len(p) for s, p in pieces]
    row["tokens_p10_p50_p90"] = [int(np.percentile(counts, q)) for q in (10, 50, 90)]
    row["sentence_end"] = round(float(np.mean([bool(SENTENCE_END.search(p))
                                               for _, p in pieces])), 3)
    row["paragraph_end"] = round(float(np.mean([text[e : e + 2] == "\n\n" or e == len(text)
                                                for e in ends])), 3)
    row["overlapping"] = round(float(np.mean([b[0] < e for b, e in zip(pieces[1:], ends,
                                                                      strict=False)])), 3)
    print(row, flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, nargs="+", default=[1.6, 10.0])
    parser.add_argument("--compare-mb", type=float, default=1.6)
    parser.add_argument("--paragraph-tokens", type=int, default=PARAGRAPH_TOKENS)
    args = parser.parse_args()
    chunker = Chunker(256, 32, args.paragraph_tokens)
    split_large("warm up the patterns", chunker.tokenizer, chunker.capacity, 32,
                chunker._splitter)
    rows = [measure("token splitter", token_way, chunker, text_of(args.compare_mb))]
    rows += [measure("characters + word counts", fast_way, chunker, text_of(mb))
             for mb in args.mb]
    lines = ["| way | MB | wall s | CPU s | chunks | tokens p10 / p50 / p90 | max | ends a "
             "sentence | ends a paragraph | overlaps the next |", "|---|---|---|---|---|---|"
             "---|---|---|---|"]
    lines += [f"| {r['way']} | {r['mb']} | {r['wall_s']} | {r['cpu_s']} | {r['chunks']:,} | "
              f"{' / '.join(map(str, r['tokens_p10_p50_p90']))} | {r['max_tokens']} | "
              f"{r['sentence_end']:.1%} | {r['paragraph_end']:.1%} | {r['overlapping']:.1%} |"
              for r in rows]
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chunking.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
