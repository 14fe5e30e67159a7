"""Ollama concurrency: how close the workers' embedder comes to 32 requests in flight, against
the Ollama-API test server (tests/support/fake_ollama.py) with injected latency.

    ./dev bench ollama [--texts 4096] [--latency 0.05] [--processes 1 4] [--batch 16 1]
                       [--dim 768]

Each of N processes runs the product's OllamaEmbedder (made by make_embedder from the
settings: 32 in flight, one pooled httpx2 client) over ``--texts`` chunk-sized texts; the
test server runs in this process. Efficiency per process = its requests/s ÷ (32 / latency),
the most a process with 32 requests in flight can make. Also the CPU seconds each side
spent per request, which is what stops the ratio on a small machine. The end-to-end ingest
with this server is ``./dev bench scaling`` (there the FalkorDB writes set the pace).
Prints a table; writes tests/bench/results/ollama.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tests.support.fake_ollama import FakeOllama
from tests.support.servers import ThreadedServer
from zapomni.shared.embedding.embed_ollama import OllamaEmbedder
from zapomni.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"


def texts(count: int, offset: int) -> list[str]:
    return [f"Shipment {offset + i} left warehouse {i % 17} for harbour {i % 5} on schedule; "
            "the manifest lists crates of machine parts, sealed and checked at the gate. " * 3
            for i in range(count)]


def embed_in_process(url: str, count: int, offset: int, batch: int, start_at: float) -> dict:
    """One worker's embedder over ``count`` texts; runs in a child process."""
    settings = Settings.from_env(environ={}, ollama_url=url)

    async def go() -> dict:
        embedder = OllamaEmbedder(settings.ollama_url, settings.ollama_model, batch=batch)
        await embedder.dimension()
        work = texts(count, offset)
        while time.time() < start_at:  # every process starts together
            await asyncio.sleep(0.001)
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        await embedder.embed(work)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        await embedder.aclose()
        requests = -(-count // batch)
        return {"seconds": elapsed, "requests": requests,
                "cpu_s": (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)}

    return asyncio.run(go())


def run_once(url: str, fake: FakeOllama, processes: int, batch: int,
             args: argparse.Namespace) -> dict:
    fake.reset_counts()
    server_cpu = time.process_time()
    start_at = time.time() + 3.0
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        runs = list(pool.map(embed_in_process, [url] * processes, [args.texts] * processes,
                             [i * args.texts for i in range(processes)],
                             [batch] * processes, [start_at] * processes))
    server_cpu = time.process_time() - server_cpu
    ceiling = 32 / args.latency
    per_s = [r["requests"] / r["seconds"] for r in runs]
    requests = sum(r["requests"] for r in runs)
    return {
        "processes": processes, "batch": batch, "dim": args.dim,
        "requests_per_s": round(sum(per_s), 1),
        "per_process": round(sum(per_s) / processes, 1),
        "efficiency": round(sum(per_s) / processes / ceiling, 3),
        "max_in_flight": fake.max_in_flight,
        "client_cpu_ms_per_request": round(1000 * sum(r["cpu_s"] for r in runs) / requests, 2),
        "server_cpu_ms_per_request": round(1000 * server_cpu / max(1, fake.requests), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--texts", type=int, default=4096)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--batch", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--dim", type=int, default=768)
    args = parser.parse_args()
    fake = FakeOllama(dim=args.dim)
    fake.latency = args.latency
    rows = []
    with ThreadedServer(fake.app) as server:
        for batch in args.batch:
            for processes in args.processes:
                rows.append(run_once(server.url, fake, processes, batch, args))
                print(rows[-1], flush=True)
    header = list(rows[0])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row[h]) for h in header) + " |")
    for batch in args.batch:
        by = {r["processes"]: r for r in rows if r["batch"] == batch}
        if len(by) > 1:
            lo, hi = min(by), max(by)
            gain = by[hi]["requests_per_s"] / by[lo]["requests_per_s"]
            print(f"batch {batch}: {hi} processes make {gain:.2f}x the requests/s of {lo}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ollama.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
