"""The ingest path, top to bottom: chunk -> (fan out) -> embed -> write -> mark searchable.

``ingest_memory`` chunks a document and writes its Memory node. A small document is embedded
and written in the same job; a large one fans out into ``embed_part`` jobs of at most
``part_chunks`` chunks each, so several workers share it and every job stays short. The memory
becomes searchable when its last part lands. Every step is idempotent (ids are derived, writes
MERGE on them, parts are counted as a set), because arq runs a job at least once.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from shared import metrics, tasks
from shared.errors import EmbeddingRejected
from shared.graphstore import prepare_namespace
from shared.messages import ChunkSpan, IngestJob, PartJob
from shared.queue import EMBED_PART, INGEST, enqueue_part
from workers.graph import follow_ingest
from workers.outcome import JobRun, start_task, task_outcome
from workers.resources import Resources, resources
from workers.store import link_chunks, mark_ready, write_chunks, write_memory

log = logging.getLogger(__name__)


async def ingest_memory(ctx: dict, payload: dict) -> str:
    job = msgspec.convert(payload, IngestJob)
    res = resources(ctx)
    async with task_outcome(ctx, INGEST, job.task_id, job.namespace, job.memory_id) as run:
        if not await begin(res, ctx, run, job):
            return "cancelled"
        with metrics.STAGE_SECONDS.labels("chunk").time():
            chunks = await asyncio.to_thread(res.chunker.split, job.text)
        parts = split_parts(chunks, res.settings.part_chunks)
        await tasks.update_task(res.redis, job.task_id, job.namespace, total=len(parts),
                                message=f"{len(chunks)} chunks in {len(parts)} part(s)")
        await prepare_namespace(res.store, job.namespace, res.embedder.name,
                                await res.embedder.dimension())
        await write_memory(res.store.graph(job.namespace), job, len(chunks))
        if len(parts) == 1:
            return await embed_and_write(res, PartJob(
                task_id=job.task_id, memory_id=job.memory_id, namespace=job.namespace,
                part=0, parts=1, chunk_count=len(chunks), chunks=chunks))
        for i, part in enumerate(parts):
            await enqueue_part(res.redis, res.settings, PartJob(
                task_id=job.task_id, memory_id=job.memory_id, namespace=job.namespace,
                part=i, parts=len(parts), chunk_count=len(chunks), chunks=part))
        return f"fanned out into {len(parts)} parts"
    return "failed"


async def embed_part(ctx: dict, payload: dict) -> str:
    job = msgspec.convert(payload, PartJob)
    res = resources(ctx)
    async with task_outcome(ctx, EMBED_PART, job.task_id, job.namespace, job.memory_id) as run:
        if not await begin(res, ctx, run, job):
            return "cancelled"
        return await embed_and_write(res, job)
    return "failed"


async def embed_and_write(res: Resources, job: PartJob) -> str:
    started = time.perf_counter()
    with metrics.STAGE_SECONDS.labels("embed").time():
        vectors = await res.embedder.embed([c.text for c in job.chunks])
    dim = await res.embedder.dimension()
    if vectors.shape != (len(job.chunks), dim):
        raise EmbeddingRejected(f"the embedder returned vectors of shape {vectors.shape}, "
                                f"expected ({len(job.chunks)}, {dim})")
    embedded = time.perf_counter()
    graph = res.store.graph(job.namespace)
    await prepare_namespace(res.store, job.namespace, res.embedder.name, dim)
    with metrics.STAGE_SECONDS.labels("write").time():
        await write_chunks(graph, job.memory_id, job.chunks, vectors)
    metrics.CHUNKS_EMBEDDED.inc(len(job.chunks))
    log.info("part %d/%d of %s: %d chunks, embed %.2fs, write %.2fs", job.part + 1, job.parts,
             job.memory_id, len(job.chunks), embedded - started, time.perf_counter() - embedded)
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl)
    if done >= job.parts:
        if not await owns_memory(res, job.namespace, job.memory_id, job.task_id):
            return "cancelled"  # deleted or cancelled meanwhile: never mark it searchable
        await finish_memory(res, job)
        return "done"
    return f"part {job.part + 1}/{job.parts} written"


async def finish_memory(res: Resources, job: PartJob) -> None:
    """The last part landed: link the chunks in order and make the memory searchable."""
    graph = res.store.graph(job.namespace)
    with metrics.STAGE_SECONDS.labels("finish").time():
        await link_chunks(graph, job.memory_id, job.chunk_count)
        await mark_ready(graph, job.memory_id)
    await tasks.update_task(res.redis, job.task_id, job.namespace, state="done",
                            done=job.parts, finished_at=time.time(),
                            message=f"searchable: {job.chunk_count} chunks", error="")
    await follow_ingest(res, job.task_id, job.namespace, job.memory_id)


def split_parts(chunks: list[ChunkSpan], size: int) -> list[list[ChunkSpan]]:
    size = max(1, size)
    return [chunks[i : i + size] for i in range(0, len(chunks), size)] or [[]]


async def begin(res: Resources, ctx: dict, run: JobRun, job: IngestJob | PartJob) -> bool:
    """Start (or resume) the task, unless its memory was deleted meanwhile."""
    if not await owns_memory(res, job.namespace, job.memory_id, job.task_id):
        run.outcome = "cancelled"
        return False
    await start_task(res, ctx, job.task_id, job.namespace)
    return True


async def owns_memory(res: Resources, namespace: str, memory_id: str, task_id: str) -> bool:
    """False once the memory was deleted (or its ingest failed): the job then does nothing."""
    owner = await tasks.owner_task(res.redis, namespace, memory_id)
    if owner == task_id:
        return True
    record = await tasks.get_task(res.redis, task_id)
    if record is not None and record.state in ("queued", "running"):
        await tasks.update_task(res.redis, task_id, namespace, state="cancelled",
                                finished_at=time.time(), message="the memory was deleted")
    return False
