"""The queue's capacity in bytes as well as jobs: every job waiting or running holds a
reservation of its payload's size, and the front refuses new work past the limits.

    zapomni:queue:bytes         hash: arq job id -> "<payload bytes>:<reserved at, ms>"
    zapomni:queue:bytes:total   the sum of those bytes (kept equal by the scripts below)

Exact under at-least-once: a reservation is keyed by the arq job id, so reserving a job twice
counts it once, and releasing it twice subtracts once. Who calls what:

- ``shared/queue.py`` reserves before every enqueue (the front's adds and graph builds are
  checked against the limits, atomically with the reservation; the jobs workers enqueue,
  fan-out parts among them, and deletes are counted but never refused), and releases at once
  when arq did not take the job.
- ``workers/main.py`` releases after each job (arq's ``after_job_end``): the release does
  nothing while arq still holds the job (a retry), so a reservation ends with its job.
- ``reconcile`` drops reservations whose arq job is gone (a job arq failed before it started,
  a worker that died between its job's end and the release, a front that died between
  reserving and enqueueing). The front runs it when a reservation is refused, workers
  about once a minute; a reservation younger than ``GRACE_MS`` is never dropped (its job may
  not be enqueued yet).
"""

from __future__ import annotations

import contextlib

from arq.constants import job_key_prefix
from redis.asyncio import Redis
from redis.exceptions import RedisError

from zapomni.shared.errors import InvalidInput, Overloaded
from zapomni.shared.settings import Settings

BYTES_KEY = "zapomni:queue:bytes"
TOTAL_KEY = "zapomni:queue:bytes:total"
GATE_KEY = "zapomni:queue:bytes:reconciled"  # present while a reconcile ran recently
GRACE_MS = 60_000  # a reservation this young may still be waiting for its enqueue
PAGE = 500  # reservations checked per reconcile round trip

# KEYS: bytes hash, total, arq queue; ARGV: job id, bytes, max bytes, max jobs, check (0/1).
# Returns {1, total after} when reserved (or already held), {0, total, jobs} when the queue
# has max jobs, {-1, total, jobs} when the bytes would pass the limit.
_RESERVE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
local bytes = tonumber(ARGV[2])
if ARGV[5] == '1' then
  local jobs = redis.call('ZCARD', KEYS[3])
  if jobs + 1 > tonumber(ARGV[4]) then return {0, total, jobs} end
  if total + bytes > tonumber(ARGV[3]) then return {-1, total, jobs} end
end
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], bytes .. ':' .. (now[1] * 1000 + math.floor(now[2] / 1000)))
return {1, redis.call('INCRBY', KEYS[2], bytes)}
"""

# KEYS: bytes hash, total, then the arq job key of each id; ARGV: grace ms (0: none), ids.
# Releases each id whose arq job key is gone and whose reservation is older than the grace.
_RELEASE = """
local now = redis.call('TIME')
local cutoff = now[1] * 1000 + math.floor(now[2] / 1000) - tonumber(ARGV[1])
local freed = 0
for i = 2, #ARGV do
  local held = redis.call('HGET', KEYS[1], ARGV[i])
  if held and redis.call('EXISTS', KEYS[i + 1]) == 0 then
    local bytes, at = string.match(held, '^(%d+):(%d+)$')
    if tonumber(ARGV[1]) == 0 or tonumber(at) < cutoff then
      redis.call('HDEL', KEYS[1], ARGV[i])
      freed = freed + tonumber(bytes)
    end
  end
end
if freed > 0 and redis.call('DECRBY', KEYS[2], freed) < 0 then redis.call('SET', KEYS[2], 0) end
return freed
"""


def megabytes(count: int) -> str:
    return f"{count / 1_000_000:,.1f} MB"


async def reserve(redis: Redis, settings: Settings, job_id: str, size: int, *,
                  check: bool) -> None:
    """Hold ``size`` bytes for arq job ``job_id`` until it ends. ``check``: refuse
    (Overloaded) when the queue has ``max_queue_depth`` jobs or the bytes would pass
    ``max_queue_bytes``; otherwise the job is counted whatever the total."""
    if check and size > settings.max_queue_bytes:
        raise InvalidInput(f"text: {megabytes(size)} to queue is over the queue's limit of "
                           f"{megabytes(settings.max_queue_bytes)}; send a smaller text")
    reply = await _reserve(redis, settings, job_id, size, check)
    if reply[0] != 1 and await reconcile(redis, gated=True):
        reply = await _reserve(redis, settings, job_id, size, check)
    if reply[0] == 0:
        raise Overloaded(f"the ingest queue is full ({int(reply[2]):,} jobs, limit "
                         f"{settings.max_queue_depth:,}); nothing was stored. Retry in ~30 "
                         "seconds")
    if reply[0] == -1:
        raise Overloaded(f"the ingest queue is full ({megabytes(int(reply[1]))} waiting, limit "
                         f"{megabytes(settings.max_queue_bytes)}); nothing was stored. Retry "
                         "in ~30 seconds")


async def _reserve(redis: Redis, settings: Settings, job_id: str, size: int,
                   check: bool) -> list[int]:
    return await redis.eval(_RESERVE, 3, BYTES_KEY, TOTAL_KEY, settings.queue_name, job_id,
                            size, settings.max_queue_bytes, settings.max_queue_depth,
                            1 if check else 0)


async def release(redis: Redis, job_id: str) -> int:
    """Release ``job_id``'s reservation if arq no longer holds the job (it ended for good,
    or was never taken); the bytes freed."""
    return int(await redis.eval(_RELEASE, 3, BYTES_KEY, TOTAL_KEY, job_key_prefix + job_id,
                                0, job_id))


async def release_quietly(redis: Redis, job_id: str) -> None:
    """``release`` where a Redis outage must not fail the caller: ``reconcile`` frees the
    reservation later."""
    with contextlib.suppress(RedisError, OSError):
        await release(redis, job_id)


async def reconcile(redis: Redis, *, gated: bool = False, gate_seconds: int = 10) -> int:
    """Drop reservations whose arq job is gone and that are older than ``GRACE_MS``; the
    bytes freed. ``gated``: do nothing if a reconcile ran in the last ``gate_seconds``
    (so a flood of refused requests does not reconcile once each)."""
    if gated and not await redis.set(GATE_KEY, 1, nx=True, ex=gate_seconds):
        return 0
    freed = 0
    cursor = 0
    while True:
        cursor, page = await redis.hscan(BYTES_KEY, cursor, count=PAGE)
        ids = [key.decode() if isinstance(key, bytes) else key for key in page]
        if ids:
            freed += int(await redis.eval(
                _RELEASE, 2 + len(ids), BYTES_KEY, TOTAL_KEY,
                *(job_key_prefix + i for i in ids), GRACE_MS, *ids))
        if not cursor:
            return freed


async def queued_bytes(redis: Redis) -> int:
    """Payload bytes of the jobs waiting or running."""
    return int(await redis.get(TOTAL_KEY) or 0)
