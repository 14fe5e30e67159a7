"""The add path's queue step, shared by the front (add_memory) and the workers that add
files (workers/files.py): reserve the job's bytes, claim the memory for a new ingest task,
enqueue its job. A memory owned by another task already is answered with that claim and
nothing is enqueued; a job that cannot be enqueued gives its claim back."""

from __future__ import annotations

import time

import redis.exceptions
from arq.connections import ArqRedis

from zapomni.shared import capacity, tasks
from zapomni.shared.ids import memory_id, new_task_id
from zapomni.shared.messages import AddMemory, IngestJob, TaskRecord
from zapomni.shared.queue import enqueue_ingest, payload_size
from zapomni.shared.settings import Settings
from zapomni.shared.validation import metadata_digest

REDIS_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


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


async def claim_and_enqueue(redis: ArqRedis, settings: Settings, memory: AddMemory
                            ) -> tuple[TaskRecord, tasks.Claim]:
    """Queue ``memory``'s ingest: (its task record, the claim). ``claim.owner`` is set when
    another task owns the memory: then nothing was queued. Overloaded when the queue is
    full (nothing is left behind)."""
    record = TaskRecord(task_id=new_task_id(), kind="ingest", namespace=memory.namespace,
                        memory_id=memory_id(memory.namespace, memory.content_hash), total=1,
                        created_at=time.time(), message="waiting for a worker",
                        meta_hash=digest(memory))
    ttl = settings.task_ttl_days * 86400
    # the bytes first: a refused add leaves nothing behind (no claim, no turn in a thread)
    await capacity.reserve(redis, settings, record.task_id,
                           payload_size(ingest_job(memory, record, "")), check=True)
    claim = await tasks.claim_memory(redis, record, ttl, memory.thread)
    if claim.owner:
        await capacity.release(redis, record.task_id)
        return record, claim
    record = TaskRecord(**{**_fields(record), "gen": claim.gen})
    try:
        await enqueue_ingest(redis, settings, ingest_job(memory, record, claim.after),
                             bounded=True)
    except REDIS_ERRORS:
        await forget_claim(redis, record, memory.thread, claim.after)
        raise
    return record, claim


def _fields(record: TaskRecord) -> dict:
    return {f: getattr(record, f) for f in record.__struct_fields__}


async def forget_claim(redis: ArqRedis, record: TaskRecord, thread: str, before: str) -> None:
    """Undo a claim whose job could not be enqueued, so a retry of the same text works."""
    try:
        await tasks.forget_claim(redis, record, thread, before)
        await capacity.release(redis, record.task_id)
    except REDIS_ERRORS:
        pass  # Redis is gone; so is the claim's effect until it is back
