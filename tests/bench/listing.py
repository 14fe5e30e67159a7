"""list_memories benchmark: a page's latency at N memories, first page and pages from a
cursor, newest and oldest first, with and without a filter; and the expiry sweep's read.

    ./dev bench listing [--memories 10000 50000] [--runs 30]

Memory nodes are written straight into FalkorDB (the properties the listing reads), so the
numbers are the query service's read alone. Prints a table (p50/p95 ms per case and the plan's
scan: label or created_at index) and writes tests/bench/results/listing.json. Not part of the
test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from services.query.listing import list_memories, write_cursor
from shared import cypher
from shared.graphstore import GraphStore, run
from shared.messages import ListRequest, SearchFilters
from shared.settings import Settings
from tests.support.servers import falkordb_process

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
FILL = """
UNWIND $rows AS r
CREATE (:Memory {id: r[0], created_at: r[1], text: r[2], tags: r[3], source: 'bench',
                 metadata: '{}', meta_kv: [], chunk_count: 1, ready: true, task_id: '',
                 expires_at: r[4], pinned: false})
"""


async def fill(store: GraphStore, count: int, now: float) -> None:
    graph = store.graph("bench")
    for query in cypher.SCHEMA:
        await run(graph, query)
    for start in range(0, count, 2000):
        rows = [[f"mem_{i:032x}", now - (count - i) * 0.5,
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


def cases(count: int, now: float) -> dict[str, ListRequest]:
    middle = write_cursor("newest", int((now - count * 0.25) * 1e6), f"mem_{count // 2:032x}")
    top = write_cursor("newest", int((now - 60) * 1e6), f"mem_{count - 120:032x}")
    return {
        "newest, first page": ListRequest(namespace="bench"),
        "newest, page 2": ListRequest(namespace="bench", cursor=top),
        "newest, middle page": ListRequest(namespace="bench", cursor=middle),
        "oldest, first page": ListRequest(namespace="bench", order="oldest"),
        "newest, 1% tag filter": ListRequest(namespace="bench",
                                             filters=SearchFilters(tags=["rare"])),
        "newest, 200 per page": ListRequest(namespace="bench", limit=200),
    }


async def scan_of(store: GraphStore, request: ListRequest) -> str:
    query = cypher.LIST_NEWEST_FROM if request.cursor else cypher.LIST_NEWEST
    plan = await store.graph("bench").explain(query, {
        "now": 0.0, "superseded": False, "source": None, "tags": None, "tags_all": None,
        "meta_kv": None, "after": None, "before": None, "limit": 51, "head": 256, "us": 0,
        "id": "", "bound": 0.0})
    text = str(plan)
    return "index" if "Index Scan" in text else "label"


async def bench(url: str, count: int, runs: int) -> list[dict]:
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url)
    store = GraphStore(settings)
    now = time.time()
    try:
        await store.db.connection.flushall()
        await fill(store, count, now)
        rows = []
        for name, request in cases(count, now).items():
            p50, p95 = await timed(lambda r=request: list_memories(store, r), runs)
            rows.append({"memories": count, "case": name, "p50_ms": round(p50, 1),
                         "p95_ms": round(p95, 1), "scan": await scan_of(store, request)})
        p50, p95 = await timed(lambda: run(store.graph("bench"), cypher.EXPIRED, {
            "now": now, "after": "", "limit": 200}, read_only=True), runs)
        rows.append({"memories": count, "case": "expiry sweep page (1% expired)",
                     "p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "scan": "index"})
        return rows
    finally:
        await store.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    rows = []
    with falkordb_process() as url:
        for count in args.memories:
            rows += await bench(url, count, args.runs)
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "listing.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
