"""Which workers are alive: one sorted set, no scan of the keyspace.

    zapomni:workers     sorted set: worker id -> its last heartbeat (Redis's clock, seconds)

Each live worker beats every ``WORKER_TTL / 3`` seconds; a worker is alive while its last beat
is under ``WORKER_TTL`` seconds old. Times come from Redis's clock (``TIME`` inside the
scripts), so workers on hosts whose clocks disagree are still counted right. Beats trim the
set, so a worker that died without a word leaves it within ``WORKER_TTL`` seconds.
"""

from __future__ import annotations

from redis.asyncio import Redis

WORKERS_KEY = "zapomni:workers"
WORKER_TTL = 15

_NOW = "local t = redis.call('TIME'); local now = tonumber(t[1]) + tonumber(t[2]) / 1e6\n"

# KEYS: the set; ARGV: worker id, ttl
_BEAT = _NOW + """
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
"""

# KEYS: the set; ARGV: ttl
_LIVE = _NOW + "return redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[1]), '+inf')"


async def beat(redis: Redis, worker_id: str) -> None:
    """Record that ``worker_id`` is alive now."""
    await redis.eval(_BEAT, 1, WORKERS_KEY, worker_id, WORKER_TTL)


async def leave(redis: Redis, worker_id: str) -> None:
    """A worker that stops says so, instead of being counted for ``WORKER_TTL`` more."""
    await redis.zrem(WORKERS_KEY, worker_id)


async def count_alive(redis: Redis) -> int:
    return len(await alive_ids(redis))


async def alive_ids(redis: Redis) -> list[str]:
    """The ids of the live workers (as many as there are workers: a bounded read)."""
    return [i.decode() if isinstance(i, bytes) else i
            for i in await redis.eval(_LIVE, 1, WORKERS_KEY, WORKER_TTL)]
