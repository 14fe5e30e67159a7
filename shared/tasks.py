"""The task registry in Redis: what every task (ingest, delete) is doing, for graph_status.

    zapomni:task:{task_id}          hash: a TaskRecord; expires after task_ttl_days
    zapomni:tasks:{ns}:{state}      sorted set of task ids by last change, for counts
    zapomni:mem:{ns}:{memory_id}    the ingest task that owns a memory (dedupe of adds)
    zapomni:parts:{task_id}         hash: finished part number -> worker that wrote it
    zapomni:last:{ns}:{thread hash} the memory added last to that thread (conversation order)
    zapomni:worker:{worker_id}      present while that worker lives (expires WORKER_TTL s)

Every write here is idempotent: a job that runs twice records the same thing twice.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import msgspec
from redis.asyncio import Redis

from shared import heartbeat
from shared.messages import TASK_STATES, TaskRecord

TASK_KEY = "zapomni:task:"
WORKER_KEY = "zapomni:worker:"  # + worker id, refreshed by each live worker
WORKER_TTL = 15

_CLAIM = """
local existing = redis.call('GET', KEYS[1])
if existing then return {existing, ''} end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
local before = ''
if KEYS[4] then
  before = redis.call('GETSET', KEYS[4], ARGV[4]) or ''
  if before == ARGV[4] then before = '' end
  if before ~= '' then redis.call('HSET', KEYS[2], 'after', before) end
end
return {'', before}
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def task_key(task_id: str) -> str:
    return TASK_KEY + task_id


def parts_key(task_id: str) -> str:
    return f"zapomni:parts:{task_id}"


def memory_key(namespace: str, memory_id: str) -> str:
    return f"zapomni:mem:{namespace}:{memory_id}"


def state_key(namespace: str, state: str) -> str:
    return f"zapomni:tasks:{namespace}:{state}"


def last_key(namespace: str, thread: str) -> str:
    return f"zapomni:last:{namespace}:{hashlib.sha256(thread.encode()).hexdigest()[:32]}"


def _fields(record: TaskRecord | dict[str, Any]) -> dict[str, str]:
    items = msgspec.structs.asdict(record).items() if isinstance(record, TaskRecord) else \
        record.items()
    return {k: str(v) for k, v in items}


async def claim_memory(redis: Redis, record: TaskRecord, ttl: int,
                       thread: str = "") -> tuple[str | None, str]:
    """Make ``record`` the task that ingests its memory, atomically. Returns (None, the
    memory added just before this one to ``thread``, or "") when claimed, or (the id of
    the task that already owns the memory, "") when the text was added before. The
    memories of a thread are thus chained in the order they were added: the turns of a
    conversation, which search reads with their neighbours. The task record keeps the
    memory before (``after``), so that a job enqueued again carries it too."""
    flat = [x for kv in _fields(record).items() for x in kv]
    keys = [memory_key(record.namespace, record.memory_id), task_key(record.task_id),
            state_key(record.namespace, record.state)]
    if thread:
        keys.append(last_key(record.namespace, thread))
    existing, before = await redis.eval(
        _CLAIM, len(keys), *keys,
        record.task_id, ttl, record.created_at, record.memory_id, *flat,
    )
    return (existing.decode() or None), before.decode()


async def release_memory(redis: Redis, namespace: str, memory_id: str, task_id: str) -> None:
    """Forget that ``task_id`` owns the memory, so the same text can be added again."""
    await redis.eval(_RELEASE, 1, memory_key(namespace, memory_id), task_id)


async def owner_task(redis: Redis, namespace: str, memory_id: str) -> str | None:
    value = await redis.get(memory_key(namespace, memory_id))
    return value.decode() if value else None


async def create_task(redis: Redis, record: TaskRecord, ttl: int) -> None:
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(task_key(record.task_id), mapping=_fields(record))
        pipe.expire(task_key(record.task_id), ttl)
        pipe.zadd(state_key(record.namespace, record.state), {record.task_id: record.created_at})
        await pipe.execute()


async def update_task(redis: Redis, task_id: str, namespace: str, **fields: Any) -> None:
    """Set fields of a task; a new ``state`` also moves the task between the count sets."""
    now = time.time()
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(task_key(task_id), mapping=_fields(fields))
        state = fields.get("state")
        if state is not None:
            for other in TASK_STATES:
                if other != state:
                    pipe.zrem(state_key(namespace, other), task_id)
            pipe.zadd(state_key(namespace, state), {task_id: now})
        await pipe.execute()


async def finish_part(redis: Redis, task_id: str, part: int, worker: str, ttl: int, *,
                      progress: bool = True) -> int:
    """Record part ``part`` as written (and by which worker); return how many distinct parts
    are written. ``progress``: also show that count as the task's done."""
    key = parts_key(task_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.hset(key, str(part), worker)
        pipe.expire(key, ttl)
        pipe.hlen(key)
        _, _, done = await pipe.execute()
    fields = {"done": done, "heartbeat_at": time.time()} if progress else \
        {"heartbeat_at": time.time()}
    await redis.hset(task_key(task_id), mapping=fields)
    return int(done)


async def add_progress(redis: Redis, task_id: str, **counts: int) -> None:
    """Add to a task's counters (graph tasks: done, entities, relations) after a batch."""
    async with redis.pipeline(transaction=True) as pipe:
        for name, value in counts.items():
            pipe.hincrby(task_key(task_id), name, value)
        pipe.hset(task_key(task_id), "heartbeat_at", time.time())
        await pipe.execute()


async def part_workers(redis: Redis, task_id: str) -> dict[int, str]:
    raw = await redis.hgetall(parts_key(task_id))
    return {int(k): v.decode() for k, v in raw.items()}


async def get_task(redis: Redis, task_id: str) -> TaskRecord | None:
    raw = await redis.hgetall(task_key(task_id))
    if not raw:
        return None
    data = {k.decode(): v.decode() for k, v in raw.items()}
    return msgspec.convert(data, TaskRecord, strict=False)


async def task_counts(redis: Redis, namespace: str, ttl: int) -> dict[str, int]:
    cutoff = time.time() - ttl
    async with redis.pipeline(transaction=False) as pipe:
        for state in TASK_STATES:
            pipe.zremrangebyscore(state_key(namespace, state), "-inf", cutoff)
            pipe.zcard(state_key(namespace, state))
        replies = await pipe.execute()
    return {state: int(replies[2 * i + 1]) for i, state in enumerate(TASK_STATES)}


async def queue_depth(redis: Redis, queue_name: str) -> int:
    """Jobs waiting or running (arq keeps a job in its queue's sorted set until it ends)."""
    return int(await redis.zcard(queue_name))


async def workers_alive(redis: Redis) -> int:
    return await heartbeat.count_alive(redis)


async def task_totals(redis: Redis) -> dict[str, int]:
    """Tasks by state over every namespace."""
    totals = dict.fromkeys(TASK_STATES, 0)
    async for key in redis.scan_iter(match="zapomni:tasks:*", count=500):
        state = key.decode().rsplit(":", 1)[1]
        if state in totals:
            totals[state] += int(await redis.zcard(key))
    return totals
