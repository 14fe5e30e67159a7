"""list_memories benchmark: a page's latency at N memories, first page and pages from a
cursor, newest and oldest first, with and without a filter; and the expiry sweep's read.

    ./dev bench listing [--memories 10000 50000] [--runs 30] [--spacing 60 0.5]

Memory nodes are written straight into FalkorDB (the properties the listing reads), so the
numbers are the query service's read alone. Prints a table (p50/p95 ms per case, and how many
queries a page took: windows of creation times widened, or the whole namespace) and writes
tests/bench/results/listing.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from tests.support.servers import falkordb_process
from zapomni.services.query import listing
from zapomni.services.query.listing import list_memories, write_cursor
from zapomni.shared.protocol.api import ListRequest, SearchFilters
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_lists, cypher_schema
from zapomni.shared.store.graphstore import GraphStore, run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
FILL = """
UNWIND $rows AS r
CREATE (:Memory {id: r[0], created_at: r[1], text: r[2], tags: r[3], source: 'bench',
                 metadata: '{}', meta_kv: [], chunk_count: 1, ready: true, task_id: '',
                 expires_at: r[4], pinned: false})
"""


async def fill(store: GraphStore, count: int, now: float, spacing: float) -> None:
    graph = store.graph("bench")
    for query in cypher_schema.SCHEMA:
        await run(graph, query)
    for start in range(0, count, 2000):
        rows = [[f"mem_{i:032x}", now - (count - i) * spacing,
                 f"Note {i} on the harbour cranes\n" + "body " * 60,
                 ["rare"] if i % 100 == 0 else ["common"],
                 now - 60 if i % 100 == 1 else None]
                for i in range(start, min(count, start + 2000))]
        await run(graph, FILL, {"rows": rows})


async def timed(call, runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.95 * (len(samples) - 1))]


def cases(count: int, now: float, spacing: float) -> dict[str, ListRequest]:
    middle = write_cursor("newest", int((now - count * spacing / 2) * 1e6),
                          f"mem_{count // 2:032x}")
    top = write_cursor("newest", int((now - 50 * spacing) * 1e6), f"mem_{count - 50:032x}")
    return {
        "newest, first page": ListRequest(namespace="bench"),
        "newest, page 2": ListRequest(namespace="bench", cursor=top),
        "newest, middle page": ListRequest(namespace="bench", cursor=middle),
        "oldest, first page": ListRequest(namespace="bench", order="oldest"),
        "newest, 1% tag filter": ListRequest(namespace="bench",
                                             filters=SearchFilters(tags=["rare"])),
        "newest, 200 per page": ListRequest(namespace="bench", limit=200),
    }


async def tries(store: GraphStore, request: ListRequest) -> int:
    """How many queries the page took (windows widened, or the whole namespace)."""
    count = 0
    real = listing.run

    async def counted(*args, **kwargs):
        nonlocal count
        count += 1
        return await real(*args, **kwargs)

    listing.run = counted
    try:
        await list_memories(store, request)
    finally:
        listing.run = real
    return count


async def bench(url: str, count: int, runs: int, spacing: float) -> list[dict]:
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url)
    store = GraphStore(settings)
    now = time.time()
    try:
        await store.db.connection.flushall()
        await fill(store, count, now, spacing)
        rows = []
        for name, request in cases(count, now, spacing).items():
            p50, p95 = await timed(lambda r=request: list_memories(store, r), runs)
            rows.append({"memories": count, "spacing_s": spacing, "case": name,
                         "p50_ms": round(p50, 1), "p95_ms": round(p95, 1),
                         "queries": await tries(store, request)})
        p50, p95 = await timed(lambda: run(store.graph("bench"), cypher_lists.EXPIRED, {
            "now": now, "after": "", "limit": 200}, read_only=True), runs)
        rows.append({"memories": count, "spacing_s": spacing,
                     "case": "expiry sweep page (1% expired)",
                     "p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "queries": 1})
        return rows
    finally:
        await store.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--spacing", type=float, nargs="+", default=[60.0, 0.5],
                        help="seconds between two memories' creation times")
    args = parser.parse_args()
    rows = []
    with falkordb_process() as url:
        for count in args.memories:
            for spacing in args.spacing:
                rows += await bench(url, count, args.runs, spacing)
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "listing.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
