"""Scaling benchmark: 1 and 4 worker processes against an Ollama-API server with a fixed
per-request latency and real vectors (tests/support/table_ollama.py), the same documents.

    ./dev bench scaling [--latency 0.2] [--workers 1 4] [--shape notes documents]
                        [--notes 600] [--documents 60] [--real 3000]

Two shapes of what a deployment ingests, both made of real passages (tests/support/vectors.py)
joined by blank lines: ``notes`` (an agent's memories: 3-6 passages, one chunk each, so one
ingest job and one embedding request per note) and ``documents`` (300 passages, ~40 chunks,
two parts). The product's defaults otherwise: 256-token chunks, 16 texts per
request, 32-chunk parts, 4 jobs per worker, entity extraction off (it is CPU, not latency).

Every document is queued first; the workers are then started, and the timed window runs from
the moment all of them have a heartbeat to the last task done (chunks written before the
window are not counted). Reports chunks/s, requests/s, the most and the mean
requests in flight, each side's CPU seconds (workers, FalkorDB, this process with the server)
and the workers' per-stage seconds from their /metrics. Prints a table; writes
tests/bench/results/scaling.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

import httpx2
import numpy as np
import redis.asyncio

from tests.support.graph import stored
from tests.support.servers import ThreadedServer, falkordb_process
from tests.support.stack import free_run
from tests.support.table_ollama import TableOllama
from tests.support.vectors import corpus
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.stack.falkordb import cpu_seconds
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import graph_name
from zapomni.shared.tasks.heartbeat import WORKERS_KEY

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
TABLE = 3000  # the model embeds ~8 passages/s on this host under load: 6 minutes, once
SUM = re.compile(r'^zapomni_(stage|falkordb_write)_seconds_sum\{(?:stage|op)="([^"]+)"\} (\S+)$')


def documents(passages: list[str], count: int, low: int, high: int, seed: int) -> list[str]:
    """``count`` texts of ``low``..``high`` passages drawn at random, joined by blank lines."""
    rng = np.random.default_rng(seed)
    return ["\n\n".join(passages[i] for i in rng.choice(len(passages),
                                                        int(rng.integers(low, high + 1)),
                                                        replace=False))
            for _ in range(count)]


async def stage_seconds(ports: list[int]) -> dict[str, float]:
    """Summed over the workers' /metrics: seconds per pipeline stage and per FalkorDB write."""
    totals: dict[str, float] = {}
    async with httpx2.AsyncClient(timeout=10) as http:
        for port in ports:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            for line in text.splitlines():
                if match := SUM.match(line):
                    key = f"{match[1]}:{match[2]}"
                    totals[key] = round(totals.get(key, 0.0) + float(match[3]), 2)
    return totals


async def chunk_count(settings: Settings) -> int:
    client = redis.asyncio.Redis.from_url(settings.falkordb_url)
    try:
        if not await client.exists(graph_name("default")):
            return 0
        reply = await client.execute_command("GRAPH.RO_QUERY", graph_name("default"),
                                             "MATCH (c:Chunk) RETURN count(c)")
        return int(reply[1][0][0])
    finally:
        await client.aclose()


async def wait_workers(client: redis.asyncio.Redis, count: int) -> None:
    """Until ``count`` workers have a heartbeat (started, resources open): the run times
    the work from then on, not the processes' start (the first up take a few jobs before)."""
    deadline = time.monotonic() + 180
    while await client.zcard(WORKERS_KEY) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} workers did not start within 180 s")
        await asyncio.sleep(0.1)


async def run_once(url: str, server: TableOllama, server_url: str, texts: list[str],
                   workers: int, shape: str, args: argparse.Namespace) -> dict:
    settings = Settings.from_env(
        environ={}, redis_url=f"{url}/0", falkordb_url=url, ollama_url=server_url,
        graph_auto=False, max_queue_depth=1_000_000)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await client.flushall()
    db_pid = int((await client.info("server"))["process_id"])
    front = Front(settings)
    receipts = [await ops.add_memory(front, decode_add_memory(t, None, None)) for t in texts]
    await front.aclose()
    server.reset_counts()
    RESULTS.mkdir(parents=True, exist_ok=True)
    first = free_run(workers)
    ports = [first + i for i in range(workers)]
    db_cpu = cpu_seconds(db_pid)
    with worker_processes(settings, workers, metrics_ports=ports,
                          log_path=RESULTS / f"scaling-{shape}-{workers}.log") as procs:
        await wait_workers(client, workers)  # the window starts when every worker is up
        started, before = time.perf_counter(), await chunk_count(settings)
        requests, own_cpu = server.requests, time.process_time()
        worker_cpu = sum(cpu_seconds(p.pid) for p in procs)
        await wait_tasks(client, [r.task_id for r in receipts], timeout=3600,
                         until=("done", "failed"))
        elapsed = time.perf_counter() - started
        worker_cpu = sum(cpu_seconds(p.pid) for p in procs) - worker_cpu
        stages = await stage_seconds(ports)
    cpu = {"workers": round(worker_cpu, 1), "falkordb": round(cpu_seconds(db_pid) - db_cpu, 1),
           "bench_and_server": round(time.process_time() - own_cpu, 1)}
    chunks = (await stored(settings))["chunks"]
    await client.aclose()
    requests = server.requests - requests
    return {
        "shape": shape, "workers": workers, "docs": len(texts), "chunks": chunks,
        "timed_chunks": chunks - before, "seconds": round(elapsed, 2),
        "chunks_per_s": round((chunks - before) / elapsed, 1),
        "requests_per_s": round(requests / elapsed, 1),
        "max_in_flight": server.max_in_flight,
        "mean_in_flight": round(requests * args.latency / elapsed, 1),
        "cpu_s": cpu, "stage_s": stages,
    }


def print_rows(rows: list[dict]) -> None:
    header = ["shape", "workers", "docs", "chunks", "seconds", "chunks_per_s",
              "requests_per_s", "max_in_flight", "mean_in_flight"]
    print("| " + " | ".join(header) + " | CPU s (workers / FalkorDB / server) |")
    print("|" + "---|" * (len(header) + 1))
    for row in rows:
        cpu = row["cpu_s"]
        print("| " + " | ".join(str(row[h]) for h in header) + f" | {cpu['workers']} / "
              f"{cpu['falkordb']} / {cpu['bench_and_server']} |")
    for row in rows:
        print(f"{row['shape']}, {row['workers']} worker(s), stage seconds: {row['stage_s']}")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        by = {r["workers"]: r for r in rows if r["shape"] == shape}
        if len(by) > 1:
            lo, hi = min(by), max(by)
            gain = by[hi]["chunks_per_s"] / by[lo]["chunks_per_s"]
            print(f"{shape}: {hi} workers make {gain:.2f}x the chunks/s of {lo}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--shape", nargs="+", default=["notes", "documents"],
                        choices=["notes", "documents"])
    parser.add_argument("--notes", type=int, default=600)
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--real", type=int, default=TABLE,
                        help="real passages in the server's table (embedded once, cached)")
    args = parser.parse_args()
    passages, vectors = corpus(args.real, args.real)
    server = TableOllama(passages, vectors, latency=args.latency)
    sizes = {"notes": (args.notes, 3, 6), "documents": (args.documents, 300, 300)}
    rows = []
    with falkordb_process() as url, ThreadedServer(server.app) as http:
        for shape in args.shape:
            count, low, high = sizes[shape]
            texts = documents(passages, count, low, high, seed=len(rows))
            for n in args.workers:
                rows.append(await run_once(url, server, http.url, texts, n, shape, args))
                print(rows[-1], flush=True)
    print_rows(rows)
    (RESULTS / "scaling.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
