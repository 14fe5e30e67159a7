"""The in-process model's thread pools when several workers share a host: texts/s and CPU per text.

    ./dev bench threads [--workers 2] [--callers 4] [--texts 256] [--configs 0:spin 1 2 0]

Each of ``--workers`` processes (the workers of one host) builds the model's session with a
config (``N``: N intra-op threads, no spinning; ``N:spin``: spinning on; 0: onnxruntime's
choice, every core) and embeds ``--texts`` 256-token texts from ``--callers`` threads at once
(a worker's concurrent jobs). Per config: the wall time of the whole host, texts/s, and the
CPU seconds per text over all processes (spinning threads burn CPU that waits for work).
Wall times mean something on a quiet host only; CPU per text holds up under load. The
product's choice is embed_onnx.WORKER_THREADS (1, no spinning). Prints a table; writes
tests/bench/results/threads.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
TEXT = "The harbour master logs each ferry's arrival, its cargo and the tide at the pier; " * 12


def one_worker(threads: int, spinning: bool, callers: int, count: int, seed: int) -> dict:
    from zapomni.shared.embedding.embed_onnx import OnnxEmbedder

    embedder = OnnxEmbedder(threads=threads, spinning=spinning)
    texts = [f"{seed}.{i} {TEXT}" for i in range(count)]
    embedder.embed_sync(texts[:2])  # the session warmed
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    share = -(-count // callers)
    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(lambda k: embedder.embed_sync(texts[k * share:(k + 1) * share]),
                      range(callers)))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": time.perf_counter() - started, "cpu_s": cpu,
            "os_threads": len(os.listdir("/proc/self/task"))}


def run_config(config: str, args: argparse.Namespace) -> dict:
    threads, _, spin = config.partition(":")
    spinning = spin == "spin" or int(threads) == 0
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")
                             ) as pool:
        runs = list(pool.map(one_worker, [int(threads)] * args.workers,
                             [spinning] * args.workers, [args.callers] * args.workers,
                             [args.texts] * args.workers, range(args.workers)))
    wall = time.perf_counter() - started
    texts = args.texts * args.workers
    return {"config": config, "threads": int(threads), "spinning": spinning,
            "workers": args.workers, "callers": args.callers, "texts": texts,
            "slowest_worker_s": round(max(r["wall_s"] for r in runs), 2),
            "host_wall_s": round(wall, 2),
            "texts_per_s": round(texts / max(r["wall_s"] for r in runs), 1),
            "cpu_ms_per_text": round(1000 * sum(r["cpu_s"] for r in runs) / texts, 1),
            "os_threads_per_worker": max(r["os_threads"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--texts", type=int, default=256, help="texts per worker")
    parser.add_argument("--configs", nargs="+", default=["0:spin", "1", "2", "0"])
    args = parser.parse_args()
    load = os.getloadavg()
    rows = [run_config(config, args) for config in args.configs]
    print(f"load average {load[0]:.1f}, {os.cpu_count()} cores")
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "threads.json").write_text(json.dumps({"load": load, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
