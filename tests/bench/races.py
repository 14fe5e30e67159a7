"""Race campaign: adds with deletes, cancels and re-adds fired at random moments, while worker
processes are SIGKILLed; then check that every memory is exactly as its last operation says.

    ./dev bench races                      # 1,000 adds, 3 workers, a kill every 2-4 s
    options: --memories 1000 --workers 3 --delete-share 0.3 --cancel-share 0.15
             --readd-share 0.1 --no-kill --seed 11

Each text is added through the front's code path; a share of them is deleted, or their
ingest cancelled, 0-1.5 s after the add (whatever the worker is doing then: chunking, between
parts, finishing), and a share of the deleted ones is added again. Every large text fans out
into parts. The queue's Redis and FalkorDB are two servers, as in compose.

Workers are killed until every task has ended; then it counts: memories with ready=false,
tasks still queued or running, task records that do not decode, and memories whose state
differs from what the last accepted operation says (present and searchable for an add,
absent for a delete or a cancel that took effect) — before and after one run of the sweep.
Prints a table and writes tests/bench/results/races.json. Not part of the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec
import redis.asyncio

from tests.bench.chaos import RESULTS, Server, corpus
from tests.support.fake_ollama import FakeOllama
from tests.support.graph import query
from tests.support.servers import ThreadedServer
from tests.support.workers import WorkerPool
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.base import TASK_STATES
from zapomni.shared.protocol.errors import Unavailable
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.queue import connect_queue
from zapomni.workers.upkeep import SWEEP


@dataclass
class Ledger:
    """What the campaign did, and what each memory's last accepted operation says."""

    expect: dict[str, bool] = field(default_factory=dict)  # memory id -> present?
    ops: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)
    task_ids: list[str] = field(default_factory=list)
    kills: int = 0


async def add(front: Front, text: str, ledger: Ledger) -> object | None:
    while True:
        try:
            receipt = await ops.add_memory(front, decode_add_memory(text, None, None))
        except Unavailable as exc:  # a delete of the same text under way: retry, as told
            ledger.refused["add: " + exc.message.split(" (")[0].split(" is ")[-1]] += 1
            await asyncio.sleep(0.2)
            continue
        ledger.ops["add"] += 1
        ledger.task_ids.append(receipt.task_id)
        ledger.expect[receipt.memory_id] = True
        return receipt


async def life(front: Front, text: str, ledger: Ledger, rng: random.Random,
               args: argparse.Namespace) -> None:
    """One text's history: added; then perhaps deleted or cancelled at a random moment;
    then perhaps added again."""
    receipt = await add(front, text, ledger)
    roll = rng.random()
    if roll >= args.delete_share + args.cancel_share:
        return
    await asyncio.sleep(rng.uniform(0, 1.5))
    if roll < args.delete_share:
        deleted = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
        ledger.ops["delete"] += 1
        ledger.task_ids.append(deleted.task_id)
        ledger.expect[receipt.memory_id] = False
    else:
        record = await ops.cancel_task(front, receipt.task_id)
        ledger.ops[f"cancel ({record.state})"] += 1
        if record.state == "cancelled":
            ledger.expect[receipt.memory_id] = False
            ledger.task_ids.append(record.message.split()[3])  # the undoing delete
    if rng.random() < args.readd_share / max(args.delete_share + args.cancel_share, 1e-9):
        await asyncio.sleep(rng.uniform(0, 1.0))
        await add(front, text, ledger)


async def kill_loop(pool: WorkerPool, ledger: Ledger, stop: asyncio.Event,
                    rng: random.Random) -> None:
    while not stop.is_set():
        await asyncio.sleep(rng.uniform(2, 4))
        if stop.is_set():
            return
        victim = rng.choice(pool.live())
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        ledger.kills += 1
        pool.start()


async def settle(client: redis.asyncio.Redis, settings: Settings, timeout: float) -> float:
    """Until no task of any kind is queued or running (graph tasks that follow ingests
    included); seconds it took."""
    started = time.monotonic()
    ttl = tasks.TASK_TTL
    async with asyncio.timeout(timeout):
        while True:
            counts = await tasks.task_totals(client, ttl)
            if counts["queued"] == counts["running"] == 0:
                return time.monotonic() - started
            await asyncio.sleep(1)


async def check(client: redis.asyncio.Redis, settings: Settings, ledger: Ledger) -> dict:
    rows = await query(settings, "MATCH (m:Memory) OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c) "
                                 "RETURN m.id, m.ready, m.chunk_count, count(c)")
    stored = {r[0]: (r[1] is True and r[2] == r[3]) for r in rows}
    unreadable = 0
    async for key in client.scan_iter(match=tasks.TASK_KEY + "*", count=1000):
        raw = await client.hgetall(key)
        try:
            msgspec.convert({k.decode(): v.decode() for k, v in raw.items()}, TaskRecord,
                            strict=False)
        except msgspec.ValidationError:
            unreadable += 1
    counts = await tasks.task_totals(client, tasks.TASK_TTL)
    orphans = await query(settings, "MATCH (c:Chunk) WHERE NOT ()-[:HAS_CHUNK]->(c) "
                                    "RETURN count(c)")
    return {
        "memories_not_ready": sum(1 for r in rows if r[1] is not True),
        "tasks_queued_or_running": counts["queued"] + counts["running"],
        "task_records_unreadable": unreadable,
        "present_but_should_be_absent": sum(1 for m, want in ledger.expect.items()
                                            if not want and m in stored),
        "absent_or_incomplete_but_should_be_present": sum(
            1 for m, want in ledger.expect.items() if want and not stored.get(m, False)),
        "stored_but_never_added": len(set(stored) - set(ledger.expect)),
        "orphan_chunks": orphans[0][0],
        "tasks_by_state": {s: counts[s] for s in TASK_STATES},
    }


async def sweep_once(settings: Settings, client: redis.asyncio.Redis) -> None:
    queue = connect_queue(settings)
    try:
        job = await queue.enqueue_job(SWEEP, _job_id=f"bench-sweep-{time.time()}")
        async with asyncio.timeout(300):
            while await client.zscore(QUEUE_NAME, job.job_id) is not None:
                await asyncio.sleep(0.5)
    finally:
        await queue.aclose()


async def run(args: argparse.Namespace, settings: Settings) -> dict:
    texts = corpus(args.memories, args.large_every, args.seed)
    client = redis.asyncio.Redis.from_url(settings.redis_url, socket_timeout=5)
    front = Front(settings)
    ledger, stop, rng = Ledger(), asyncio.Event(), random.Random(args.seed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    with (RESULTS / "races.log").open("ab") as log:
        pool = WorkerPool(settings, log, constants={"zapomni.workers.ingest.PART_CHUNKS": 8})
        for _ in range(args.workers):
            pool.start()
        killer = None if args.no_kill else asyncio.create_task(kill_loop(pool, ledger, stop,
                                                                          rng))
        started = time.monotonic()
        try:
            lanes = asyncio.Semaphore(args.concurrency)

            async def one(text: str, seed: int) -> None:
                async with lanes:
                    await life(front, text, ledger, random.Random(seed), args)

            await asyncio.gather(*(one(t, args.seed * 100_000 + i) for i, t in enumerate(texts)))
            operations_s = time.monotonic() - started
            settle_s = await settle(client, settings, args.timeout)  # workers still killed
            stop.set()
            if killer is not None:
                await killer
            before = await check(client, settings, ledger)
            await sweep_once(settings, client)
            after = await check(client, settings, ledger)
        finally:
            stop.set()
            pool.close()
            await front.aclose()
    await client.aclose()
    return {"memories": args.memories, "workers": args.workers, "kills": ledger.kills,
            "operations": dict(ledger.ops), "adds_refused_while_deleting": dict(ledger.refused),
            "operations_s": round(operations_s, 1), "settle_s": round(settle_s, 1),
            "before_sweep": before, "after_sweep": after}


async def campaign(args: argparse.Namespace) -> dict:
    queue_server, graph_server = Server(module=False), Server(module=True)
    fake = FakeOllama(dim=384)
    fake.latency = 0.02
    queue_server.start()
    graph_server.start()
    try:
        with ThreadedServer(fake.app) as ollama:
            settings = Settings.from_env(
                environ={}, redis_url=f"{queue_server.url}/0", falkordb_url=graph_server.url,
                query_url=f"http://127.0.0.1:{free_port()}", ollama_url=ollama.url,
                ollama_model="nomic-embed-text", chunk_tokens=64, max_queue_depth=1_000_000,
                request_timeout=5.0)
            query_port = int(settings.query_url.rsplit(":", 1)[1])
            with ThreadedServer(build_app(settings), port=query_port):
                return await run(args, settings)
    finally:
        queue_server.remove()
        graph_server.remove()


def report(result: dict) -> None:
    print(f"race campaign: {result['memories']} texts, {result['workers']} workers, "
          f"{result['kills']} SIGKILLs; operations {result['operations']}")
    print(f"  adds refused while their delete ran (retried): "
          f"{result['adds_refused_while_deleting']}")
    print(f"  operations {result['operations_s']} s, settled {result['settle_s']} s later")
    print(f"  {'check':44} {'before sweep':>12} {'after sweep':>12}  target")
    for name, value in result["before_sweep"].items():
        if name != "tasks_by_state":
            print(f"  {name:44} {value:>12} {result['after_sweep'][name]:>12}  0")
    print(f"  tasks by state: {result['after_sweep']['tasks_by_state']}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="./dev bench races", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--large-every", type=int, default=10)
    parser.add_argument("--delete-share", type=float, default=0.3)
    parser.add_argument("--cancel-share", type=float, default=0.15)
    parser.add_argument("--readd-share", type=float, default=0.1)
    parser.add_argument("--no-kill", action="store_true")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    result = asyncio.run(campaign(args))
    report(result)
    (RESULTS / "races.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
