"""The task registry's Redis memory over many tasks, with no get_stats call (issue 33, defect 3).

    ./dev bench tasks [--tasks 100000] [--ttl 5] [--waves 10]

Each memory goes through what the product does to Redis for it, with records kept ``--ttl``
seconds instead of days: its add (the front's add step: claim, record, thread, queue), its
ingest (the worker's moves: running, done), its graph task (created, running, done), and its
delete (the delete step, its end releasing the claim); each job is taken off the queue as arq
does when it ends, and its bytes released as the worker does. 3 tasks a memory, 10 turns a
thread, 10 namespaces. After each wave, and once more after every record has expired, every
key is visited (so Redis drops the expired ones, as its own expiry cycle would in time) and
``used_memory`` read: flat means the bytes left per task once its records are gone are ~0.

Runs on any version of the add path (it calls the same functions as ea91bcb's), so the same
file measures before and after. Prints a table and writes tests/bench/results/tasks.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import redis.asyncio

from tests.support.servers import falkordb_process
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store import deletes
from zapomni.shared.tasks import adds, capacity, tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.queue import connect_queue

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"


async def drain(redis: redis.asyncio.Redis, settings: Settings) -> None:
    """Every job off the queue, as arq does when jobs end, and their bytes released."""
    while True:
        ids = [i.decode() for i, _ in await redis.zpopmin(QUEUE_NAME, 1000)]
        if not ids:
            return
        await redis.delete(*(f"arq:job:{i}" for i in ids))
        for job_id in ids:
            await capacity.release(redis, job_id)


async def memory_life(redis, settings: Settings, ttl: int, n: int) -> None:
    """Memory ``n``: added, ingested, its entities read, deleted."""
    namespace, thread = f"ns{n % 10}", f"conversation {n // 10}"
    memory = decode_add_memory(f"Turn {n} of a long conversation about tides.",
                               {"thread": thread}, namespace)
    record, _ = await adds.claim_and_enqueue(redis, settings, memory)
    for state in ("running", "done"):
        await tasks.move(redis, record.task_id, state, ttl=ttl, owning=True,
                         finished_at=time.time())
    graph = TaskRecord(task_id=f"task_{n:032x}", kind="graph", namespace=namespace,
                       created_at=time.time())
    await tasks.create_task(redis, graph, ttl)
    await tasks.move(redis, graph.task_id, "running", ttl=ttl)
    await tasks.move(redis, graph.task_id, "done", ttl=ttl)
    queued = await deletes.queue_delete(redis, settings, namespace, record.memory_id,
                                        "waiting for a worker")
    await tasks.move(redis, queued.task_id, "running", ttl=ttl)
    await tasks.end_and_release(redis, queued.task_id, "done", ttl=ttl)


async def settle(client: redis.asyncio.Redis) -> dict:
    """Visit every key (expired ones go), then what Redis holds."""
    keys: dict[str, int] = {}
    async for key in client.scan_iter(count=5000):
        kind = ":".join(key.decode().split(":")[:2])
        keys[kind] = keys.get(kind, 0) + 1
    info = await client.info("memory")
    sets = 0
    async for key in client.scan_iter(match="zapomni:tasks:*", count=5000):
        sets += await client.zcard(key)
    return {"used_memory": info["used_memory"], "keys": dict(sorted(keys.items())),
            "count_set_entries": sets}


async def run(args: argparse.Namespace, url: str) -> dict:
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 max_queue_depth=10_000_000)
    tasks.TASK_TTL = int(args.ttl)  # records that expire within the run (in this process)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    queue = connect_queue(settings)
    await client.flushall()
    memories = args.tasks // 3
    per_wave = memories // args.waves
    await memory_life(queue, settings, args.ttl, -1)  # scripts loaded, keys of a first life
    await drain(client, settings)
    await asyncio.sleep(args.ttl + 1)
    base = await settle(client)
    rows = [{"tasks": 0, **base}]
    started = time.perf_counter()
    for wave in range(args.waves):
        for n in range(wave * per_wave, (wave + 1) * per_wave):
            await memory_life(queue, settings, args.ttl, n)
            if n % 500 == 0:
                await drain(client, settings)
        await drain(client, settings)
        rows.append({"tasks": (wave + 1) * per_wave * 3, **await settle(client)})
        print(json.dumps(rows[-1]), flush=True)
    seconds = time.perf_counter() - started
    await asyncio.sleep(args.ttl + 1)  # every record has expired
    rows.append({"tasks": args.waves * per_wave * 3, "after_expiry": True,
                 **await settle(client)})
    print(json.dumps(rows[-1]), flush=True)
    await queue.aclose()
    await client.aclose()
    done = rows[-1]
    return {"ttl_s": args.ttl, "tasks": done["tasks"], "seconds": round(seconds, 1),
            "bytes_per_task_left": round((done["used_memory"] - base["used_memory"])
                                         / done["tasks"], 1),
            "peak_used_memory": max(r["used_memory"] for r in rows), "rows": rows}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--ttl", type=int, default=5, help="seconds a task record is kept")
    parser.add_argument("--waves", type=int, default=10)
    args = parser.parse_args()
    with falkordb_process() as url:
        report = await run(args, url)
    print("\n| tasks | used_memory | bytes a task above the start | count-set entries | keys |")
    print("|---|---|---|---|---|")
    base = report["rows"][0]["used_memory"]
    for row in report["rows"]:
        above = round((row["used_memory"] - base) / row["tasks"], 1) if row["tasks"] else 0
        print(f"| {row['tasks']:,}{' (expired)' if row.get('after_expiry') else ''} | "
              f"{row['used_memory']:,} | {above} | {row['count_set_entries']:,} | "
              f"{row['keys']} |")
    print(f"\n{report['tasks']:,} tasks in {report['seconds']} s: "
          f"{report['bytes_per_task_left']} bytes a task left once their records expired")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tasks.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
