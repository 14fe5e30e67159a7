"""Paragraphs first: the evaluation sets' chunks and the joined memory's, before and after.

    ./dev bench paragraphs [--paragraph-tokens 32] [--sample 30]

Chunks each document of the retrieval benchmark's sets (tests/bench/retrieval.py, from
../shared/data) and the mixed benchmark's joined memory (tests/bench/mixed.py, ``--sample``
as there; 0: the full set) three ways, 256-token chunks with overlap 32: as before
(ZAPOMNI_CHUNK_PARAGRAPH_TOKENS 0), paragraphs first (``--paragraph-tokens``), and
semantic-text-splitter's own range with that minimum, ``(N, 254)``, the alternative not
taken. Per set: chunks, tokens per chunk (p10 / p50 / p90), the documents whose chunks
differ from before (none: the set's retrieval figures cannot move) and, for the joined
memory, the HotpotQA paragraphs a chunk shows (as the mixed benchmark counts them). Prints
a table; writes tests/bench/results/paragraphs.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import numpy as np
from semantic_text_splitter import TextSplitter

from tests.bench.mixed import docs_at, join_half, labelled
from tests.bench.retrieval import LOADERS, RESULTS, Doc
from zapomni.shared.chunking import PARAGRAPH_TOKENS, Chunker

Cut = list[list[tuple[int, int]]]  # each document's chunks as (start, end)


def cut(docs: list[Doc], split) -> tuple[Cut, list[int]]:
    spans, tokens = [], []
    for doc in docs:
        pieces, counts = split(doc.text)
        spans.append([(s, s + len(p)) for s, p in pieces])
        tokens += counts
    return spans, tokens


def row(name: str, way: str, spans: Cut, tokens: list[int], before: Cut) -> dict:
    return {"set": name, "way": way, "docs": len(spans), "chunks": sum(map(len, spans)),
            "tokens_p10_p50_p90": [int(np.percentile(tokens, q)) for q in (10, 50, 90)],
            "docs_changed": sum(a != b for a, b in zip(spans, before, strict=True))}


def measure(name: str, docs: list[Doc], ways: dict) -> list[dict]:
    before, tokens = cut(docs, ways["before"])
    rows = [row(name, "before", before, tokens, before)]
    for way, split in list(ways.items())[1:]:
        spans, tokens = cut(docs, split)
        rows.append(row(name, way, spans, tokens, before))
    print(*map(json.dumps, rows), sep="\n", flush=True)
    return rows


def split_ranged(splitter: TextSplitter, chunker: Chunker, text: str
                 ) -> tuple[list[tuple[int, str]], list[int]]:
    pieces = splitter.chunk_indices(text)
    return pieces, chunker.count(pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraph-tokens", type=int, default=PARAGRAPH_TOKENS)
    parser.add_argument("--sample", type=int, default=30)
    args = parser.parse_args()
    old, new = Chunker(256, 32, 0), Chunker(256, 32, args.paragraph_tokens)
    floor = new.paragraph_tokens
    ranged = TextSplitter.from_huggingface_tokenizer(new.tokenizer, (floor, new.capacity),
                                                     overlap=min(32, floor - 1), trim=True)
    ways = {"before": old.split_text, f"paragraphs first ({floor})": new.split_text,
            f"splitter range ({floor}, {new.capacity})": partial(split_ranged, ranged, new)}
    rows = []
    for name, load in LOADERS.items():
        rows += measure(name, load()[0], ways)
    _, joined, paragraphs = join_half(labelled(args.sample)[0])
    joined_rows = measure(f"joined memory ({len(paragraphs)} paragraphs)", [joined], ways)
    for entry, split in zip(joined_rows, ways.values(), strict=True):
        shown = [docs_at(paragraphs, s, s + len(p)) for s, p in split(joined.text)[0]]
        entry["one_paragraph"] = round(float(np.mean([len(d) == 1 for d in shown])), 3)
        entry["paragraphs_per_chunk"] = round(float(np.mean([len(d) for d in shown])), 2)
    rows += joined_rows
    print(table(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "paragraphs.json").write_text(json.dumps(rows, indent=2))


def table(rows: list[dict]) -> str:
    lines = ["| set | way | docs | chunks | tokens p10 / p50 / p90 | docs whose chunks differ "
             "| chunks showing one paragraph | paragraphs per chunk |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['set']} | {r['way']} | {r['docs']:,} | {r['chunks']:,} | "
              f"{' / '.join(map(str, r['tokens_p10_p50_p90']))} | {r['docs_changed']:,} | "
              f"{r.get('one_paragraph', '–')} | {r.get('paragraphs_per_chunk', '–')} |"
              for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
