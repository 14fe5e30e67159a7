"""Ingest benchmark: SciFact abstracts through the real queue and worker processes, against
the in-process embedder alone on the same chunks.

    ./dev bench ingest [--docs 300] [--workers 1 2] [--graph-auto]

Starts a FalkorDB server and N worker processes; once every worker has loaded its model,
adds the documents through the front's code path (validation, task record, enqueue) and
waits until every memory is searchable (first add -> last searchable). The ceiling is the
raw embedder in this process, in the same run: the same chunks (cut by the product's
chunker) embedded by the same model with the same batch, using both cores, no cache, its
model loaded and warmed before its clock starts. Efficiency = end-to-end chunks/s ÷ raw
embedder chunks/s.
Entity extraction after ingest is off unless ``--graph-auto`` (it is a later stage with its
own benchmark, graph.py; on 2 cores it competes for the same CPU). Prints a table and writes
JSON to tests/bench/results/ingest.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tests.support.graph import stored
from tests.support.servers import falkordb_process
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.heartbeat import count_alive
from zapomni.shared.text.chunking import chunker_for

ROOT = Path(__file__).resolve().parents[2]

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def load(count: int) -> list[str]:
    with SCIFACT.open() as lines:
        return [f"{d['title']}\n\n{d['text']}" for d in
                (json.loads(line) for _, line in zip(range(count), lines, strict=False))]


def raw_embedder(texts: list[str]) -> dict:
    """The ceiling: the product's chunks of these texts through the model alone."""
    settings = Settings.from_env(environ={})
    chunker = chunker_for(settings)
    chunks = [c.text for text in texts for c in chunker.split(text)]
    embedder = OnnxEmbedder(threads=settings.onnx_threads)
    embedder.embed_sync(chunks[:32])  # warm up
    started = time.perf_counter()
    embedder.embed_sync(chunks)
    elapsed = time.perf_counter() - started
    return {"chunks": len(chunks), "seconds": round(elapsed, 2),
            "chunks_per_s": round(len(chunks) / elapsed, 1)}


async def wait_ready(client, workers: int, timeout: float = 300) -> None:
    """Until every worker has loaded its model and beats."""
    async with asyncio.timeout(timeout):
        while await count_alive(client) < workers:
            await asyncio.sleep(0.1)


async def run_once(url: str, texts: list[str], workers: int, graph_auto: bool) -> dict:
    import redis.asyncio

    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 max_queue_depth=1_000_000, graph_auto=graph_auto)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await client.flushall()
    front = Front(settings)
    latencies = []
    receipts = []
    with worker_processes(settings, workers, ZAPOMNI_ONNX_THREADS=str(max(1, 2 // workers))):
        # workers already running with their model loaded, as in service (the reference's
        # model is loaded and warmed before its clock starts too)
        await wait_ready(client, workers)
        started = time.perf_counter()
        for text in texts:
            began = time.perf_counter()
            receipts.append(await ops.add_memory(front, decode_add_memory(text, None, None)))
            latencies.append(time.perf_counter() - began)
        await wait_tasks(client, [r.task_id for r in receipts], timeout=3600,
                         until=("done", "failed"))
        elapsed = time.perf_counter() - started
    await front.aclose()
    chunks = (await stored(settings))["chunks"]
    await client.aclose()
    latencies.sort()
    return {
        "workers": workers, "docs": len(texts), "chunks": chunks,
        "seconds": round(elapsed, 2), "docs_per_s": round(len(texts) / elapsed, 1),
        "chunks_per_s": round(chunks / elapsed, 1),
        "enqueue_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "enqueue_p95_ms": round(latencies[int(len(latencies) * 0.95)] * 1000, 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=300)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--graph-auto", action="store_true",
                        help="read entities after every ingest, as the default settings do")
    args = parser.parse_args()
    texts = load(args.docs)
    raw = raw_embedder(texts)
    print(f"raw embedder: {raw['chunks']} chunks in {raw['seconds']} s = "
          f"{raw['chunks_per_s']} chunks/s", flush=True)
    rows = []
    with falkordb_process() as url:
        for n in args.workers:
            row = await run_once(url, texts, n, args.graph_auto)
            row["efficiency"] = round(row["chunks_per_s"] / raw["chunks_per_s"], 3)
            rows.append(row)
    header = ["workers", "docs", "chunks", "seconds", "docs_per_s", "chunks_per_s",
              "efficiency", "enqueue_p50_ms", "enqueue_p95_ms"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[h]) for h in header) + " |")
    out = ROOT / "tests" / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "ingest.json").write_text(json.dumps({"raw_embedder": raw, "runs": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
