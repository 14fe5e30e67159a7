"""The task registry in Redis: what every task (ingest, delete, update, graph, files, import,
reembed) is doing, for graph_status, and which task owns each memory.

    zapomni:task:{task_id}          hash: a TaskRecord; expires after TASK_TTL_DAYS
    zapomni:tasks:{ns}:{state}      sorted set of task ids by last change, for counts
    zapomni:tasks:*:{state}         the same over every namespace
    zapomni:mem:{ns}:{memory_id}    the task that owns a memory: its ingest, or a delete
    zapomni:gen                     a counter: each claim's generation (newer writes win)
    zapomni:parts:{task_id}         hash: finished part number -> worker that wrote it
    zapomni:last:{ns}:{thread hash} the memory added last to that thread (conversation order)

A record lives as long as any job of its task can: while the task is queued or running,
``ACTIVE_TTL`` (a queued job's life, ``JOB_EXPIRES``, and a record's life after that), so a
job never runs without the record it reads; once the task has ended, ``TASK_TTL``. (Issue
45: records of 7 days against jobs of 30 lost the adds and deletes a long outage held up.)

Nothing here outlives the records it serves: a count set is trimmed of the tasks whose
records have expired whenever a task moves into it, and expires a record's life after the
last did; a thread's last memory expires a record's life after its last add (a thread
silent for longer starts a new chain). Memory claims live as long as their memory; a claim
whose task is gone (its record expired long after the task ended, or was lost with Redis'
data) is taken over by the next add or delete of that memory (shared/tasks/adds.py,
shared/tasks/takeover.py).

Task state is a state machine with this module as its only writer:

    queued -> running -> done | failed | cancelled

A task is queued ("waiting for a worker") until a worker starts it; starting it says so in
its message ("a worker started it"), so graph_status's state and message agree.

Every change is one atomic script that checks the allowed from-states, writes and refreshes
the record's expiry. Terminal states are final: a late "running" or progress write is refused,
and a write never recreates a record that has expired. The scripts name the keys they build
from a task's own fields (its namespace, its memory): the queue is one Redis server by design,
never a cluster.

A memory is owned by one task at a time. add_memory claims it for an ingest; a delete (or the
cancel of an ingest) takes the claim over in the same script that cancels the ingest, holds it
while it removes what was written, and gives it up in the same script that marks it done. An
ingest that finds it no longer owns its memory after a write undoes what it wrote. A metadata
update takes a stored memory over from its ended ingest and gives it back when it ends (the
takes: shared/tasks/takeover.py).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio import Redis

from zapomni.shared.protocol.base import TASK_STATES
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.tasks import capacity

TASK_KEY = "zapomni:task:"
ACTIVE = ("queued", "running")
TERMINAL = ("done", "failed", "cancelled")
LOST = "lost"  # what a refused move reports when the task no longer owns its memory
# days a task record is kept after its last change: long enough to look back on a week's
# work, short enough that the records of a busy deployment stay a bounded set
TASK_TTL_DAYS = 7
TASK_TTL = TASK_TTL_DAYS * 86400  # seconds
# seconds a queued job waits for a worker before arq drops it: 30 days, so a queued job
# outlives a long worker outage (its bytes stay counted against max_queue_bytes meanwhile)
JOB_EXPIRES = 30 * 86400
# seconds an active task's record lives after its last change: longer than any job of it
ACTIVE_TTL = JOB_EXPIRES + TASK_TTL

# helpers every script starts with: move a task between the count sets, and the key of the
# claim on a task's memory (both from the task's own fields). The add path's script
# (shared/tasks/adds.py) starts with them too
LIB = """
local JOB_EXPIRES = """ + str(JOB_EXPIRES) + """
local function task_key(id) return 'zapomni:task:' .. id end
local function active(state) return state == 'queued' or state == 'running' end
-- how long a record (or a set of records) in ``state`` lives: an active task's outlives
-- every job of it (a queued job lives JOB_EXPIRES), an ended one's ``ttl``
local function life(state, ttl)
  if active(state) then return tonumber(ttl) + JOB_EXPIRES end
  return tonumber(ttl)
end
local function claim_key(key)
  local f = redis.call('HMGET', key, 'namespace', 'memory_id')
  return 'zapomni:mem:' .. f[1] .. ':' .. f[2]
end
-- (a set is trimmed of the tasks whose records have expired each time one moves in, and
-- expires itself once no task has moved in for a record's life: bounded without get_stats)
local function place(key, id, from, to, now, ttl)
  local ns = redis.call('HGET', key, 'namespace')
  if from ~= '' then
    redis.call('ZREM', 'zapomni:tasks:' .. ns .. ':' .. from, id)
    redis.call('ZREM', 'zapomni:tasks:*:' .. from, id)
  end
  for _, set in ipairs({'zapomni:tasks:' .. ns .. ':' .. to, 'zapomni:tasks:*:' .. to}) do
    redis.call('ZADD', set, now, id)
    redis.call('ZREMRANGEBYSCORE', set, '-inf', '(' .. (now - life(to, ttl)))
    redis.call('EXPIRE', set, life(to, ttl))
  end
end
-- a task from state ``from`` to ``to``: the state, when it started running, the count sets,
-- the expiry
local function transition(key, id, from, to, now, ttl)
  redis.call('HSET', key, 'state', to)
  if from == 'queued' and to == 'running' then redis.call('HSET', key, 'started_at', now) end
  place(key, id, from, to, now, ttl)
  redis.call('EXPIRE', key, life(to, ttl))
end
"""

# ARGV: task id, ttl, now, allowed from-states (",a,b,"), to-state or '', must own ('1'/''),
#       n, n field/value pairs to set, then field/increment pairs
_MOVE = LIB + """
local id, ttl, now, allowed, to = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local key = task_key(id)
local state = redis.call('HGET', key, 'state')
if not state then return {0, ''} end
if not string.find(allowed, ',' .. state .. ',', 1, true) then return {0, state} end
if ARGV[6] == '1' and redis.call('GET', claim_key(key)) ~= id then return {0, 'lost'} end
local n = tonumber(ARGV[7])
if n > 0 then redis.call('HSET', key, unpack(ARGV, 8, 7 + 2 * n)) end
for i = 8 + 2 * n, #ARGV, 2 do redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1]) end
if state == 'queued' and to == 'running' then  -- the message agrees with the state
  local said = redis.call('HGET', key, 'message') or ''
  if string.sub(said, 1, 20) == 'waiting for a worker' then
    redis.call('HSET', key, 'message', 'a worker started it' .. string.sub(said, 21))
  end
end
if to ~= '' and to ~= state then
  transition(key, id, state, to, now, ttl)
else
  redis.call('EXPIRE', key, life(state, ttl))
end
return {1, state}
"""

# A task ends and gives its memory up (a delete; a failed ingest) in one step. A task that
# took the memory over from another (an update: its record names the ``previous`` owner)
# gives it back to that one instead, and a done update leaves the metadata's digest it wrote
# in that task's record (the digest the same text added again is compared with).
# ARGV: task id, ttl, now, to-state, field/value pairs. Returns {1, state} or {0, state}
_END_AND_RELEASE = LIB + """
local id = ARGV[1]
local key = task_key(id)
local state = redis.call('HGET', key, 'state')
if not state then return {0, ''} end
if not active(state) then return {0, state} end
local claim = claim_key(key)
if redis.call('GET', claim) == id then
  local previous = redis.call('HGET', key, 'previous') or ''
  if previous == '' then
    redis.call('DEL', claim)
  else
    redis.call('SET', claim, previous)
    local digest = redis.call('HGET', key, 'meta_hash') or ''
    if ARGV[4] == 'done' and digest ~= '' and redis.call('EXISTS', task_key(previous)) == 1 then
      redis.call('HSET', task_key(previous), 'meta_hash', digest)
    end
  end
end
if #ARGV > 4 then redis.call('HSET', key, unpack(ARGV, 5)) end
transition(key, id, state, ARGV[4], ARGV[3], ARGV[2])
return {1, state}
"""

# ARGV: task id, ttl, part, worker, '1' to show the count as done. Returns {parts written,
# state}; parts -1 when the task has ended (nothing recorded)
_FINISH_PART = LIB + """
local key = task_key(ARGV[1])
local state = redis.call('HGET', key, 'state')
if not state or not active(state) then return {-1, state or ''} end
local parts = 'zapomni:parts:' .. ARGV[1]
redis.call('HSET', parts, ARGV[3], ARGV[4])
redis.call('EXPIRE', parts, life(state, ARGV[2]))
local done = redis.call('HLEN', parts)
if ARGV[5] == '1' then redis.call('HSET', key, 'done', done) end
redis.call('HSET', key, 'heartbeat_at', ARGV[6])
redis.call('EXPIRE', key, life(state, ARGV[2]))
return {done, state}
"""

# KEYS: the record. ARGV: task id, ttl, now, field/value pairs. 1 when written
_CREATE = LIB + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[1], life('queued', ARGV[2]))
place(KEYS[1], ARGV[1], '', 'queued', ARGV[3], ARGV[2])
return 1
"""

# A job whose task's record is gone while the memory's claim is still the task's (Redis lost
# the record, or it expired under an older version): its job carries all it needs, so the
# record is written again, running, and the job goes on. KEYS: claim, record. ARGV: task
# id, ttl, now, field/value pairs. 1 when written
_RESTORE = LIB + """
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('EXPIRE', KEYS[2], life('running', ARGV[2]))
place(KEYS[2], ARGV[1], '', 'running', ARGV[3], ARGV[2])
return 1
"""


@dataclass(frozen=True)
class Moved:
    """The answer of a state change: whether it was made, and the state it found ('' when
    the record is gone, ``LOST`` when the task no longer owns its memory)."""

    ok: bool
    before: str


@dataclass(frozen=True)
class Claim:
    """add_memory's claim: ``owner`` is '' when this task now owns the memory (``gen`` is
    its generation, ``after`` the turn before it in its thread, ``batch`` the job that
    holds it: shared/tasks/adds.py); otherwise the task that owns it, with its kind and state."""

    owner: str
    kind: str = ""
    state: str = ""
    after: str = ""
    gen: int = 0
    batch: str = ""


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


def flat_fields(fields: TaskRecord | dict[str, Any]) -> list[str]:
    """HSET's field/value pairs, every value as text."""
    items = msgspec.structs.asdict(fields) if isinstance(fields, TaskRecord) else fields
    return [x for k, v in items.items() for x in (k, str(v))]


def as_text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def owner_task(redis: Redis, namespace: str, memory_id: str) -> str | None:
    value = await redis.get(memory_key(namespace, memory_id))
    return value.decode() if value else None


async def create_task(redis: Redis, record: TaskRecord, ttl: int) -> bool:
    """Write a new task record (queued); False when a record with this id exists already
    (a job that runs again creates its follow-up task once)."""
    created = await redis.eval(_CREATE, 1, task_key(record.task_id), record.task_id, ttl,
                               record.created_at, *flat_fields(record))
    return bool(created)


async def restore_task(redis: Redis, record: TaskRecord, ttl: int) -> bool:
    """Write ``record`` (running) again if it is gone and its memory's claim is still its
    task's; False otherwise (the task ended, or another task took the memory)."""
    keys = [memory_key(record.namespace, record.memory_id), task_key(record.task_id)]
    record = msgspec.structs.replace(record, state="running")
    return bool(await redis.eval(_RESTORE, len(keys), *keys, record.task_id, ttl, time.time(),
                                 *flat_fields(record)))


async def move(redis: Redis, task_id: str, to: str = "", *, ttl: int,
               allowed: tuple[str, ...] = ACTIVE, owning: bool = False,
               add: dict[str, int] | None = None, **fields: Any) -> Moved:
    """Change a task: set ``fields``, add to counters (``add``) and move it to state ``to``
    (none: the state stays), if it is in one of the ``allowed`` states (and, ``owning``,
    still owns its memory). Starting to run stamps started_at. Refreshes the expiry."""
    ok, before = await redis.eval(*_move_args(task_id, to, ttl, allowed, owning, add, fields))
    return Moved(bool(ok), as_text(before))


async def move_all(redis: Redis, changes: list[tuple[str, dict[str, Any]]], to: str = "", *,
                   ttl: int, owning: bool = False) -> list[Moved]:
    """``move`` of several tasks, each (task id, its fields), in one round trip: each its
    own atomic step (the tasks of a batch of memories: workers/batch.py)."""
    async with redis.pipeline(transaction=False) as pipe:
        for task_id, fields in changes:
            pipe.eval(*_move_args(task_id, to, ttl, ACTIVE, owning, None, fields))
        replies = await pipe.execute()
    return [Moved(bool(ok), as_text(before)) for ok, before in replies]


def _move_args(task_id: str, to: str, ttl: int, allowed: tuple[str, ...], owning: bool,
               add: dict[str, int] | None, fields: dict[str, Any]) -> list[Any]:
    flat = flat_fields(fields)
    incr = [x for kv in (add or {}).items() for x in (kv[0], str(int(kv[1])))]
    return [_MOVE, 0, task_id, ttl, time.time(), "," + ",".join(allowed) + ",", to,
            "1" if owning else "", len(flat) // 2, *flat, *incr]


async def owners(redis: Redis, namespace: str, memory_ids: list[str]) -> list[str | None]:
    """The task that owns each of these memories (one round trip)."""
    if not memory_ids:
        return []
    values = await redis.mget([memory_key(namespace, m) for m in memory_ids])
    return [v.decode() if v else None for v in values]


async def end_and_release(redis: Redis, task_id: str, to: str, *, ttl: int,
                          **fields: Any) -> Moved:
    """End an active task in state ``to`` and give up its memory if it holds it, at once."""
    ok, before = await redis.eval(_END_AND_RELEASE, 0, task_id, ttl, time.time(), to,
                                  *flat_fields(fields))
    return Moved(bool(ok), as_text(before))


async def finish_part(redis: Redis, task_id: str, part: int, worker: str, ttl: int, *,
                      progress: bool = True) -> int:
    """Record part ``part`` as written (and by which worker); return how many distinct parts
    are written, or -1 when the task has ended (then nothing is recorded). ``progress``:
    also show that count as the task's done."""
    done, _ = await redis.eval(_FINISH_PART, 0, task_id, ttl, part, worker,
                               "1" if progress else "", time.time())
    return int(done)


async def part_workers(redis: Redis, task_id: str) -> dict[int, str]:
    raw = await redis.hgetall(parts_key(task_id))
    return {int(k): v.decode() for k, v in raw.items()}


async def get_task(redis: Redis, task_id: str) -> TaskRecord | None:
    return record_of(await redis.hgetall(task_key(task_id)))


def record_of(raw: dict[bytes, bytes]) -> TaskRecord | None:
    """A record as HGETALL answers it (None: no record)."""
    if not raw or b"state" not in raw:
        return None
    data = {k.decode(): v.decode() for k, v in raw.items()}
    return msgspec.convert(data, TaskRecord, strict=False)


async def task_totals(redis: Redis, ttl: int) -> dict[str, int]:
    """Tasks by state over every namespace (kept in sets of their own: no key scan)."""
    return await task_counts(redis, "*", ttl)


def life(state: str, ttl: int) -> int:
    """How long a record in ``state`` lives after its last change (LIB's ``life``)."""
    return ttl + JOB_EXPIRES if state in ACTIVE else ttl


async def task_counts(redis: Redis, namespace: str, ttl: int) -> dict[str, int]:
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for state in TASK_STATES:
            pipe.zremrangebyscore(state_key(namespace, state), "-inf", now - life(state, ttl))
            pipe.zcard(state_key(namespace, state))
        replies = await pipe.execute()
    return {state: int(replies[2 * i + 1]) for i, state in enumerate(TASK_STATES)}


async def queue_depth(redis: Redis) -> int:
    """Jobs waiting or running (arq keeps a job in its queue's sorted set until it ends)."""
    return int(await redis.zcard(capacity.QUEUE_NAME))

