"""FalkorDB write rate: the worker's chunk writes against the same rows written by a minimal
UNWIND script, at 384 and 768 dimensions, with vectors sent rounded to float32 precision (7
decimals, what the workers send) and unrounded (every digit of the float).

    ./dev bench writes [--chunks 5000] [--batch 32]

Rows are real MiniLM vectors of real text (tests/support/vectors.py); the 768-d rows join
two of them. Every run writes into a new graph with the product's indexes (range on ids,
full-text on text, HNSW with the configured options), one writer, ``--batch`` chunks per
query (a part's worth). "product" is what an ingest job does per part: write_memory,
write_chunks (MERGE on id, the memory's HAS_CHUNK edge; vectors rendered as Cypher text by
msgspec), mark_ready. "minimal" is one UNWIND ... CREATE of the chunk nodes with the same
properties, the vectors passed as plain lists as a script would (the client renders them);
"minimal, pre-rendered" is the same script with the vectors rendered as the workers do, so
the server's cost of the rows alone.
Prints a table; writes tests/bench/results/writes.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from contextlib import nullcontext
from pathlib import Path
from unittest.mock import patch

import numpy as np

from tests.support.servers import falkordb_process
from tests.support.vectors import REAL, corpus
from zapomni.shared.embedding.embed import ListLiteral, to_params
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
MINIMAL = """
UNWIND $rows AS r
CREATE (:Chunk {id: r.id, memory_id: r.memory_id, idx: r.idx, text: r.text,
                char_start: r.char_start, char_end: r.char_end, tokens: r.tokens,
                embedding: vecf32(r.vec)})
"""


def spans(texts: list[str]) -> list[ChunkSpan]:
    out, at = [], 0
    for idx, text in enumerate(texts):
        out.append(ChunkSpan(idx=idx, text=text, char_start=at, char_end=at + len(text),
                             tokens=len(text.split())))
        at += len(text) + 1
    return out


def every_digit(vectors: np.ndarray) -> list[ListLiteral]:
    return to_params(vectors, decimals=None)


async def product(store: GraphStore, namespace: str, texts: list[str], vectors: np.ndarray,
                  batch: int, rounded: bool) -> None:
    graph = store.graph(namespace)
    # unrounded: the workers' own write, with every digit of each float sent
    with patch("zapomni.workers.store.to_params", every_digit) if not rounded else nullcontext():
        for start in range(0, len(texts), batch):
            memory = f"{namespace}-{start}"
            part = texts[start : start + batch]
            job = IngestJob(task_id=memory, memory_id=memory, namespace=namespace,
                            text="\n".join(part), content_hash=memory, created_at=time.time())
            await write_memory(graph, job, len(part))
            await write_chunks(graph, memory, spans(part), vectors[start : start + batch])
            await mark_ready(graph, memory)


async def minimal(store: GraphStore, namespace: str, texts: list[str], vectors: np.ndarray,
                  batch: int, rounded: bool, rendered: bool = False) -> None:
    graph = store.graph(namespace)
    for start in range(0, len(texts), batch):
        memory = f"{namespace}-{start}"
        part = vectors[start : start + batch]
        if rendered:
            values = to_params(part, decimals=7 if rounded else None)
        else:
            values = np.round(part.astype(np.float64), 7).tolist() if rounded else part.tolist()
        rows = [{"id": f"{memory}:{s.idx}", "memory_id": memory, "idx": s.idx, "text": s.text,
                 "char_start": s.char_start, "char_end": s.char_end, "tokens": s.tokens,
                 "vec": vec}
                for s, vec in zip(spans(texts[start : start + batch]), values, strict=True)]
        await graph.query(MINIMAL, {"rows": rows})


async def minimal_rendered(store: GraphStore, namespace: str, texts: list[str],
                           vectors: np.ndarray, batch: int, rounded: bool) -> None:
    """The minimal script with the vectors rendered as the workers render them: what is left
    is the server's own cost of the rows, the floor for any client."""
    await minimal(store, namespace, texts, vectors, batch, rounded, rendered=True)


async def run(url: str, args: argparse.Namespace) -> list[dict]:
    texts, base = corpus(args.chunks + 1, REAL)
    by_dim = {384: base[:-1],
              768: np.hstack([base[:-1], base[1:]]) / np.sqrt(2, dtype=np.float32)}
    texts = texts[:-1]
    rows = []
    for dim, vectors in by_dim.items():
        for rounded in (True, False):
            row = {"dim": dim, "vectors": "7 decimals" if rounded else "every digit"}
            for name, write in (("product", product), ("minimal", minimal),
                                ("minimal_rendered", minimal_rendered)):
                settings = Settings.from_env(environ={}, falkordb_url=url, redis_url=f"{url}/0")
                store = GraphStore(settings)
                namespace = f"w{dim}{name}{int(rounded)}"
                await prepare_namespace(store, namespace, "bench", dim)
                started = time.perf_counter()
                await write(store, namespace, texts, vectors, args.batch, rounded)
                row[name] = round(len(texts) / (time.perf_counter() - started), 1)
                await store.graph(namespace).delete()
                await store.aclose()
            row["ratio"] = round(row["product"] / row["minimal"], 3)
            row["ratio_rendered"] = round(row["product"] / row["minimal_rendered"], 3)
            print(row, flush=True)
            rows.append(row)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    with falkordb_process() as url:
        rows = await run(url, args)
    print("| dim | vectors sent | product chunks/s | minimal chunks/s | product / minimal "
          "| minimal, vectors pre-rendered | product / that |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dim']} | {r['vectors']} | {r['product']} | {r['minimal']} | {r['ratio']} "
              f"| {r['minimal_rendered']} | {r['ratio_rendered']} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "writes.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
