"""The keyword pool's own work at a million chunks, without a million chunks: postings of the
sizes a question's pool terms hold at 1M (the curve's profile, docs/benchmarks.md: 154k /
264k postings at p50 / p95) read from a real FalkorDB server in one pipeline of GETs and
summed, then the best 200 chosen (services/query/postings.py's score and best).

    ./dev bench keyword_pool [--postings 154000 264000] [--terms 6] [--repeats 30]
                             [--write 3000]

Chunk numbers up to 1M, each term's sorted (as the workers append them); counts 1-3, lengths
40-140 words. Prints p50 / p95 ms per size.

And the write side: ``--write`` chunks of real text (this Python's standard library source,
1,500 characters a chunk) numbered, counted, appended and settled (postings.index_written: the
workers' write_postings and settle) in
batches of 23 (a document's chunks), the CPU per chunk of this process (the worker's side:
splitting, stemming, building and sending) and of the server (/proc), after a first pass
that fills the stem cache. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import sysconfig
import time
from pathlib import Path

import numpy as np
import redis.asyncio

from tests.support.servers import falkordb_server
from zapomni.services.query import postings as pool
from zapomni.services.stack.falkordb import cpu_seconds
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.postings import RECORD, counts_of, index_written

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


def stdlib_chunks(count: int) -> list[str]:
    """``count`` pieces of 1,500 characters of the standard library's source, in file order."""
    out: list[str] = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = path.read_text(errors="replace")
        out += [text[i : i + 1500] for i in range(0, len(text) - 1500, 1500)]
        if len(out) >= count:
            return out[:count]
    return out


async def write_cost(url: str, count: int) -> tuple[float, float]:
    """ms of CPU per chunk written: this process's, the server's (a second pass's)."""
    store = GraphStore(Settings.from_env(environ={}, falkordb_url=url, redis_url=f"{url}/0"))
    graph = store.graph("keyword_pool_bench")
    server = int((await graph.raw.info("server"))["process_id"])
    texts = stdlib_chunks(count)
    try:
        for rnd in range(2):
            mine, theirs = time.process_time(), cpu_seconds(server)
            for start in range(0, len(texts), 23):
                batch = [(f"mem_{rnd:032x}:{start + i}", text)
                         for i, text in enumerate(texts[start : start + 23])]
                await index_written(graph, counts_of(batch))
            mine, theirs = time.process_time() - mine, cpu_seconds(server) - theirs
    finally:
        await store.aclose()
    return round(mine / len(texts) * 1000, 3), round(theirs / len(texts) * 1000, 3)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postings", type=int, nargs="+", default=[154_000, 264_000])
    parser.add_argument("--terms", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--write", type=int, default=3000, help="chunks written (0: none)")
    args = parser.parse_args()
    with falkordb_server() as url:
        if args.write:
            mine, theirs = await write_cost(url, args.write)
            print(f"write_postings of {args.write:,} stdlib chunks: CPU per chunk "
                  f"{mine} ms here (the worker's), {theirs} ms the server's", flush=True)
        for total in args.postings:
            p50, p95 = await measure(url, total, args.terms, args.repeats)
            print(f"{total:,} postings over {args.terms} terms: read, summed, best 200: "
                  f"p50 / p95 {p50} / {p95} ms", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
