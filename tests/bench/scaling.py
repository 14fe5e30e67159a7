"""Scaling benchmark: 1 and 4 worker processes against the Ollama-API test server with
injected latency, so embedding waits on the network the way it does with a remote Ollama.

    ./dev bench scaling [--docs 40] [--latency 0.05] [--workers 1 4]

Reports chunks/s end to end (enqueue -> every task done), embedding requests/s, and the
concurrency efficiency: requests/s per worker / (32 in flight / latency). Prints a table and
writes tests/bench/results/scaling.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import redis.asyncio

from tests.support.fake_ollama import FakeOllama
from tests.support.graph import stored
from tests.support.servers import ThreadedServer, falkordb_process
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.settings import Settings
from zapomni.shared.validation import decode_add_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"


def documents(count: int) -> list[str]:
    return [" ".join(f"Document {d}, line {i}: shipment {d * 1000 + i} left warehouse {i % 17} "
                     f"for harbour {d % 5} on schedule." for i in range(400))
            for d in range(count)]


async def run_once(url: str, fake: FakeOllama, texts: list[str], workers: int,
                   args: argparse.Namespace) -> dict:
    settings = Settings.from_env(
        environ={}, redis_url=f"{url}/0", falkordb_url=url, ollama_url=fake.url,
        part_chunks=args.part_chunks, chunk_tokens=64, chunk_overlap=8, max_jobs=4,
        embed_batch=args.batch, max_queue_depth=1_000_000)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await client.flushall()
    front = Front(settings)
    receipts = [await ops.add_memory(front, decode_add_memory(t, None, None)) for t in texts]
    await front.aclose()
    fake.reset_counts()
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with worker_processes(settings, workers, log_path=RESULTS / f"scaling-{workers}.log"):
        await wait_tasks(client, [r.task_id for r in receipts], timeout=3600,
                         until=("done", "failed"))
        elapsed = time.perf_counter() - started
    chunks = (await stored(settings))["chunks"]
    await client.aclose()
    ceiling = 32 / args.latency  # requests/s one worker could make with 32 in flight
    return {
        "workers": workers, "docs": len(texts), "chunks": chunks, "seconds": round(elapsed, 2),
        "chunks_per_s": round(chunks / elapsed, 1),
        "requests_per_s": round(fake.requests / elapsed, 1),
        "max_in_flight": fake.max_in_flight,
        "efficiency_per_worker": round(fake.requests / elapsed / workers / ceiling, 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--part-chunks", type=int, default=128)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    texts = documents(args.docs)
    fake = FakeOllama(dim=768)
    fake.latency = args.latency
    rows = []
    with falkordb_process() as url, ThreadedServer(fake.app) as server:
        fake.url = server.url
        for n in args.workers:
            rows.append(await run_once(url, fake, texts, n, args))
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    if len(rows) > 1:
        print(f"speed-up {rows[-1]['workers']} vs {rows[0]['workers']} workers: "
              f"{rows[-1]['chunks_per_s'] / rows[0]['chunks_per_s']:.2f}x")
    (RESULTS / "scaling.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
