"""The arq queue: Redis connection, msgpack serialisation (msgspec, no pickle), job names and
the enqueue calls the front and the workers make (each job's bytes reserved:
shared/tasks/capacity.py). Adds and deletes are enqueued by the scripts that write their tasks
(shared/tasks/arq_internals.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from zapomni.shared.protocol.ids import part_job_id
from zapomni.shared.protocol.jobs import FilesJob, GraphJob, GraphPartJob, PartJob, UpdateJob
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity
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


async def enqueue_part(redis: ArqRedis, settings: Settings, job: PartJob) -> None:
    await enqueue(redis, settings, EMBED_PART, job, part_job_id(job.task_id, job.part))


async def enqueue_graph(redis: ArqRedis, settings: Settings, job: GraphJob) -> None:
    await enqueue(redis, settings, BUILD_GRAPH, job, job.task_id)


async def enqueue_graph_part(redis: ArqRedis, settings: Settings, job: GraphPartJob) -> None:
    """A continuation (``seq`` > 0) has an id of its own, derived: enqueued twice, it runs once."""
    job_id = part_job_id(job.task_id, job.part) + (f":next:{job.seq}" if job.seq else "")
    await enqueue(redis, settings, GRAPH_PART, job, job_id)


async def enqueue_update(redis: ArqRedis, settings: Settings, job: UpdateJob) -> None:
    """A metadata update: checked against the queue's limits like an add."""
    await enqueue(redis, settings, UPDATE, job, job.task_id, bounded=True)


async def enqueue_files(redis: ArqRedis, settings: Settings, job: FilesJob) -> None:
    """A files task's continuation, after ``walked`` files, with an id of its own, derived:
    enqueued twice, it runs once (the front queues the first slice under the task's id)."""
    job_id = job.task_id + (f":files:{job.walked}" if job.walked else "")
    await enqueue(redis, settings, FILES, job, job_id)
