"""Fault campaigns: real worker processes, real servers, real signals; then count what survived.

    ./dev bench chaos --fault kill      # SIGKILL a random worker every 2-4 s, start a new one
    ./dev bench chaos --fault redis     # restart the queue's Redis (AOF on) mid-ingestion
    ./dev bench chaos --fault falkordb  # restart FalkorDB (AOF on) mid-ingestion
    ./dev bench chaos --fault flood     # add_memory far past ZAPOMNI_MAX_QUEUE_DEPTH
    options: --memories 1000 --workers 3 --large-every 10 --seed 7

Each run ingests ``--memories`` texts (every ``--large-every``-th one fans out into parts)
through the front's code path into ``--workers`` ``zapomni-worker`` processes, with entity
extraction after every ingest, while the fault happens. The queue's Redis and FalkorDB are two
servers here, so each can fail alone. A searcher asks the query service a question every
0.2 s the whole time and checks that every memory it returns has all its chunks.

Afterwards it checks: every memory present once with the chunk count its text makes, every
chunk with a vector, no orphan chunk, every ingest and graph task done, a consistent knowledge
graph. Prints a table and writes tests/bench/results/chaos-<fault>.json. Not part of the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis.asyncio
import redis.exceptions

from tests.support.fake_ollama import FakeOllama
from tests.support.graph import broken, query, stored
from tests.support.servers import ThreadedServer
from tests.support.workers import WorkerPool
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.forward import QueryClient
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    start_server,
    stop_process,
    wait_for_server,
)
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.errors import Overloaded, Unavailable
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.text.chunking import chunker_for
from zapomni.workers.arq_internals import JOB_LEASE, lease_key

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
NAMES = ["Alice Moreau", "Bruno Tanaka", "Chiara Rossi", "Dmitri Volkov", "Esther Okafor",
         "Farid Haddad", "Greta Lindqvist", "Hiro Sato"]
PLACES = ["Lisbon", "Osaka", "Nairobi", "Tromso", "Valparaiso", "Tbilisi", "Quebec", "Hanoi"]
THINGS = ["ferry", "archive", "glacier", "orchard", "observatory", "foundry", "lighthouse",
          "library", "vineyard", "market"]


def sentence(rng: random.Random, i: int) -> str:
    return (f"{rng.choice(NAMES)} visited the {rng.choice(THINGS)} in {rng.choice(PLACES)} "
            f"on day {i} and wrote {rng.randint(2, 900)} lines about the {rng.choice(THINGS)}.")


def corpus(count: int, large_every: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(sentence(rng, i * 1000 + s)
                     for s in range(150 if large_every and i % large_every == 0
                                    else rng.randint(1, 3)))
            for i in range(count)]


# ---- servers -------------------------------------------------------------------------------

@dataclass
class Server:
    """A Redis (plain, the queue) or FalkorDB server with AOF, restartable on its port."""

    module: bool
    port: int = field(default_factory=free_port)
    data: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="zapomni-chaos-")))
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        binaries = ensure_binaries()
        if self.module:
            self.process = start_server(binaries, self.port, self.data, persistent=True)
            return
        self.data.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(binaries[0]), "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.data), "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
             "--logfile", str(self.data / "redis.log")], stdout=subprocess.DEVNULL)
        wait_for_server(self.port, self.process)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=60)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)


def worker_id(proc: subprocess.Popen) -> str:
    return f"{socket.gethostname()}-{proc.pid}"


# ---- the campaign's loops ------------------------------------------------------------------

@dataclass
class Tally:
    adds: int = 0
    add_refused: Counter = field(default_factory=Counter)  # error kind -> count
    add_other_errors: list[str] = field(default_factory=list)
    searches: int = 0
    search_refused: Counter = field(default_factory=Counter)
    search_other_errors: list[str] = field(default_factory=list)
    incomplete_hits: int = 0  # a memory returned by search without all its chunks
    kills: int = 0
    recoveries: list[float] = field(default_factory=list)  # s from kill to the job running again
    outage_s: float = 0.0
    front_recovered_s: float | None = None  # first accepted add after the server came back
    search_recovered_s: float | None = None
    queue_peak: int = 0
    redis_peak_mb: float = 0.0


async def produce(front: Front, texts: list[str], tally: Tally, receipts: dict[int, object],
                  concurrency: int, rate: float) -> None:
    """Add every text, ``rate`` adds/s at most (0: as fast as the front takes them); a refusal
    (queue full, Redis down) is retried, as a client would."""
    pending = list(range(len(texts)))

    async def one(i: int) -> None:
        while True:
            try:
                memory = decode_add_memory(texts[i], None, None)
                await ops.check_capacity(front, [memory])  # as add_memories does
                receipts[i] = await ops.add_memory(front, memory)
                tally.adds += 1
                return
            except (Unavailable, Overloaded) as exc:
                tally.add_refused[exc.kind] += 1
                await asyncio.sleep(0.25)
            except Exception as exc:  # anything else is a defect the campaign reports
                tally.add_other_errors.append(f"{type(exc).__name__}: {exc}"[:200])
                await asyncio.sleep(0.25)

    async def lane() -> None:
        while pending:
            await one(pending.pop(0))
            if rate:
                await asyncio.sleep(concurrency / rate)

    await asyncio.gather(*(lane() for _ in range(concurrency)))


async def search_loop(settings: Settings, tally: Tally, stop: asyncio.Event) -> None:
    client = QueryClient(settings.query_url, settings.request_timeout, settings.query_secret)
    rng = random.Random(1)
    try:
        while not stop.is_set():
            request = decode_search(f"{rng.choice(THINGS)} in {rng.choice(PLACES)}", 10, None,
                                    None)
            try:
                found = await client.call("/v1/search", request, SearchResponse)
                tally.searches += 1
                for hit in found.results:
                    with contextlib.suppress(Unavailable, redis.exceptions.ConnectionError):
                        # (our own check cannot run while FalkorDB is down)
                        if not await complete(settings, hit.memory_id):
                            tally.incomplete_hits += 1
            except Unavailable as exc:
                tally.search_refused[exc.kind] += 1
            except Exception as exc:
                tally.search_other_errors.append(f"{type(exc).__name__}: {exc}"[:200])
            await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def complete(settings: Settings, memory_id: str) -> bool:
    rows = await query(settings, "MATCH (m:Memory {id: $id}) OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c) "
                                 "RETURN m.ready, m.chunk_count, count(c), count(c.embedding)",
                       {"id": memory_id})
    return bool(rows) and rows[0][0] is True and rows[0][1] == rows[0][2] == rows[0][3]


async def watch_queue(client: redis.asyncio.Redis, settings: Settings, tally: Tally,
                      stop: asyncio.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(Exception):
            tally.queue_peak = max(tally.queue_peak, await client.zcard(QUEUE_NAME))
            used = (await client.info("memory"))["used_memory"] / 2**20
            tally.redis_peak_mb = max(tally.redis_peak_mb, used)
        await asyncio.sleep(0.2)


async def kill_loop(pool: WorkerPool, client: redis.asyncio.Redis, queue: str, tally: Tally,
                    stop: asyncio.Event, rng: random.Random) -> None:
    """Every 2-4 s: SIGKILL a random worker, start another, and time how long the jobs it
    held stay stuck (until another worker claims them)."""
    watchers = []
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(2, 4))
        if stop.is_set():
            break
        victim = rng.choice(pool.live())
        held = await jobs_of(client, worker_id(victim))
        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        victim.wait()
        tally.kills += 1
        pool.start()
        watchers += [asyncio.create_task(time_recovery(client, queue, job, worker_id(victim),
                                                       killed_at, tally)) for job in held]
    for watcher in watchers:
        watcher.cancel()


async def jobs_of(client: redis.asyncio.Redis, owner: str) -> list[str]:
    prefix = lease_key("")
    held = []
    async for key in client.scan_iter(match=prefix + "*", count=1000):
        if (await client.get(key)) == owner.encode():
            held.append(key.decode()[len(prefix):])
    return held


async def time_recovery(client: redis.asyncio.Redis, queue: str, job_id: str, dead: str,
                        killed_at: float, tally: Tally) -> None:
    while True:
        owner = await client.get(lease_key(job_id))
        if owner is not None and owner != dead.encode():
            break  # another worker runs it
        if owner is None and await client.zscore(queue, job_id) is None:
            break  # finished (or never to run again: the final checks would say so)
        await asyncio.sleep(0.1)
    tally.recoveries.append(time.monotonic() - killed_at)


async def outage(server: Server, front: Front, settings: Settings, tally: Tally,
                 receipts: dict[int, object], down_for: float) -> None:
    """Stop the server (SIGTERM: AOF flushed), keep it down, start it on the same port and
    data; then time how long the front and the query service take to work again."""
    server.stop()
    began = time.monotonic()
    await asyncio.sleep(down_for)
    await asyncio.to_thread(server.start)
    back = time.monotonic()
    tally.outage_s = back - began
    client = QueryClient(settings.query_url, settings.request_timeout, settings.query_secret)
    probe = decode_search("lighthouse", 1, None, None)
    try:
        while tally.front_recovered_s is None or tally.search_recovered_s is None:
            if tally.front_recovered_s is None:
                with contextlib.suppress(Unavailable):
                    await ops.task_status(front, next(iter(receipts.values())).task_id)
                    tally.front_recovered_s = time.monotonic() - back
            if tally.search_recovered_s is None:
                try:
                    await client.call("/v1/search", probe, SearchResponse)
                    tally.search_recovered_s = time.monotonic() - back
                except Unavailable:
                    pass
                except Exception as exc:  # a defect: reported, and the probe goes on
                    tally.search_other_errors.append(f"{type(exc).__name__}: {exc}"[:200])
            await asyncio.sleep(0.1)
    finally:
        await client.aclose()


# ---- the run -------------------------------------------------------------------------------

async def wait_all_done(client: redis.asyncio.Redis, receipts: dict[int, object], count: int,
                        timeout: float = 3600) -> dict[str, Counter]:
    """Until every ingest task and the graph task that followed it has ended."""
    async with asyncio.timeout(timeout):
        while True:
            states: dict[str, Counter] = {"ingest": Counter(), "graph": Counter()}
            if len(receipts) == count:
                for receipt in receipts.values():
                    record = await tasks.get_task(client, receipt.task_id)
                    states["ingest"][record.state] += 1
                    if record.graph_task_id:
                        graph = await tasks.get_task(client, record.graph_task_id)
                        states["graph"][graph.state if graph else "missing"] += 1
                ended = ("done", "failed", "cancelled")
                if (sum(states["ingest"][s] for s in ended) == count
                        and sum(states["graph"][s] for s in ended) == states["ingest"]["done"]):
                    return states
            await asyncio.sleep(1)


async def final_counts(settings: Settings, texts: list[str], receipts: dict[int, object]) -> dict:
    chunker = chunker_for(settings)
    want = {receipts[i].memory_id: len(chunker.split(t)) for i, t in enumerate(texts)}
    rows = await query(settings, "MATCH (m:Memory) OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c) "
                                 "RETURN m.id, m.ready, count(c), count(c.embedding)")
    seen = Counter(r[0] for r in rows)
    chunk_ids = await query(settings, "MATCH (c:Chunk) RETURN count(c), count(DISTINCT c.id)")
    counts = await stored(settings)
    graph = await stored(settings, graph=True)
    return {
        "memories_expected": len(want),
        "memories_stored": len(rows),
        "memories_missing": len(set(want) - set(seen)),
        "memories_unexpected": len(set(seen) - set(want)),
        "memories_doubled": sum(1 for n in seen.values() if n > 1),
        "memories_not_ready": sum(1 for r in rows if r[1] is not True),
        "wrong_chunk_count": sum(1 for r in rows if r[0] in want and r[2] != want[r[0]]),
        "chunks_without_vector": sum(r[2] - r[3] for r in rows),
        "chunks": counts["chunks"],
        "chunks_expected": sum(want.values()),
        "chunk_ids_doubled": chunk_ids[0][0] - chunk_ids[0][1],
        "orphan_chunks": counts["orphan_chunks"],
        "next_links_wrong": counts["next"] - (counts["chunks"] - counts["memories"]),
        "chunks_not_read_for_entities": graph["chunks"] - graph["extracted"],
        **{f"graph_{name}": n for name, n in (await broken(settings)).items()},
    }


async def campaign(args: argparse.Namespace) -> dict:
    texts = corpus(args.memories, args.large_every, args.seed)
    queue_server, graph_server = Server(module=False), Server(module=True)
    fake = FakeOllama(dim=384)
    fake.latency = 0.02
    queue_server.start()
    graph_server.start()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with ThreadedServer(fake.app) as ollama:
        fake.url = ollama.url
        settings = Settings.from_env(
            environ={}, redis_url=f"{queue_server.url}/0", falkordb_url=graph_server.url,
            query_url=f"http://127.0.0.1:{free_port()}", ollama_url=fake.url,
            ollama_model="nomic-embed-text", chunk_tokens=64,
            max_queue_depth=args.queue_depth if args.fault == "flood" else 1_000_000,
            request_timeout=3.0)
        query_port = int(settings.query_url.rsplit(":", 1)[1])
        with ThreadedServer(build_app(settings), port=query_port):
            try:
                return await run(args, settings, texts, queue_server, graph_server)
            finally:
                queue_server.remove()
                graph_server.remove()


async def run(args: argparse.Namespace, settings: Settings, texts: list[str],
              queue_server: Server, graph_server: Server) -> dict:
    client = redis.asyncio.Redis.from_url(settings.redis_url, socket_timeout=5)
    front = Front(settings)
    tally, receipts, stop = Tally(), {}, asyncio.Event()
    rng = random.Random(args.seed)
    log = (RESULTS / f"chaos-{args.fault}.log").open("ab")
    pool = WorkerPool(settings, log, constants={"zapomni.workers.ingest.PART_CHUNKS": 8})
    started = time.monotonic()
    if args.fault != "flood":  # a flood fills the queue before any worker takes from it
        for _ in range(args.workers):
            pool.start()
    loops = [asyncio.create_task(search_loop(settings, tally, stop)),
             asyncio.create_task(watch_queue(client, settings, tally, stop))]
    if args.fault == "kill":
        loops.append(asyncio.create_task(
            kill_loop(pool, client, QUEUE_NAME, tally, stop, rng)))
    try:
        outage_fault = args.fault in ("redis", "falkordb")
        producer = asyncio.create_task(produce(
            front, texts, tally, receipts, 32 if args.fault == "flood" else 4,
            args.add_rate if outage_fault else 0))
        if outage_fault:  # while texts are still being added, and parts written
            await wait_progress(client, receipts, len(texts) // 4)
            server = queue_server if args.fault == "redis" else graph_server
            await outage(server, front, settings, tally, receipts, args.down_for)
        if args.fault == "flood":
            await asyncio.sleep(args.flood_for)
            for _ in range(args.workers):
                pool.start()
        await producer
        states = await wait_all_done(client, receipts, len(texts))
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        await asyncio.gather(*loops, return_exceptions=True)
        pool.close()
        log.close()
        await front.aclose()
    checks = await final_counts(settings, texts, receipts)
    await client.aclose()
    return report(args, settings, tally, states, checks, elapsed)


async def wait_progress(client: redis.asyncio.Redis, receipts: dict[int, object],
                        done: int) -> None:
    while True:
        finished = 0
        for receipt in list(receipts.values()):
            record = await tasks.get_task(client, receipt.task_id)
            finished += record is not None and record.state == "done"
        if finished >= done:
            return
        await asyncio.sleep(0.5)


def report(args, settings: Settings, tally: Tally, states: dict, checks: dict,
           elapsed: float) -> dict:
    rec = sorted(tally.recoveries)
    result = {
        "fault": args.fault, "memories": args.memories, "workers": args.workers,
        "elapsed_s": round(elapsed, 1), "job_lease_s": JOB_LEASE,
        "tasks": {kind: dict(c) for kind, c in states.items()},
        "adds": tally.adds, "add_refusals": dict(tally.add_refused),
        "add_other_errors": tally.add_other_errors[:5], "add_other_error_count":
            len(tally.add_other_errors),
        "searches": tally.searches, "search_refusals": dict(tally.search_refused),
        "search_other_errors": tally.search_other_errors[:5],
        "search_other_error_count": len(tally.search_other_errors),
        "incomplete_hits": tally.incomplete_hits,
        "kills": tally.kills, "jobs_held_by_killed_workers": len(rec),
        "recovery_p50_s": round(statistics.median(rec), 2) if rec else None,
        "recovery_max_s": round(rec[-1], 2) if rec else None,
        "outage_s": round(tally.outage_s, 1),
        "front_recovered_after_s": _round(tally.front_recovered_s),
        "search_recovered_after_s": _round(tally.search_recovered_s),
        "queue_peak": tally.queue_peak, "redis_peak_mb": round(tally.redis_peak_mb, 1),
        "checks": checks,
    }
    bad = {k: v for k, v in checks.items()
           if k not in ("memories_expected", "memories_stored", "chunks", "chunks_expected")
           and v}
    if checks["memories_stored"] != checks["memories_expected"]:
        bad["memories_stored"] = checks["memories_stored"]
    if checks["chunks"] != checks["chunks_expected"]:
        bad["chunks"] = checks["chunks"]
    not_done = {k: {s: n for s, n in c.items() if s != "done"} for k, c in result["tasks"].items()}
    result["verdict"] = "ok" if not bad and not any(not_done.values()) and not (
        tally.incomplete_hits or tally.add_other_errors or tally.search_other_errors) else "FAILED"
    result["problems"] = {**bad, **{f"tasks_{k}": v for k, v in not_done.items() if v}}
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fault", choices=["kill", "redis", "falkordb", "flood"],
                        default="kill")
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--large-every", type=int, default=10)
    parser.add_argument("--down-for", type=float, default=5.0, help="seconds a server is down")
    parser.add_argument("--queue-depth", type=int, default=100, help="flood: the queue's limit")
    parser.add_argument("--flood-for", type=float, default=10.0,
                        help="flood: seconds before the workers start")
    parser.add_argument("--add-rate", type=float, default=40.0,
                        help="redis, falkordb: adds/s, so adding goes on through the outage")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    result = asyncio.run(campaign(args))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    (RESULTS / f"chaos-{args.fault}.json").write_text(json.dumps(result, indent=2))
    sys.exit(0 if result["verdict"] == "ok" else 1)


if __name__ == "__main__":
    main()
