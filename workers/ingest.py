"""The ingest path of one memory, top to bottom: chunk -> (fan out) -> embed -> write -> mark
searchable. (Small memories come in batches and are written together: workers/batch.py.)

``ingest_one`` chunks a document and writes its Memory node. A small document is embedded
and written in the same job; a large one fans out into ``embed_part`` jobs of at most
``PART_CHUNKS`` chunks each, so several workers share it and every job stays short. The memory
is searchable from its first part: each part's chunks are found as soon as they are written,
with the memory shown as still ingesting (a new version of an updated memory waits for its
last part: the old one stays the one found until then). When the last part lands the memory
is complete ("ready"), its chunks are linked in order and its graph task starts. Every step
is idempotent (ids are derived, writes MERGE on them, parts are counted as a set), because
arq runs a job at least once.

A delete or a cancel takes the memory away from its ingest at any moment (shared/tasks/tasks.py).
The ingest looks again after each of its writes, and when the memory is no longer its own it
undoes what it wrote (its landed parts leave search with the memory node) and stops; the
memory is made complete only by the script that also checks the ownership
(``tasks.move(..., owning=True)``).
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import EmbeddingRejected, StoreError
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob, PartJob
from zapomni.shared.store import replication
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import EMBED_PART, enqueue_part
from zapomni.shared.text.chunking import code_language
from zapomni.workers.graph import follow_ingest
from zapomni.workers.outcome import JobRun, progressed, run_task, task_job
from zapomni.workers.resources import Resources, hook_for_tests
from zapomni.workers.store import (
    link_chunks,
    mark_landing,
    mark_ready,
    supersede,
    undo_memory,
    write_chunks,
    write_memory,
)

log = logging.getLogger(__name__)
ONE = "ingest_memory"  # one memory's ingest (a large one's batch, alone), as metrics name it
CHUNK_REPORT_S = 1.0  # how often a task being chunked shows how far it got, at most
# chunks per embed-and-write job when a document fans out: 32 chunks of up to 256 tokens are
# a few seconds of the in-process model, so a killed worker loses little and a large document
# is shared by every worker
PART_CHUNKS = 32
# texts embedded per call: each slice is progress (workers/outcome.py, the stall limit), so a
# batch of hundreds of chunks on a starved host is never taken for a hung job. 128: ~2 s of
# the in-process model idle (one text a run), minutes when starved a hundredfold, under the
# limit; 8 Ollama requests of 16 in flight, as many as a batch of small memories (at most
# 32 KiB of text) ever sent at once
EMBED_SLICE = 128


async def left_behind(res: Resources, job: IngestJob | PartJob, before: str) -> None:
    """A task that may not start (``before``: the state its start found, or LOST): one that
    lost its memory is cancelled, and what an earlier run of it wrote is undone."""
    if before == tasks.LOST:
        await tasks.move(res.redis, job.task_id, "cancelled", ttl=res.task_ttl,
                         finished_at=time.time(), message="the memory was deleted")
    if before in (tasks.LOST, "cancelled", "failed"):
        await undo_memory(res.store.graph(job.namespace), job.memory_id, job.task_id)


async def ingest_one(ctx: dict, job: IngestJob) -> str:
    """One memory, of any size: chunked, written, and fanned out into parts if large."""
    return await run_task(ctx, ONE, job, write_one, owning=True, ended=left_behind)


async def write_one(res: Resources, run: JobRun, job: IngestJob) -> str:
    await hook_for_tests(res, "owned", job)
    chunks = await chunk_text(res, job)
    parts = split_parts(chunks, PART_CHUNKS)
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, total=len(parts),
                     chunks=len(chunks), parts_at=time.time(),
                     message=f"{len(chunks)} chunks in {len(parts)} part(s)")
    since = await replication.mark(res.store, job.namespace)
    await prepare_namespace(res.store, job.namespace, res.embedder.name,
                            await res.embedder.dimension())
    await write_memory(res.store.graph(job.namespace), job, len(chunks))
    progressed()
    if not await still_owned(res, run, job, "memory_written"):
        return run.outcome
    jobs = [PartJob(task_id=job.task_id, memory_id=job.memory_id, namespace=job.namespace,
                    part=i, parts=len(parts), chunk_count=len(chunks), chunks=part)
            for i, part in enumerate(parts)]
    if len(jobs) == 1:
        return await embed_and_write(res, run, jobs[0], since)
    await replication.confirm(res.store, job.namespace, since)  # the parts need it
    return await fan_out(res, run, jobs)


async def fan_out(res: Resources, run: JobRun, jobs: list[PartJob]) -> str:
    """Write the first part here, then queue the others: the start of the text is found
    seconds after the add, instead of after the workers' first round of parts, which share
    the CPU (measured: 35 s for 1.6 MB on 2 workers of 4 jobs each). A run again writes it
    again (MERGE) and counts it once; the parts' job ids are derived, so each is queued
    once."""
    first = await embed_and_write(res, run, jobs[0],
                                  await replication.mark(res.store, jobs[0].namespace))
    if run.outcome != "done":  # the memory was taken away meanwhile: it is undone
        return first
    for part in jobs[1:]:
        await enqueue_part(res.redis, res.settings, part)
    return f"wrote part 1, fanned out {len(jobs) - 1} more"


async def chunk_text(res: Resources, job: IngestJob) -> list[ChunkSpan]:
    """Chunk in a thread; meanwhile the task says "chunking", with the share of the text
    done (a large text is split in sections: shared/text/large_text.py), once a second."""
    share = [0.0]
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, message="chunking")
    with metrics.STAGE_SECONDS.labels("chunk").time():
        split = asyncio.ensure_future(asyncio.to_thread(
            res.chunker.split, job.text, code_language(job.metadata_json),
            lambda done: share.__setitem__(0, done), job.line_offset))
        shown = 0.0
        while not (await asyncio.wait({split}, timeout=CHUNK_REPORT_S))[0]:
            if share[0] > shown:  # a section more is split (shared/text/large_text.py)
                shown = share[0]
                progressed()
            await tasks.move(res.redis, job.task_id, ttl=res.task_ttl,
                             heartbeat_at=time.time(), message=f"chunking: {share[0]:.0%}")
        progressed()
        return split.result()


@task_job(EMBED_PART, PartJob, owning=True, ended=left_behind)
async def embed_part(res: Resources, run: JobRun, job: PartJob) -> str:
    await hook_for_tests(res, "owned", job)
    return await embed_and_write(res, run, job, await replication.mark(res.store, job.namespace))


async def embed_and_write(res: Resources, run: JobRun, job: PartJob,
                          since: replication.Mark | None) -> str:
    """Embed and write one part; ``since``: the master the writes go to (confirmed on its
    replicas before the part counts, shared/store/replication.py)."""
    started = time.perf_counter()
    vectors = await embed(res, [c.text for c in job.chunks])
    embedded = time.perf_counter()
    graph = res.store.graph(job.namespace)
    prop = await prepare_namespace(res.store, job.namespace, res.embedder.name,
                                   vectors.shape[1])
    with metrics.STAGE_SECONDS.labels("write").time():
        await write_chunks(graph, job.memory_id, job.chunks, vectors, prop)
    progressed()
    metrics.CHUNKS_EMBEDDED.inc(len(job.chunks))
    log.info("part %d/%d of %s: %d chunks, embed %.2fs, write %.2fs", job.part + 1, job.parts,
             job.memory_id, len(job.chunks), embedded - started, time.perf_counter() - embedded)
    if not await still_owned(res, run, job, "part_written"):
        return run.outcome
    if job.parts > 1:  # a lone part is written again by its retry; a counted one is not
        await replication.confirm(res.store, job.namespace, since)
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl)
    if done < 0:  # the task ended meanwhile
        if await ended_done(res, job):
            # a run again of this part (at least once), or of the first job, while the other
            # parts finished the memory: what it wrote is that memory's own, and stays
            return "done"
        return await give_up(res, run, job)  # cancelled or failed: leave nothing behind
    if done >= job.parts:
        return await finish_memory(res, run, job, since)
    await mark_landing(graph, job.memory_id, job.task_id, done, job.parts)
    return f"part {job.part + 1}/{job.parts} written"


async def embed(res: Resources, texts: list[str]) -> np.ndarray:
    """The vectors of ``texts`` (a batch's every chunk in one call), checked: a rejection is
    the model's (missing, wrong dimension), the same for every text of a batch."""
    slices = []
    with metrics.STAGE_SECONDS.labels("embed").time():
        for start in range(0, len(texts), EMBED_SLICE):
            asked = texts[start : start + EMBED_SLICE]
            vectors = await res.embedder.embed(asked)
            dim = await res.embedder.dimension()  # after an embedding: Ollama's is known
            if vectors is None or vectors.shape != (len(asked), dim):
                shape = None if vectors is None else vectors.shape
                raise EmbeddingRejected(f"the embedder returned vectors of shape {shape}, "
                                        f"expected ({len(asked)}, {dim})")
            slices.append(vectors)
            progressed()
    if not slices:
        return np.zeros((0, await res.embedder.dimension()), np.float32)
    return np.concatenate(slices)


async def finish_memory(res: Resources, run: JobRun, job: PartJob,
                        since: replication.Mark | None) -> str:
    """The last part landed: link the chunks in order, make the memory searchable (a new
    version of an updated memory then replaces the old one in search), start its entity
    extraction, and mark the task done, which succeeds only while the memory is still this
    task's. A delete that came first wins: what was written is undone. The task is done
    only once the memory's writes are on the replicas required (nothing accepted is lost
    when the master dies)."""
    graph = res.store.graph(job.namespace)
    with metrics.STAGE_SECONDS.labels("finish").time():
        await link_chunks(graph, job.memory_id, job.chunk_count)
        await hook_for_tests(res, "finishing", job)
        if not await mark_ready(graph, job.memory_id, job.task_id):
            if await tasks.owner_task(res.redis, job.namespace, job.memory_id) != job.task_id:
                return await give_up(res, run, job)
            raise StoreError("the memory's node is missing; it is written again")
        await supersede(graph, job.memory_id)  # a new version: the old one leaves search
        await replication.confirm(res.store, job.namespace, since)
    follow = await follow_ingest(res, job.task_id, job.namespace, job.memory_id)
    moved = await tasks.move(res.redis, job.task_id, "done", ttl=res.task_ttl, owning=True,
                             done=job.parts, finished_at=time.time(), error="",
                             message=f"searchable: {job.chunk_count} chunks",
                             graph_task_id=follow)
    if not moved.ok and moved.before != "done":
        return await give_up(res, run, job)
    return "done"


async def ended_done(res: Resources, job: PartJob) -> bool:
    """Whether the task of ``job`` ended done (its memory complete), not cancelled or failed
    (the faults campaign: a part run again after its memory was done undid the memory)."""
    record = await tasks.get_task(res.redis, job.task_id)
    return record is not None and record.state == "done"


async def give_up(res: Resources, run: JobRun, job: IngestJob | PartJob) -> str:
    """The memory was taken from this task (deleted, or the task cancelled): undo its
    writes. Only what is still this task's goes; a newer ingest of the same text keeps
    its own."""
    await undo_memory(res.store.graph(job.namespace), job.memory_id, job.task_id)
    run.outcome = "cancelled"
    return "cancelled"


async def still_owned(res: Resources, run: JobRun, job: IngestJob | PartJob,
                      point: str) -> bool:
    """After a write: is the memory still this task's? If not, undo and say so."""
    await hook_for_tests(res, point, job)
    if await tasks.owner_task(res.redis, job.namespace, job.memory_id) == job.task_id:
        return True
    await give_up(res, run, job)
    return False


def split_parts(chunks: list[ChunkSpan], size: int) -> list[list[ChunkSpan]]:
    size = max(1, size)
    return [chunks[i : i + size] for i in range(0, len(chunks), size)] or [[]]
