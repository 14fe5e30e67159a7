"""The arq queue: Redis connection, msgpack serialisation (msgspec, no pickle), job names and
the enqueue calls the front and the workers make."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
from arq.connections import ArqRedis
from redis.asyncio import ConnectionPool

from shared.ids import part_job_id
from shared.messages import DeleteJob, GraphJob, GraphPartJob, IngestJob, PartJob
from shared.settings import Settings

INGEST = "ingest_memory"
EMBED_PART = "embed_part"
DELETE = "delete_memory"
BUILD_GRAPH = "build_graph"
GRAPH_PART = "graph_part"


def _encode_unknown(obj: Any) -> Any:
    # arq stores a failed job's exception as its result: keep its text, not the object
    if isinstance(obj, BaseException):
        return f"{type(obj).__name__}: {obj}"
    raise NotImplementedError(type(obj))


serialize = msgspec.msgpack.Encoder(enc_hook=_encode_unknown).encode
deserialize = msgspec.msgpack.Decoder().decode


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


async def enqueue_ingest(redis: ArqRedis, settings: Settings, job: IngestJob) -> bool:
    """False when a job with this task id is already queued or ran recently."""
    queued = await redis.enqueue_job(INGEST, job, _job_id=job.task_id, _expires=_expires(settings))
    return queued is not None


async def enqueue_part(redis: ArqRedis, settings: Settings, job: PartJob) -> None:
    await redis.enqueue_job(
        EMBED_PART, job, _job_id=part_job_id(job.task_id, job.part), _expires=_expires(settings)
    )


async def enqueue_delete(redis: ArqRedis, settings: Settings, job: DeleteJob) -> None:
    await redis.enqueue_job(DELETE, job, _job_id=job.task_id, _expires=_expires(settings))


async def enqueue_graph(redis: ArqRedis, settings: Settings, job: GraphJob) -> None:
    await redis.enqueue_job(BUILD_GRAPH, job, _job_id=job.task_id, _expires=_expires(settings))


async def enqueue_graph_part(redis: ArqRedis, settings: Settings, job: GraphPartJob) -> None:
    """A continuation (``seq`` > 0) has an id of its own, derived: enqueued twice, it runs once."""
    job_id = part_job_id(job.task_id, job.part) + (f":next:{job.seq}" if job.seq else "")
    await redis.enqueue_job(GRAPH_PART, job, _job_id=job_id, _expires=_expires(settings))
