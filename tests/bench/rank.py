"""Access tracking's cost to search at the query service, and rank="memory"'s.

    python -m tests.bench.rank [--memories 2000] [--queries 200] [--rounds 12] [--block 20]

``--memories`` real passages (tests/support/vectors.py: sentences of ../shared/data embedded
by the product's model, cached on disk) are written as one-chunk memories with the worker's
own store functions into a FalkorDB server on a free port; the queries are the sets' own
questions, each asked once before timing (so every query's embedding is a Redis cache hit).
Then the query service's ``search_memory``, in this process, one search at a time, in three
arms:

- off: ZAPOMNI_ACCESS_TRACKING=false (nothing recorded);
- on: every search records its hits (the XADD task runs on the event loop while the next
  search waits on FalkorDB: its work lands where it would in the service);
- memory: tracking on and rank="memory".

Each round asks every query in every arm, in blocks of ``--block`` queries: each block in
all three arms side by side, the arms' order rotating from block to block and reversed every
other round, so the machine's changing load falls on every arm alike. Between rounds,
outside the timing, the worker's fold runs over what the round recorded (its rate is
reported). Reported per arm: p50/p95 of all its searches, the CPU time of this thread per
search (the event loop's work, which is what tracking adds: its waits overlap the next
search's), and for on and memory the difference from off, as the median and 5-95% range
over resamples of the blocks; then the record() call alone and its XADD awaited alone.
Writes tests/bench/results/rank.json. Target: tracking adds <= 1 ms to search p95.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import redis.asyncio
from arq.connections import ArqRedis

from tests.support.servers import falkordb_process
from tests.support.vectors import embedded, passages, questions
from zapomni.services.query.rank import AccessLog
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store import access
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.resources import close_resources, open_resources
from zapomni.workers.store import mark_ready, write_chunks, write_memory
from zapomni.workers.upkeep import fold_access

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
ARMS = ("off", "on", "memory")


def ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values) * 1000, q)), 3)


async def write_corpus(store: GraphStore, settings: Settings, count: int) -> None:
    texts = passages(count)
    vectors = embedded(texts)
    embedder = make_embedder(settings)
    await prepare_namespace(store, "default", embedder.name, await embedder.dimension())
    await embedder.aclose()
    graph = store.graph("default")
    now = time.time()

    async def one(i: int) -> None:
        memory_id = "mem_" + hashlib.sha256(texts[i].encode()).hexdigest()[:32]
        job = IngestJob(task_id=memory_id, memory_id=memory_id, namespace="default",
                        text=texts[i], content_hash=memory_id,
                        created_at=now - (count - i) * 3600)  # an hour apart: ages differ
        span = ChunkSpan(idx=0, text=texts[i], char_start=0, char_end=len(texts[i]),
                         tokens=len(texts[i].split()))
        await write_memory(graph, job, 1)
        await write_chunks(graph, memory_id, [span], vectors[i:i + 1])
        await mark_ready(graph, memory_id, memory_id)

    for start in range(0, count, 8):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + 8))))


class Searcher:
    """The query service's live resources, one AccessLog per arm."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = GraphStore(settings, max_connections=32)
        self.redis = redis.asyncio.Redis.from_url(settings.redis_url)
        self.embedder = make_embedder(settings)
        self.logs = {"off": AccessLog(self.redis, Settings(access_tracking=False)),
                     "on": AccessLog(self.redis, settings),
                     "memory": AccessLog(self.redis, settings)}

    async def block(self, arm: str, queries: list[str]) -> tuple[list[float], float]:
        """The queries one after another: each one's seconds, and this thread's CPU seconds
        for the block (the event loop's work; the access writes the block started are
        waited for before the CPU clock is read, so their work counts in their arm)."""
        rank = "memory" if arm == "memory" else "relevance"
        seconds: list[float] = []
        cpu = time.thread_time()
        for query in queries:
            request = SearchRequest(query=query, rank=rank)
            started = time.perf_counter()
            await search_memory(self.store, self.embedder, self.redis, self.settings,
                                request, access=self.logs[arm])
            seconds.append(time.perf_counter() - started)
        await asyncio.gather(*self.logs[arm].pending)
        return seconds, time.thread_time() - cpu

    async def writes_alone(self, count: int = 1000) -> dict[str, float]:
        """What each search starts, alone: the record() call on the answer's path, and the
        XADD it starts, awaited (its wall time stays off the path, its CPU does not)."""
        ids = ["mem_" + f"{i:032x}" for i in range(10)]
        log = self.logs["on"]
        started = time.perf_counter()
        for _ in range(count):
            log.record("default", ids)
        call = (time.perf_counter() - started) / count
        await asyncio.gather(*log.pending)
        seconds = []
        cpu = time.thread_time()
        for _ in range(count):
            begun = time.perf_counter()
            await log.write("default", ids, time.time())
            seconds.append(time.perf_counter() - begun)
        return {"record_call_us": round(call * 1e6, 1),
                "xadd_awaited_p50_ms": ms(seconds, 50), "xadd_awaited_p95_ms": ms(seconds, 95),
                "xadd_cpu_ms": round((time.thread_time() - cpu) / count * 1000, 3)}

    async def aclose(self) -> None:
        for log in self.logs.values():
            await log.aclose()
        await self.embedder.aclose()
        await self.store.aclose()
        await self.redis.aclose()


async def fold_round(ctx: dict, client: redis.asyncio.Redis) -> dict:
    events = await client.xlen(access.STREAM)
    started = time.perf_counter()
    await fold_access(ctx)
    return {"events": events, "seconds": round(time.perf_counter() - started, 4)}


Group = dict[str, tuple[list[float], float]]  # arm -> (seconds of each search, CPU seconds)


async def run_round(searcher: Searcher, queries: list[str], size: int,
                    reverse: bool) -> list[Group]:
    """The queries in blocks of ``size``, each block asked in every arm, the arms' order
    rotating from block to block (and reversed every other round)."""
    groups = []
    for number, first in enumerate(range(0, len(queries), size)):
        order = ARMS[number % 3:] + ARMS[:number % 3]
        group: Group = {}
        for arm in (order[::-1] if reverse else order):
            group[arm] = await searcher.block(arm, queries[first:first + size])
        groups.append(group)
    return groups


async def measure(args: argparse.Namespace, settings: Settings) -> dict:
    searcher = Searcher(settings)
    ctx: dict = {"redis": ArqRedis.from_url(settings.redis_url)}
    await open_resources(ctx, settings)
    queries = questions(args.queries)
    try:
        await searcher.block("off", queries)  # warm: every query's embedding cached
        groups: list[Group] = []
        folds = []
        for round_ in range(args.rounds):
            done = await run_round(searcher, queries, args.block, round_ % 2 == 1)
            groups += done
            folds.append(await fold_round(ctx, searcher.redis))
            print(f"round {round_ + 1}: p95 " + ", ".join(
                f"{arm} {ms([t for g in done for t in g[arm][0]], 95):.2f} ms"
                for arm in ARMS), flush=True)
        alone = await searcher.writes_alone()
    finally:
        await close_resources(ctx)
        await ctx["redis"].aclose()
        await searcher.aclose()
    return report(args, groups, folds, alone)


def summary(groups: list[Group], arm: str) -> tuple[float, float, float]:
    """p50 and p95 ms of the arm's searches, and its CPU ms per search."""
    seconds = [t for g in groups for t in g[arm][0]]
    cpu = sum(g[arm][1] for g in groups) / len(seconds)
    return ms(seconds, 50), ms(seconds, 95), cpu * 1000


def bootstrap(groups: list[Group], arm: str, draws: int = 1000) -> dict[str, list[float]]:
    """The arm's p95 and CPU per search minus off's, over resamples of the blocks (each
    block's arms stay together: they ran side by side): the median and the 5-95% range."""
    rng = np.random.default_rng(7)
    gaps: dict[str, list[float]] = {"p95": [], "cpu": []}
    for _ in range(draws):
        picked = [groups[i] for i in rng.integers(0, len(groups), len(groups))]
        (_, p95, cpu), (_, base_p95, base_cpu) = summary(picked, arm), summary(picked, "off")
        gaps["p95"].append(p95 - base_p95)
        gaps["cpu"].append(cpu - base_cpu)
    return {name: [round(float(np.percentile(v, q)), 3) for q in (50, 5, 95)]
            for name, v in gaps.items()}


def report(args, groups: list[Group], folds: list[dict], alone: dict) -> dict:
    arms = {}
    for arm in ARMS:
        p50, p95, cpu = summary(groups, arm)
        arms[arm] = {"searches": sum(len(g[arm][0]) for g in groups), "p50_ms": p50,
                     "p95_ms": p95, "cpu_ms_per_search": round(cpu, 3)}
        if arm != "off":
            gaps = bootstrap(groups, arm)
            arms[arm] |= {"p95_minus_off_ms": gaps["p95"], "cpu_minus_off_ms": gaps["cpu"]}
    folded = sum(f["events"] for f in folds)
    fold_s = sum(f["seconds"] for f in folds)
    return {"memories": args.memories, "queries": args.queries, "rounds": args.rounds,
            "block": args.block, "arms": arms, **alone, "fold_events": folded,
            "fold_seconds": round(fold_s, 3),
            "fold_events_per_s": round(folded / fold_s) if fold_s else None}


def table(result: dict) -> str:
    def gap(row: dict, name: str) -> str:
        if name not in row:
            return ""
        mid, low, high = row[name]
        return f"{mid:+.3f} [{low:+.3f}, {high:+.3f}]"

    lines = [f"{result['memories']} memories, {result['queries']} queries x "
             f"{result['rounds']} rounds, blocks of {result['block']}; differences from off: "
             "median [5%, 95%] over resampled blocks",
             f"{'arm':7} {'searches':>8} {'p50 ms':>7} {'p95 ms':>7} {'p95 - off ms':>26} "
             f"{'CPU ms':>7} {'CPU - off ms':>26}"]
    for arm, row in result["arms"].items():
        lines.append(f"{arm:7} {row['searches']:>8} {row['p50_ms']:>7.2f} {row['p95_ms']:>7.2f}"
                     f" {gap(row, 'p95_minus_off_ms'):>26} {row['cpu_ms_per_search']:>7.3f}"
                     f" {gap(row, 'cpu_minus_off_ms'):>26}")
    lines.append(f"record() call: {result['record_call_us']} us; its XADD awaited alone: p50 "
                 f"{result['xadd_awaited_p50_ms']} ms, p95 {result['xadd_awaited_p95_ms']} ms, "
                 f"CPU {result['xadd_cpu_ms']} ms")
    lines.append(f"fold: {result['fold_events']} events in {result['fold_seconds']} s "
                 f"({result['fold_events_per_s']} events/s)")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict:
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     onnx_threads=1)
        store = GraphStore(settings)
        try:
            started = time.perf_counter()
            await write_corpus(store, settings, args.memories)
            print(f"{args.memories} memories written in {time.perf_counter() - started:.1f} s",
                  flush=True)
        finally:
            await store.aclose()
        return await measure(args, settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--block", type=int, default=20, help="queries per block")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print()
    print(table(result))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rank.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
