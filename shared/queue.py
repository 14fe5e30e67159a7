"""The arq queue: Redis connection, msgpack serialisation (msgspec, no pickle), job names and
the enqueue calls the front and the workers make (each job's bytes reserved: shared/capacity.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from arq.connections import ArqRedis
from arq.constants import job_key_prefix
from arq.jobs import DeserializationError, deserialize_job
from redis.asyncio import ConnectionPool

from zapomni.shared import capacity
from zapomni.shared.ids import part_job_id
from zapomni.shared.messages import (
    DeleteJob,
    FilesJob,
    GraphJob,
    GraphPartJob,
    IngestJob,
    PartJob,
    UpdateJob,
)
from zapomni.shared.settings import Settings

INGEST = "ingest_memory"
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
        default_queue_name=settings.queue_name,
    )
    client.auto_close_connection_pool = True  # as Redis.from_pool does: aclose() owns the pool
    return client


def _expires(settings: Settings) -> timedelta:
    return timedelta(days=settings.job_expires_days)


async def enqueue(redis: ArqRedis, settings: Settings, function: str, job: Any, job_id: str, *,
                  bounded: bool = False, first: bool = False) -> bool:
    """Enqueue ``job`` under ``job_id`` with its bytes reserved (shared/capacity.py).
    ``bounded``: refuse (Overloaded) when the queue is full; the front's adds and graph
    builds are, while what workers enqueue (fan-out parts, follow-up graph jobs) and deletes
    are only counted. ``first``: ahead of every job waiting (arq takes the lowest score
    first). False when arq already holds a job with this id or ran it recently."""
    await capacity.reserve(redis, settings, job_id, payload_size(job), check=bounded)
    try:
        queued = await redis.enqueue_job(function, job, _job_id=job_id,
                                         _expires=_expires(settings),
                                         _defer_until=await _head(redis, settings) if first
                                         else None)
    except BaseException:
        await capacity.release_quietly(redis, job_id)
        raise
    if queued is None:
        await capacity.release(redis, job_id)  # a no-op while arq holds the job
    return queued is not None


async def _head(redis: ArqRedis, settings: Settings) -> datetime | None:
    """A moment just before the oldest waiting job's, or None when nothing waits longer
    than a job enqueued now would."""
    oldest = await redis.zrange(settings.queue_name, 0, 0, withscores=True)
    if not oldest or oldest[0][1] >= time.time() * 1000:
        return None
    return datetime.fromtimestamp((oldest[0][1] - 1) / 1000, UTC)


async def enqueue_ingest(redis: ArqRedis, settings: Settings, job: IngestJob, *,
                         bounded: bool = False) -> bool:
    """False when a job with this task id is already queued or ran recently."""
    return await enqueue(redis, settings, INGEST, job, job.task_id, bounded=bounded)


async def queued_ingest(redis: ArqRedis, task_id: str) -> IngestJob | None:
    """The ingest job of ``task_id`` as arq holds it (queued, or running: arq drops it
    when it ends), or None when arq holds none. One GET."""
    raw = await redis.get(job_key_prefix + task_id)
    if raw is None:
        return None
    try:
        job = deserialize_job(raw, deserializer=deserialize)
        if job.function != INGEST or not job.args:
            return None
        return msgspec.convert(job.args[0], IngestJob)
    except (DeserializationError, msgspec.ValidationError):
        return None  # a job no worker could read either (it fails its task)


async def enqueue_part(redis: ArqRedis, settings: Settings, job: PartJob) -> None:
    await enqueue(redis, settings, EMBED_PART, job, part_job_id(job.task_id, job.part))


async def enqueue_delete(redis: ArqRedis, settings: Settings, job: DeleteJob) -> None:
    """A delete goes to the head of the queue: it is short, and an add of the same text is
    refused until it is done (shared/tasks.py)."""
    await enqueue(redis, settings, DELETE, job, job.task_id, first=True)


async def enqueue_graph(redis: ArqRedis, settings: Settings, job: GraphJob, *,
                        bounded: bool = False) -> None:
    await enqueue(redis, settings, BUILD_GRAPH, job, job.task_id, bounded=bounded)


async def enqueue_graph_part(redis: ArqRedis, settings: Settings, job: GraphPartJob) -> None:
    """A continuation (``seq`` > 0) has an id of its own, derived: enqueued twice, it runs once."""
    job_id = part_job_id(job.task_id, job.part) + (f":next:{job.seq}" if job.seq else "")
    await enqueue(redis, settings, GRAPH_PART, job, job_id)


async def enqueue_update(redis: ArqRedis, settings: Settings, job: UpdateJob) -> None:
    """A metadata update: checked against the queue's limits like an add."""
    await enqueue(redis, settings, UPDATE, job, job.task_id, bounded=True)


async def enqueue_files(redis: ArqRedis, settings: Settings, job: FilesJob, *,
                        bounded: bool = False) -> None:
    """A files task's continuation, after ``walked`` files, with an id of its own, derived:
    enqueued twice, it runs once (the front queues the first slice under the task's id)."""
    job_id = job.task_id + (f":files:{job.walked}" if job.walked else "")
    await enqueue(redis, settings, FILES, job, job_id, bounded=bounded)
