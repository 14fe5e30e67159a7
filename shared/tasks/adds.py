"""The add path's queue step, shared by the front (add_memory) and the workers that add
files (workers/files.py): one Redis script checks the queue's room, claims the memory for a
new ingest task, writes the task's record, takes the memory's turn in its thread and puts it
on the queue. One step: whatever fails, all of it happened or none of it did (no task is left
queued without a job, no claim without a task). A memory owned by another task already is
answered with that claim, and nothing is written.

Small memories travel in batches, gathered by bytes. A memory whose job payload is at most
``MEMBER_BYTES`` joins its namespace's open batch (the batch job no worker has started yet),
while that batch holds less than ``BATCH_BYTES``; otherwise it opens the next batch, whose job
it enqueues. A worker starting a batch seals it (``seal_batch``): later adds open the next.
So adds wait in batches only while the workers are busy, and an add that finds them idle
travels alone, as fast as before. Each memory keeps its own task (graph_status,
cancel_task, get_memory while queued) and its place in its thread (the claim's order); a
joining add is refused only past the queue's bytes (a batch job is counted once against its
jobs). A larger memory has a batch job of its own, never joined (``alone``: it may fan out).

    zapomni:batch:{job id}       hash: task id -> the member's IngestJob as added (msgpack),
                                 dropped with the job's byte reservation (shared/tasks/capacity.py)
    zapomni:batch:open:{ns}      the id of the namespace's batch job small adds join
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from arq.connections import ArqRedis
from arq.constants import job_key_prefix

from zapomni.shared.protocol.api import AddMemory
from zapomni.shared.protocol.ids import memory_id, new_task_id
from zapomni.shared.protocol.jobs import BatchJob, IngestJob
from zapomni.shared.protocol.metadata import metadata_digest
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, tasks
from zapomni.shared.tasks.arq_internals import ENQUEUE, queued_job
from zapomni.shared.tasks.queue import INGEST_BATCH, JOB_EXPIRES, deserialize, serialize

# A batch gathers members up to this many payload bytes: ~8,000 tokens of text, the embedding
# work of one fanned-out part (PART_CHUNKS, 32 chunks of up to 256 tokens), so a batch
# job is as short as a part job (~45 turns of ~100 tokens). A memory joins one if its payload
# is at most a quarter of that (~2,000 tokens). Measured: docs/benchmarks.md, "Many small
# memories"
BATCH_BYTES = 32 * 1024
MEMBER_BYTES = BATCH_BYTES // 4

OPEN_PREFIX = capacity.BATCH_PREFIX + "open:"

# KEYS: claim, the new record, [thread's last memory]. ARGV: task id, ttl, now, memory id,
# namespace, the member's payload, joinable ('1'/''), max bytes, max jobs, batch bytes, the
# new batch job's six arq_enqueue arguments, a gone owner to take the claim from (or ''),
# field/value pairs of the record.
# Returns {1, '', '', '', previous turn, gen, batch} queued; {2, owner, its kind, its state}
# another task owns the memory (state '': its record is gone); over_limits' {0 or -1, total
# bytes, jobs} refused (nothing written)
_ADD = tasks.LIB + capacity.LUA + ENQUEUE + """
local id, ttl, now, mid, ns, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local owner = redis.call('GET', KEYS[1])
if owner and not (owner == ARGV[17] and redis.call('EXISTS', task_key(owner)) == 0) then
  local f = redis.call('HMGET', task_key(owner), 'kind', 'state')
  return {2, owner, f[1] or '', f[2] or '', '', 0, ''}
end
local size = string.len(payload)
local open_key = '""" + OPEN_PREFIX + """' .. ns
local batch = ''
if ARGV[7] == '1' then
  local open = redis.call('GET', open_key)
  if open and redis.call('EXISTS', '""" + job_key_prefix + """' .. open) == 1
      and held(open) + size <= tonumber(ARGV[10]) then
    batch = open
  end
end
local over = over_limits(ARGV[11], size, batch == '', ARGV[8], ARGV[9])
if over then return over end
local gen = redis.call('INCR', 'zapomni:gen')
if batch == '' then batch = ARGV[12] end
redis.call('SET', KEYS[1], id)
redis.call('HSET', KEYS[2], unpack(ARGV, 18))
redis.call('HSET', KEYS[2], 'gen', gen, 'batch', batch)
redis.call('EXPIRE', KEYS[2], life('queued', ttl))
place(KEYS[2], id, '', 'queued', now, ttl)
local before = ''
if KEYS[3] then
  before = redis.call('GET', KEYS[3]) or ''
  redis.call('SET', KEYS[3], mid, 'EX', ttl)
  if before == mid then before = '' end
  if before ~= '' then redis.call('HSET', KEYS[2], 'after', before) end
end
local members = '""" + capacity.BATCH_PREFIX + """' .. batch
redis.call('HSET', members, id, payload)
hold(batch, size)
if batch == ARGV[12] then
  redis.call('PEXPIRE', members, ARGV[14])
  arq_enqueue(ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16])
  if ARGV[7] == '1' then redis.call('SET', open_key, batch, 'PX', ARGV[14]) end
end
return {1, '', '', '', before, gen, batch}
"""

# KEYS: the namespace's open batch, the batch's members. ARGV: the batch's job id
_SEAL = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('HGETALL', KEYS[2])
"""


def ingest_job(memory: AddMemory, record: TaskRecord, after: str) -> IngestJob:
    """The job of the task ``record`` for ``memory``; ``after``: the turn before it in its
    thread."""
    return IngestJob(task_id=record.task_id, memory_id=record.memory_id,
                     namespace=memory.namespace, text=memory.text,
                     content_hash=memory.content_hash, tags=memory.tags, source=memory.source,
                     metadata_json=memory.metadata_json, created_at=record.created_at,
                     thread=memory.thread, after=after, gen=record.gen,
                     importance=memory.importance, memory_type=memory.memory_type,
                     pinned=memory.pinned, expires_at=memory.expires_at,
                     supersedes=memory.supersedes, line_offset=memory.line_offset,
                     occurred_at=memory.occurred_at, role=memory.role)


def digest(memory: AddMemory) -> str:
    return metadata_digest(memory.tags, memory.source, memory.metadata_json)


def members_key(batch_id: str) -> str:
    return capacity.BATCH_PREFIX + batch_id


async def claim_and_enqueue(redis: ArqRedis, settings: Settings, memory: AddMemory, *,
                            gone: str = "") -> tuple[TaskRecord, tasks.Claim]:
    """Queue ``memory``'s ingest in one step: (its task record, the claim). ``claim.owner``
    is set when another task owns the memory: then nothing was written (``claim.state`` is
    '' when that task's record is gone). ``gone``: such an owner, whose claim is taken over
    if it still holds it and its record is still gone (the caller found the memory not
    stored: ``take_gone_claim``). Overloaded when the queue is full (nothing was written
    either)."""
    record = TaskRecord(task_id=new_task_id(), kind="ingest", namespace=memory.namespace,
                        memory_id=memory_id(memory.namespace, memory.content_hash), total=1,
                        created_at=time.time(), message="waiting for a worker",
                        meta_hash=digest(memory))
    # the turn before it and the claim's generation are the script's: the worker reads
    # them from the record
    payload = serialize(ingest_job(memory, record, ""))
    capacity.check_size(settings, len(payload))
    reply = await _add(redis, settings, memory, record, payload, gone)
    if reply[0] <= 0 and await capacity.reconcile(redis, gated=True):
        reply = await _add(redis, settings, memory, record, payload, gone)
    if reply[0] <= 0:
        raise capacity.refusal(settings, reply)
    owner, kind, state, after, gen, batch = (tasks.as_text(x) for x in reply[1:7])
    claim = tasks.Claim(owner, kind, state, after, int(gen), batch)
    if not owner:
        record = msgspec.structs.replace(record, gen=int(gen), after=after, batch=batch)
    return record, claim


async def _add(redis: ArqRedis, settings: Settings, memory: AddMemory, record: TaskRecord,
               payload: bytes, gone: str) -> list[Any]:
    joinable = len(payload) <= MEMBER_BYTES
    job = queued_job(capacity.QUEUE_NAME, INGEST_BATCH,
                     BatchJob(batch_id=record.task_id, namespace=memory.namespace,
                              alone=not joinable),
                     record.task_id, serializer=serialize,
                     expires_s=JOB_EXPIRES, size=len(payload))
    keys = [tasks.memory_key(record.namespace, record.memory_id), tasks.task_key(record.task_id)]
    if memory.thread:
        keys.append(tasks.last_key(record.namespace, memory.thread))
    return await redis.eval(
        _ADD, len(keys), *keys, record.task_id, tasks.TASK_TTL, record.created_at,
        record.memory_id, record.namespace, payload, "1" if joinable else "",
        settings.max_queue_bytes, settings.max_queue_depth, BATCH_BYTES, *job.args(), gone,
        *tasks.flat_fields(record))


async def seal_batch(redis: ArqRedis, batch: BatchJob) -> list[tuple[dict, int, str]]:
    """The members of a batch as its job starts; no add joins it from now on (the next add
    opens the namespace's next batch). Each as (its payload as added, its claim's
    generation, the turn before it in its thread), from its record, in the order they were
    claimed; a member whose record has expired is left out."""
    flat = await redis.eval(_SEAL, 2, OPEN_PREFIX + batch.namespace,
                            members_key(batch.batch_id), batch.batch_id)
    raw = dict(zip(flat[::2], flat[1::2], strict=True))
    async with redis.pipeline(transaction=False) as pipe:
        for task_id in raw:
            pipe.hmget(tasks.task_key(tasks.as_text(task_id)), "gen", "after")
        found = await pipe.execute()
    members = [(deserialize(payload), int(gen), tasks.as_text(after or b""))
               for payload, (gen, after) in zip(raw.values(), found, strict=True)
               if gen is not None]
    return sorted(members, key=lambda m: m[1])


async def pending_job(redis: ArqRedis, record: TaskRecord) -> IngestJob | None:
    """The job of a queued or running ingest as it was added (from its batch), or None when
    none is held. One read."""
    raw = await redis.hget(members_key(record.batch), record.task_id) if record.batch else None
    try:
        return msgspec.convert(deserialize(raw), IngestJob) if raw else None
    except msgspec.ValidationError:
        return None  # a job no worker could read either (it fails its task)
