"""The keyword pool's own work at a million chunks, without a million chunks: postings of the
sizes a question's pool terms hold at 1M (the curve's profile, docs/benchmarks.md: 154k /
264k postings at p50 / p95) read from a real FalkorDB server in one pipeline of GETs and
summed, then the best 200 chosen (services/query/postings.py's score and best).

    ./dev bench keyword_pool [--postings 154000 264000] [--terms 6] [--repeats 30]

Chunk numbers up to 1M, each term's sorted (as the workers append them); counts 1-3, lengths
40-140 words. Prints p50 / p95 ms per size. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
import redis.asyncio

from tests.support.servers import falkordb_server
from zapomni.services.query import postings as pool
from zapomni.shared.store.postings import RECORD

CHUNKS = 1_000_000


async def measure(url: str, total: int, terms: int, repeats: int) -> tuple[float, float]:
    client = redis.asyncio.Redis.from_url(url)
    rng = np.random.default_rng(total)
    sizes = rng.multinomial(total, np.linspace(2, 1, terms) / np.linspace(2, 1, terms).sum())
    for i, n in enumerate(sizes):
        records = np.zeros(n, RECORD)
        records["seq"] = np.sort(rng.choice(CHUNKS, n, replace=False)) + 1
        records["tf"] = rng.integers(1, 4, n)
        records["dl"] = rng.integers(40, 140, n)
        await client.set(f"term:{i}", records.tobytes())
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for i in range(terms):
            pipe.get(f"term:{i}")
        arrays = [np.frombuffer(blob, RECORD) for blob in await pipe.execute()]
        pool.score([1.0 + i for i in range(terms)], arrays, 90.0).best(200)
        times.append((time.perf_counter() - started) * 1000)
    await client.aclose()
    return round(float(np.percentile(times, 50)), 2), round(float(np.percentile(times, 95)), 2)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postings", type=int, nargs="+", default=[154_000, 264_000])
    parser.add_argument("--terms", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with falkordb_server() as url:
        for total in args.postings:
            p50, p95 = await measure(url, total, args.terms, args.repeats)
            print(f"{total:,} postings over {args.terms} terms: read, summed, best 200: "
                  f"p50 / p95 {p50} / {p95} ms", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
