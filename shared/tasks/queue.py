"""The arq queue: Redis connection, msgpack serialisation (msgspec, no pickle), job names and
the enqueue calls the front and the workers make (each job's bytes reserved:
shared/tasks/capacity.py). A task and its first job are one step (``queue_task``, the script
task_job.lua); adds and deletes are enqueued by the scripts that write their tasks
(shared/tasks/arq_internals.py)."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from zapomni.shared.protocol.ids import part_job_id
from zapomni.shared.protocol.jobs import FilesJob, GraphPartJob, PartJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, tasks
from zapomni.shared.tasks.arq_internals import ENQUEUE, queued_job
from zapomni.shared.tasks.tasks import JOB_EXPIRES

INGEST_BATCH = "ingest_batch"  # the memories of a batch (shared/tasks/adds.py)
EMBED_PART = "embed_part"
DELETE = "delete_memory"
BUILD_GRAPH = "build_graph"
GRAPH_PART = "graph_part"
UPDATE = "update_memory"
FILES = "ingest_files"
IMPORT = "import_batch"
REEMBED = "reembed_chunks"


def _encode_unknown(obj: Any) -> Any:
    # arq stores a failed job's exception as its result: keep its text, not the object
    if isinstance(obj, BaseException):
        return f"{type(obj).__name__}: {obj}"
    raise NotImplementedError(type(obj))


serialize = msgspec.msgpack.Encoder(enc_hook=_encode_unknown).encode
deserialize = msgspec.msgpack.Decoder().decode


def payload_size(job: Any) -> int:
    """The bytes a job takes in the queue (its arguments; arq adds a few dozen)."""
    return len(serialize(job))


def connect_queue(settings: Settings, *, max_connections: int | None = None) -> ArqRedis:
    """An ArqRedis client that fails fast when Redis is down instead of hanging.
    It connects lazily, so a process can start before Redis does."""
    pool = ConnectionPool.from_url(
        settings.redis_url,
        socket_connect_timeout=min(settings.request_timeout, 3.0),
        socket_timeout=settings.request_timeout,
        max_connections=max_connections,
    )
    client = ArqRedis(
        pool,
        job_serializer=serialize,
        job_deserializer=deserialize,
        default_queue_name=capacity.QUEUE_NAME,
    )
    client.auto_close_connection_pool = True  # as Redis.from_pool does: aclose() owns the pool
    return client


async def enqueue(redis: ArqRedis, settings: Settings, function: str, job: Any, job_id: str, *,
                  bounded: bool = False) -> bool:
    """Enqueue ``job`` under ``job_id`` with its bytes reserved (shared/tasks/capacity.py says
    whose jobs are refused when the queue is full, ``bounded``, and whose only counted).
    False when arq already holds a job with this id or ran it recently."""
    await capacity.reserve(redis, settings, job_id, payload_size(job), check=bounded)
    try:
        queued = await redis.enqueue_job(function, job, _job_id=job_id,
                                         _expires=timedelta(seconds=JOB_EXPIRES))
    except BaseException:
        await capacity.release_quietly(redis, job_id)
        raise
    if queued is None:
        await capacity.release(redis, job_id)  # a no-op while arq holds the job
    return queued is not None


_TASK_JOB = (tasks.LIB + capacity.LUA + ENQUEUE
             + Path(__file__).with_name("task_job.lua").read_text())


async def queue_task(redis: ArqRedis, settings: Settings, record: TaskRecord, function: str,
                     job: Any, *, bounded: bool) -> bool:
    """Write the new task ``record`` and enqueue its ``job`` (``function(job)``, under the
    task's id) with its bytes reserved, in one step (task_job.lua). ``bounded``: refused
    (Overloaded) past the queue's limits, nothing written; otherwise only counted. False when
    the record exists already (a job that runs again starts its follow-up task once)."""
    return await _task_job(redis, settings, record.task_id, function, job, bounded=bounded,
                           new=True, fields=tasks.flat_fields(record))


async def queue_job_of(redis: ArqRedis, settings: Settings, task_id: str, function: str,
                       job: Any, *, bounded: bool, **fields: Any) -> bool:
    """Enqueue the job of a task whose record is written and queued already (a task taken
    over first: an update), setting ``fields`` on the record in the same step. False when
    the task is no longer queued (a delete took the memory meanwhile): nothing is queued."""
    return await _task_job(redis, settings, task_id, function, job, bounded=bounded,
                           new=False, fields=tasks.flat_fields(fields))


async def _task_job(redis: ArqRedis, settings: Settings, task_id: str, function: str,
                    job: Any, *, bounded: bool, new: bool, fields: list[str]) -> bool:
    size = payload_size(job)
    if bounded:
        capacity.check_size(settings, size)
    queued = queued_job(capacity.QUEUE_NAME, function, job, task_id, serializer=serialize,
                        expires_s=JOB_EXPIRES, size=size)

    async def attempt() -> list[int]:
        return await redis.eval(_TASK_JOB, 1, tasks.task_key(task_id), task_id,
                                tasks.TASK_TTL, time.time(), "1" if new else "",
                                "1" if bounded else "", settings.max_queue_bytes,
                                settings.max_queue_depth, *queued.args(), size, *fields)

    reply = await attempt()
    if reply[0] <= 0 and await capacity.reconcile(redis, gated=True):
        reply = await attempt()
    if reply[0] <= 0:
        raise capacity.refusal(settings, reply)
    return reply[0] == 1


async def enqueue_part(redis: ArqRedis, settings: Settings, job: PartJob) -> None:
    await enqueue(redis, settings, EMBED_PART, job, part_job_id(job.task_id, job.part))


async def enqueue_graph_part(redis: ArqRedis, settings: Settings, job: GraphPartJob) -> None:
    """A continuation (``seq`` > 0) has an id of its own, derived: enqueued twice, it runs once."""
    job_id = part_job_id(job.task_id, job.part) + (f":next:{job.seq}" if job.seq else "")
    await enqueue(redis, settings, GRAPH_PART, job, job_id)


async def enqueue_files(redis: ArqRedis, settings: Settings, job: FilesJob) -> None:
    """A files task's continuation, after ``walked`` files, with an id of its own, derived:
    enqueued twice, it runs once (the front queues the first slice under the task's id)."""
    job_id = job.task_id + (f":files:{job.walked}" if job.walked else "")
    await enqueue(redis, settings, FILES, job, job_id)
