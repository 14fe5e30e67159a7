"""The queue's capacity in bytes as well as jobs: every job waiting or running holds a
reservation of its payload's size, and the front refuses new work past the limits.

    zapomni:queue:bytes         hash: arq job id -> "<payload bytes>:<reserved at, ms>"
    zapomni:queue:bytes:total   the sum of those bytes (kept equal by the scripts below)

Exact under at-least-once: a reservation is keyed by the arq job id, so reserving a job twice
counts it once, and releasing it twice subtracts once. Who calls what:

- ``shared/tasks/queue.py`` reserves before every enqueue it makes (the front's graph builds and
  updates are checked against the limits, atomically with the reservation; the jobs workers
  enqueue, fan-out parts among them, are counted but never refused), and releases at once
  when arq did not take the job.
- ``workers/main.py`` releases after each job (arq's ``after_job_end``): the release does
  nothing while arq still holds the job (a retry), so a reservation ends with its job.
- ``reconcile`` drops reservations whose arq job is gone (a job arq failed before it started,
  a worker that died between its job's end and the release, a front that died between
  reserving and enqueueing). The front runs it when a reservation is refused, workers
  about once a minute; a reservation younger than ``GRACE_MS`` is never dropped (its job may
  not be enqueued yet).
- The add path's script (shared/tasks/adds.py: checked) and the delete's (shared/tasks/takeover.py:
  counted) hold bytes in the step that enqueues (``LUA``'s functions); a small add joining a
  batch adds its bytes to the batch job's reservation, and is refused only past the bytes.
  What a job keeps beside arq's payload, the members of an ingest batch
  (``zapomni:batch:{job id}``), is dropped with its reservation.
"""

from __future__ import annotations

import contextlib

from redis.asyncio import Redis
from redis.exceptions import RedisError

from zapomni.shared.protocol.errors import InvalidInput, Overloaded
from zapomni.shared.settings import Settings

# arq's key of a job (arq.constants.job_key_prefix), written out so the query service, which
# reads capacity and never enqueues, does not load arq (tests/unit/test_library_internals.py)
JOB_KEY_PREFIX = "arq:job:"
QUEUE_NAME = "zapomni:queue"  # arq's queue (a sorted set of job ids); one per Redis database

BYTES_KEY = "zapomni:queue:bytes"
TOTAL_KEY = "zapomni:queue:bytes:total"
GATE_KEY = "zapomni:queue:bytes:reconciled"  # present while a reconcile ran recently
GRACE_MS = 60_000  # a reservation this young may still be waiting for its enqueue
PAGE = 500  # reservations checked per reconcile round trip

BATCH_PREFIX = "zapomni:batch:"  # + job id: the members of an ingest batch (shared/tasks/adds.py)

# functions every script that holds bytes starts with (no KEYS: one Redis server, never a
# cluster, as shared/tasks/tasks.py says)
LUA = f"""
local BYTES, TOTAL = '{BYTES_KEY}', '{TOTAL_KEY}'
-- the bytes held for arq job ``id`` (0: none)
local function held(id)
  local v = redis.call('HGET', BYTES, id)
  if not v then return 0 end
  return tonumber(string.match(v, '^(%d+):'))
end
-- hold ``bytes`` more for arq job ``id`` (a new reservation is stamped now); the total after
local function hold(id, bytes)
  local v = redis.call('HGET', BYTES, id)
  local had, at = 0, nil
  if v then
    local b, a = string.match(v, '^(%d+):(%d+)$')
    had, at = tonumber(b), a
  else
    local now = redis.call('TIME')
    at = now[1] * 1000 + math.floor(now[2] / 1000)
  end
  redis.call('HSET', BYTES, id, (had + tonumber(bytes)) .. ':' .. at)
  return redis.call('INCRBY', TOTAL, bytes)
end
-- why ``bytes`` more (in a new job when ``new_job``) do not fit in ``queue``: {{0, total,
-- jobs}} at max jobs, {{-1, total, jobs}} past max bytes; nil when they fit
local function over_limits(queue, bytes, new_job, max_bytes, max_jobs)
  local total = tonumber(redis.call('GET', TOTAL) or '0')
  local jobs = redis.call('ZCARD', queue)
  if new_job and jobs + 1 > tonumber(max_jobs) then return {{0, total, jobs}} end
  if total + tonumber(bytes) > tonumber(max_bytes) then return {{-1, total, jobs}} end
  return nil
end
"""

# ARGV: job id, bytes, max bytes, max jobs, check (0/1), queue. Returns {1, total after}
# when reserved (or already held), or over_limits' refusal
_RESERVE = LUA + """
if redis.call('HEXISTS', BYTES, ARGV[1]) == 1 then
  return {1, tonumber(redis.call('GET', TOTAL) or '0')}
end
if ARGV[5] == '1' then
  local over = over_limits(ARGV[6], ARGV[2], true, ARGV[3], ARGV[4])
  if over then return over end
end
return {1, hold(ARGV[1], ARGV[2])}
"""

# KEYS: bytes hash, total, then the arq job key of each id; ARGV: grace ms (0: none), ids.
# Releases each id whose arq job key is gone and whose reservation is older than the grace,
# with the batch members kept for it
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
      redis.call('DEL', '""" + BATCH_PREFIX + """' .. ARGV[i])
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
    if check:
        check_size(settings, size)
    reply = await _reserve(redis, settings, job_id, size, check)
    if reply[0] != 1 and await reconcile(redis, gated=True):
        reply = await _reserve(redis, settings, job_id, size, check)
    if reply[0] != 1:
        raise refusal(settings, reply)


def check_size(settings: Settings, size: int) -> None:
    """A payload that could never fit is bad input, not a full queue."""
    if size > settings.max_queue_bytes:
        raise InvalidInput(f"text: {megabytes(size)} to queue is over the queue's limit of "
                           f"{megabytes(settings.max_queue_bytes)}; send a smaller text")


def refusal(settings: Settings, reply: list[int]) -> Overloaded:
    """The retryable error of an over_limits reply ({0 or -1, total bytes, jobs})."""
    if reply[0] == 0:
        return Overloaded(f"the ingest queue is full ({int(reply[2]):,} jobs, limit "
                          f"{settings.max_queue_depth:,}); nothing was stored. Retry in ~30 "
                          "seconds")
    return Overloaded(f"the ingest queue is full ({megabytes(int(reply[1]))} waiting, limit "
                      f"{megabytes(settings.max_queue_bytes)}); nothing was stored. Retry "
                      "in ~30 seconds")


async def _reserve(redis: Redis, settings: Settings, job_id: str, size: int,
                   check: bool) -> list[int]:
    return await redis.eval(_RESERVE, 0, job_id, size, settings.max_queue_bytes,
                            settings.max_queue_depth, 1 if check else 0, QUEUE_NAME)


async def release(redis: Redis, job_id: str) -> int:
    """Release ``job_id``'s reservation if arq no longer holds the job (it ended for good,
    or was never taken); the bytes freed."""
    return int(await redis.eval(_RELEASE, 3, BYTES_KEY, TOTAL_KEY, JOB_KEY_PREFIX + job_id,
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
                *(JOB_KEY_PREFIX + i for i in ids), GRACE_MS, *ids))
        if not cursor:
            return freed


async def queued_bytes(redis: Redis) -> int:
    """Payload bytes of the jobs waiting or running."""
    return int(await redis.get(TOTAL_KEY) or 0)
