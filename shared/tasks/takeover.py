"""A task taking a memory over from the task that owns it (shared/tasks/tasks.py keeps the claims):
a delete, cancelling an ingest or an update still under way in the same step, and a
metadata update, from the ingest that wrote the memory once it has ended (given back when
the update ends). Each take is one script that checks the owner, writes the new task's
record and (a delete) enqueues its job."""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.tasks import capacity
from zapomni.shared.tasks.arq_internals import ENQUEUE, QueuedJob
from zapomni.shared.tasks.tasks import LIB, as_text, flat_fields, memory_key, task_key

# A delete takes a memory over and enqueues its job in one step (take_for_delete says what
# it answers). KEYS: claim, the delete's record. ARGV: delete task id, ttl, now, from_task,
# the message the cancelled ingest shows, seen, the job's six arq_enqueue arguments and its
# payload bytes (counted, never refused: shared/tasks/capacity.py), the record's field/value
# pairs
_TAKE = LIB + capacity.LUA + ENQUEUE + """
local owner = redis.call('GET', KEYS[1]) or ''
if ARGV[4] ~= '' and owner ~= ARGV[4] then return {0, owner} end
if owner ~= '' then
  local okey = task_key(owner)
  local f = redis.call('HMGET', okey, 'kind', 'state')
  if ARGV[4] ~= '' and not active(f[2]) then return {0, owner} end  -- it finished first
  if f[1] == 'delete' and active(f[2]) then return {2, owner} end
  if ARGV[6] ~= '' and owner ~= ARGV[6] then return {0, owner} end  -- changed since seen
  if (f[1] == 'ingest' or f[1] == 'update') and active(f[2]) then
    redis.call('HSET', okey, 'finished_at', ARGV[3], 'message', ARGV[5])
    transition(okey, owner, f[2], 'cancelled', ARGV[3], ARGV[2])
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], unpack(ARGV, 14))
redis.call('EXPIRE', KEYS[2], life('queued', ARGV[2]))
place(KEYS[2], ARGV[1], '', 'queued', ARGV[3], ARGV[2])
hold(ARGV[8], ARGV[13])
arq_enqueue(ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12])
return {1, owner}
"""

# An update takes its memory over from the task that owns it, if that task has ended (its
# ingest, done), and holds it while its job runs: no ingest of the same text, no second
# update, starts meanwhile; a delete still takes it over, cancelling the update in the same
# step (_TAKE). It gives the memory back when it ends (_END_AND_RELEASE).
# KEYS: claim, the update's record. ARGV: task id, ttl, now, take an unclaimed memory
# ('1'/''), field/value pairs of the record. Returns Taken's fields ({2}: nobody owns the
# memory: not stored, or stored before claims; the caller checks)
_TAKE_FOR_UPDATE = LIB + """
local owner = redis.call('GET', KEYS[1]) or ''
if owner == '' and ARGV[4] ~= '1' then return {2, '', '', ''} end
if owner ~= '' then
  local f = redis.call('HMGET', task_key(owner), 'kind', 'state')
  if active(f[2]) then return {0, owner, f[1] or '', f[2]} end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], unpack(ARGV, 5))
redis.call('HSET', KEYS[2], 'previous', owner)
redis.call('EXPIRE', KEYS[2], life('queued', ARGV[2]))
place(KEYS[2], ARGV[1], '', 'queued', ARGV[3], ARGV[2])
return {1, owner, '', ''}
"""

# An update refused after it took its memory (unknown, invalid, changes nothing, not
# enqueued), undone: the memory back to its owner, the record and its place in the counts.
# KEYS: claim, record. ARGV: task id, previous owner
_UNTAKE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2]) end
end
local ns = redis.call('HGET', KEYS[2], 'namespace')
if ns then
  for _, state in ipairs({'queued', 'running', 'done', 'failed', 'cancelled'}) do
    redis.call('ZREM', 'zapomni:tasks:' .. ns .. ':' .. state, ARGV[1])
    redis.call('ZREM', 'zapomni:tasks:*:' .. state, ARGV[1])
  end
end
return redis.call('DEL', KEYS[2])
"""


async def take_for_delete(redis: Redis, record: TaskRecord, ttl: int, job: QueuedJob, *,
                          from_task: str = "", message: str = "the memory was deleted",
                          seen: str = "") -> tuple[int, str]:
    """Make the delete task ``record`` the owner of its memory and enqueue its ``job``,
    cancelling an ingest still under way (with ``message``), all in one step: a delete is
    never accepted without its job (it goes ahead of the jobs waiting: ``job.first``).
    ``from_task``: only if that ingest owns it, while it runs (the cancel of an ingest).
    ``seen``: only if no task, or that one, owns it (the expiry sweep: the ingest that wrote
    the memory it read, so that the same text added again meanwhile is not taken). Returns
    (1, previous owner) when taken, (2, the delete already under way) when there is one, (0,
    the owner) when ``from_task`` owns it no longer or has ended (a cancel that comes after
    the end changes nothing), or another task than ``seen`` owns it. The record is written
    only when taken."""
    keys = [memory_key(record.namespace, record.memory_id), task_key(record.task_id)]
    code, owner = await redis.eval(
        _TAKE, len(keys), *keys, record.task_id, ttl, record.created_at, from_task, message,
        seen, *job.args(), job.size, *flat_fields(record))
    return int(code), as_text(owner)


@dataclass(frozen=True)
class Taken:
    """take_for_update's answer: ``code`` 1 taken (``owner``: the task it was taken from),
    0 refused (``owner`` is under way: its kind and state), 2 nobody owns the memory."""

    code: int
    owner: str
    kind: str = ""
    state: str = ""


async def take_for_update(redis: Redis, record: TaskRecord, ttl: int, *,
                          unclaimed: bool = False) -> Taken:
    """Make the update task ``record`` the owner of its memory while it runs, unless another
    task is under way on it. ``unclaimed``: also take a memory nobody owns (the caller has
    read it: it is stored). The record is written only when taken."""
    keys = [memory_key(record.namespace, record.memory_id), task_key(record.task_id)]
    code, owner, kind, state = await redis.eval(
        _TAKE_FOR_UPDATE, len(keys), *keys, record.task_id, ttl, record.created_at,
        "1" if unclaimed else "", *flat_fields(record))
    return Taken(int(code), as_text(owner), as_text(kind), as_text(state))


async def untake(redis: Redis, record: TaskRecord, previous: str) -> None:
    """Undo ``take_for_update`` for an update refused before its job was enqueued."""
    keys = [memory_key(record.namespace, record.memory_id), task_key(record.task_id)]
    await redis.eval(_UNTAKE, len(keys), *keys, record.task_id, previous)
