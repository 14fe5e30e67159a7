"""The chunk-vector cache (shared/embedding/vector_cache.py) filled past its limit: what it costs a
worker's batch to write, and what Redis holds once the limit binds.

    ./dev bench vector_cache [--vectors 300000] [--limit 100000] [--dim 384] [--batch 32]

Writes ``--vectors`` distinct random vectors in batches of ``--batch`` (a worker's embedding
batch) into a fresh Redis-compatible server (the embedded FalkorDB) with the product's TTL,
and reads each batch back once. Prints, per phase (below the limit, and while every write
also drops the oldest): write and read p50/p95 ms per batch, then the keys and the
server's used memory at the end, and the bytes per vector held. Writes
tests/bench/results/vector_cache.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import numpy as np
import redis.asyncio

from tests.support.servers import falkordb_process
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.vector_cache import VectorCache

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


async def run(url: str, args: argparse.Namespace) -> dict:
    client = redis.asyncio.Redis.from_url(url)
    cache = VectorCache("zapomni:emb", "bench:model", ttl=30 * 86400, limit=args.limit)
    rng = np.random.default_rng(0)
    timings: dict[str, dict[str, list[float]]] = {
        "below the limit": {"write": [], "read": []},
        "at the limit (each write drops the oldest)": {"write": [], "read": []}}
    written = 0
    try:
        baseline = (await client.info("memory"))["used_memory"]
        while written < args.vectors:
            texts = [f"chunk {written + i}" for i in range(args.batch)]
            vectors = rng.random((args.batch, args.dim), dtype=np.float32)
            phase = ("below the limit" if written + args.batch <= args.limit
                     else "at the limit (each write drops the oldest)")
            started = time.perf_counter()
            await vector_cache.write(client, cache, texts, vectors)
            timings[phase]["write"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            found = await vector_cache.read(client, cache, texts)
            timings[phase]["read"].append((time.perf_counter() - started) * 1000)
            assert all(found), "a vector just written was not read back"
            written += args.batch
            if written % 50_000 < args.batch:
                print(f"vector_cache: {written:,} written", flush=True)
        keys = await client.dbsize()
        used = (await client.info("memory"))["used_memory"] - baseline
        held = await client.zcard(cache.index)
    finally:
        await client.aclose()
    phases = {}
    for phase, kinds in timings.items():
        if kinds["write"]:
            w50, w95 = quantiles(kinds["write"])
            r50, r95 = quantiles(kinds["read"])
            phases[phase] = {"batches": len(kinds["write"]), "write_p50_ms": round(w50, 2),
                             "write_p95_ms": round(w95, 2), "read_p50_ms": round(r50, 2),
                             "read_p95_ms": round(r95, 2)}
    return {"vectors_written": written, "limit": args.limit, "dim": args.dim,
            "batch": args.batch, "vectors_held": held, "keys": keys,
            "used_memory_mb": round(used / 2**20, 1),
            "bytes_per_vector": round(used / max(held, 1)), "phases": phases}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vectors", type=int, default=300_000)
    parser.add_argument("--limit", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    with falkordb_process() as url:
        result = await run(url, args)
    for phase, row in result["phases"].items():
        print(f"{phase}: {row}")
    print({k: v for k, v in result.items() if k != "phases"})
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "vector_cache.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
