"""The add path, top to bottom: chunk -> write the memory nodes -> embed -> write the chunks
-> searchable -> graph task -> task done, for

- a batch of small memories (most adds; shared/tasks/adds.py gathers them), ``ingest_batch``:
  each step once for the whole batch, every chunk embedded in one call;
- one memory alone, small or large, ``ingest_one``. A large one fans out into ``embed_part``
  jobs of ``PART_CHUNKS`` chunks that several workers share; it is found from its first
  part (as still ingesting) and complete when its last part lands.

A delete or a cancel takes a memory from its ingest at any moment (shared/tasks/tasks.py):
after each write the path asks ``keep_owned``, which undoes what the memories no longer
their task's wrote; a task is made done only by the script that checks the ownership. arq
runs a job at least once: ids are derived, writes MERGE on them, parts count as a set.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec
import numpy as np

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import EmbeddingRejected, StoreError
from zapomni.shared.protocol.jobs import BatchJob, ChunkSpan, IngestJob, PartJob
from zapomni.shared.store import replication
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.adds import seal_batch
from zapomni.shared.tasks.queue import EMBED_PART, INGEST_BATCH, enqueue_part
from zapomni.shared.text.chunking import code_language
from zapomni.workers import store
from zapomni.workers.outcome import (
    JobRun,
    follow_with_graph,
    progressed,
    read_job,
    run_task,
    task_job,
    tasks_outcome,
    this_attempt,
)
from zapomni.workers.resources import Resources, resources

log = logging.getLogger(__name__)
ONE = "ingest_memory"  # one memory's ingest (a large one's batch, alone), as metrics name it
CHUNK_REPORT_S = 1.0  # how often a task being chunked shows how far it got, at most
# chunks per part when a document fans out: 32 chunks of up to 256 tokens are a few seconds
# of the in-process model: a killed worker loses little, every worker shares a large one
PART_CHUNKS = 32
# texts embedded per call: each slice is progress (the stall limit, workers/outcome.py), so a
# batch of hundreds of chunks on a starved host is never taken for a hung job. 128: ~2 s of
# the in-process model idle, minutes starved a hundredfold (under the limit); 8 Ollama
# requests of 16 in flight, as many as a batch of small memories (<= 32 KiB) ever sends
EMBED_SLICE = 128

Spans = dict[str, list[ChunkSpan]]  # the chunks of each memory of a batch, by its id

# ---- a batch of small memories ----

async def ingest_batch(ctx: dict, payload: dict) -> str:
    res = resources(ctx)
    batch = await read_job(res, payload, BatchJob)
    if batch is None:
        return "unreadable"
    # in the order added, each with its turn before it and its claim's generation (the add
    # step's); one unreadable fails its task, saying why
    jobs = [msgspec.structs.replace(job, gen=gen, after=after)
            for payload, gen, after in await seal_batch(res.redis, batch)
            if (job := await read_job(res, payload, IngestJob)) is not None]
    if batch.alone:  # a large memory: the path of one memory, which may fan out
        return "; ".join([await ingest_one(ctx, job) for job in jobs]) or "nothing to do"
    owners = [(job.task_id, job.namespace, job.memory_id) for job in jobs]
    parted: list[IngestJob] = []
    said = "failed"
    async with tasks_outcome(ctx, INGEST_BATCH, owners):
        jobs = await start_all(res, ctx, jobs)
        spans = await chunk_all(res, jobs)
        # a memory of more chunks than a part holds fans out, as it would alone
        parted = [job for job in jobs if len(spans[job.memory_id]) > PART_CHUNKS]
        whole = [job for job in jobs if len(spans[job.memory_id]) <= PART_CHUNKS]
        said = await write_batch(res, batch, whole, spans) if whole else "nothing to write"
    for job in parted:  # each its own task's outcome (started: its run resumes it)
        said += f"; {await ingest_one(ctx, job)}"
    return said


async def write_batch(res: Resources, batch: BatchJob, jobs: list[IngestJob],
                      spans: Spans) -> str:
    graph = res.store.graph(batch.namespace)
    since = await replication.mark(res.store, batch.namespace)
    prop = await prepare_namespace(res.store, batch.namespace, res.embedder.name,
                                   await res.embedder.dimension())
    await store.write_memories(graph, [(job, len(spans[job.memory_id])) for job in jobs])
    progressed()
    jobs = await keep_owned(res, jobs, "memory_written")
    started = time.perf_counter()
    vectors = await embed_texts(res, [c.text for job in jobs for c in spans[job.memory_id]])
    metrics.CHUNKS_EMBEDDED.inc(len(vectors))
    embedded = time.perf_counter()
    with metrics.STAGE_SECONDS.labels("write").time():
        await store.write_batch_chunks(graph, [(job.memory_id, spans[job.memory_id])
                                               for job in jobs], vectors, prop)
    progressed()
    log.info("batch %s: %d memories, %d chunks, embed %.2fs, write %.2fs", batch.batch_id,
             len(jobs), len(vectors), embedded - started, time.perf_counter() - embedded)
    jobs = await keep_owned(res, jobs, "part_written")
    with metrics.STAGE_SECONDS.labels("finish").time():
        jobs = await make_searchable(res, jobs)
        for job in jobs:
            if job.supersedes:
                await store.supersede(graph, job.memory_id)
        await replication.confirm(res.store, batch.namespace, since)
    follow = await follow_with_graph(res, batch.batch_id, batch.namespace,
                                     [job.memory_id for job in jobs]) if jobs else ""
    return await end_batch(res, jobs, spans, follow)


async def start_all(res: Resources, ctx: dict, jobs: list[IngestJob]) -> list[IngestJob]:
    """Start (or resume) each memory's task; the memories that go on."""
    moved = await tasks.move_all(res.redis, [(job.task_id, {
        "worker": res.worker_id, "heartbeat_at": time.time(),
        "attempts": this_attempt(res, ctx),
        "message": f"ingesting, in a batch of {len(jobs)} memories"}) for job in jobs],
        "running", ttl=res.task_ttl, owning=True)
    going = []
    for job, start in zip(jobs, moved, strict=True):
        if start.ok:
            going.append(job)
        else:
            await left_behind(res, job, start.before)
    return going


async def chunk_all(res: Resources, jobs: list[IngestJob]) -> Spans:
    """Every memory chunked, in one thread; each one chunked is progress (the stall limit)."""
    def split_each() -> list[list[ChunkSpan]]:
        split = []
        for j in jobs:
            split.append(res.chunker.split(j.text, code_language(j.metadata_json), None,
                                           j.line_offset))
            progressed()
        return split

    with metrics.STAGE_SECONDS.labels("chunk").time():
        split = await asyncio.to_thread(split_each)
    return {job.memory_id: spans for job, spans in zip(jobs, split, strict=True)}


async def end_batch(res: Resources, jobs: list[IngestJob], spans: Spans, follow: str) -> str:
    """Each task done, only while it owns its memory: one a delete took meanwhile is undone."""
    now = time.time()
    moved = await tasks.move_all(res.redis, [(job.task_id, {
        "done": 1, "total": 1, "chunks": len(spans[job.memory_id]), "finished_at": now,
        "error": "", "message": f"searchable: {len(spans[job.memory_id])} chunks",
        "graph_task_id": follow}) for job in jobs], "done", ttl=res.task_ttl, owning=True)
    done = 0
    for job, end in zip(jobs, moved, strict=True):
        if end.ok or end.before == "done":
            done += 1
        else:
            await undo(res, job)
    return f"{done} memories searchable"


# ---- one memory alone, fanned out into parts when large ----

async def left_behind(res: Resources, job: IngestJob | PartJob, before: str) -> None:
    """A task that may not start (``before``: what its start found): cancelled if it lost
    its memory; what an earlier run wrote is undone."""
    if before == tasks.LOST:
        await tasks.move(res.redis, job.task_id, "cancelled", ttl=res.task_ttl,
                         finished_at=time.time(), message="the memory was deleted")
    if before in (tasks.LOST, "cancelled", "failed"):
        await undo(res, job)


async def ingest_one(ctx: dict, job: IngestJob) -> str:
    return await run_task(ctx, ONE, job, write_one, owning=True, ended=left_behind)


async def write_one(res: Resources, run: JobRun, job: IngestJob) -> str:
    chunks = await chunk_text(res, job)
    parts = [chunks[i : i + PART_CHUNKS] for i in range(0, len(chunks), PART_CHUNKS)] or [[]]
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, total=len(parts),
                     chunks=len(chunks), parts_at=time.time(),
                     message=f"{len(chunks)} chunks in {len(parts)} part(s)")
    since = await replication.mark(res.store, job.namespace)
    await prepare_namespace(res.store, job.namespace, res.embedder.name,
                            await res.embedder.dimension())
    await store.write_memory(res.store.graph(job.namespace), job, len(chunks))
    progressed()
    if not await keep_owned(res, [job], "memory_written"):
        return cancelled(run)
    jobs = [PartJob(task_id=job.task_id, memory_id=job.memory_id, namespace=job.namespace,
                    part=i, parts=len(parts), chunk_count=len(chunks), chunks=part)
            for i, part in enumerate(parts)]
    if len(jobs) == 1:
        return await write_part(res, run, jobs[0], since)
    await replication.confirm(res.store, job.namespace, since)  # the parts need it
    # the first part here, then the others queued: the text's start is found seconds after
    # the add, not after the workers' first round of parts (measured: 35 s for 1.6 MB on 2
    # workers of 4 jobs each); the parts' job ids are derived, so each is queued once
    first = await write_part(res, run, jobs[0], await replication.mark(res.store, job.namespace))
    if run.outcome != "done":  # the memory was taken away meanwhile: it is undone
        return first
    for part in jobs[1:]:
        await enqueue_part(res.redis, res.settings, part)
    return f"wrote part 1, fanned out {len(jobs) - 1} more"


@task_job(EMBED_PART, PartJob, owning=True, ended=left_behind)
async def embed_part(res: Resources, run: JobRun, job: PartJob) -> str:
    return await write_part(res, run, job, await replication.mark(res.store, job.namespace))


async def write_part(res: Resources, run: JobRun, job: PartJob,
                     since: replication.Mark | None) -> str:
    """``since``: the master written to, confirmed on its replicas before the part counts."""
    started = time.perf_counter()
    vectors = await embed_texts(res, [c.text for c in job.chunks])
    embedded = time.perf_counter()
    graph = res.store.graph(job.namespace)
    prop = await prepare_namespace(res.store, job.namespace, res.embedder.name,
                                   vectors.shape[1])
    with metrics.STAGE_SECONDS.labels("write").time():
        await store.write_chunks(graph, job.memory_id, job.chunks, vectors, prop)
    progressed()
    metrics.CHUNKS_EMBEDDED.inc(len(job.chunks))
    log.info("part %d/%d of %s: %d chunks, embed %.2fs, write %.2fs", job.part + 1, job.parts,
             job.memory_id, len(job.chunks), embedded - started, time.perf_counter() - embedded)
    if not await keep_owned(res, [job], "part_written"):
        return cancelled(run)
    if job.parts > 1:  # a lone part is written again by its retry; a counted one is not
        await replication.confirm(res.store, job.namespace, since)
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl)
    if done < 0:  # the task ended meanwhile
        record = await tasks.get_task(res.redis, job.task_id)
        if record is not None and record.state == "done":
            # a run again of this part while the others finished the memory: what it wrote
            # stays (the faults campaign: such a part undid the memory)
            return "done"
        return await undo(res, job, run)  # cancelled or failed
    if done >= job.parts:
        return await finish_memory(res, run, job, since)
    await store.mark_landing(graph, job.memory_id, job.task_id, done, job.parts)
    return f"part {job.part + 1}/{job.parts} written"


async def finish_memory(res: Resources, run: JobRun, job: PartJob,
                        since: replication.Mark | None) -> str:
    """The last part landed: chunks linked, the memory searchable (replacing its old version),
    its graph task queued, the task done once the writes are on the replicas required."""
    graph = res.store.graph(job.namespace)
    with metrics.STAGE_SECONDS.labels("finish").time():
        await store.link_chunks(graph, job.memory_id, job.chunk_count)
        if not await make_searchable(res, [job]):
            return cancelled(run)
        await store.supersede(graph, job.memory_id)
        await replication.confirm(res.store, job.namespace, since)
    follow = await follow_with_graph(res, job.task_id, job.namespace, [job.memory_id],
                                     job.memory_id)
    moved = await tasks.move(res.redis, job.task_id, "done", ttl=res.task_ttl, owning=True,
                             done=job.parts, finished_at=time.time(), error="",
                             message=f"searchable: {job.chunk_count} chunks",
                             graph_task_id=follow)
    if not moved.ok and moved.before != "done":
        return await undo(res, job, run)
    return "done"


# ---- the steps both paths call ----

async def keep_owned(res: Resources, jobs: list, step: str) -> list:
    """After a write (``step``): the ``jobs`` whose memory is still their task's; what the
    others wrote is undone (a newer ingest of the same text keeps its own)."""
    owners = await tasks.owners(res.redis, jobs[0].namespace if jobs else "",
                                [job.memory_id for job in jobs])
    kept = []
    for job, owner in zip(jobs, owners, strict=True):
        if owner == job.task_id:
            kept.append(job)
        else:
            log.info("memory %s taken from task %s by %s", job.memory_id, job.task_id, step)
            await undo(res, job)
    return kept


async def make_searchable(res: Resources, jobs: list) -> list:
    """The memories made searchable (each only while its task's). One not made so lost its
    node to a newer ingest or a delete; one still its task's is written again (a retry)."""
    if not jobs:
        return []
    ready = await store.mark_all_ready(res.store.graph(jobs[0].namespace), jobs)
    lost = [job for job in jobs if job.memory_id not in ready]
    if lost and await keep_owned(res, lost, "searchable"):
        raise StoreError("a memory's node is missing; it is written again")
    return [job for job in jobs if job.memory_id in ready]


async def chunk_text(res: Resources, job: IngestJob) -> list[ChunkSpan]:
    """Chunk in a thread, the task saying "chunking: <share done>" once a second."""
    share = [0.0]
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, message="chunking")
    with metrics.STAGE_SECONDS.labels("chunk").time():
        split = asyncio.ensure_future(asyncio.to_thread(
            res.chunker.split, job.text, code_language(job.metadata_json),
            lambda done: share.__setitem__(0, done), job.line_offset))
        shown = 0.0
        while not (await asyncio.wait({split}, timeout=CHUNK_REPORT_S))[0]:
            if share[0] > shown:  # a section more is split
                shown = share[0]
                progressed()
            await tasks.move(res.redis, job.task_id, ttl=res.task_ttl,
                             heartbeat_at=time.time(), message=f"chunking: {share[0]:.0%}")
        progressed()
        return split.result()


async def embed_texts(res: Resources, texts: list[str]) -> np.ndarray:
    """The vectors of ``texts``, checked: a wrong shape is the model's fault (rejected)."""
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


async def undo(res: Resources, job: IngestJob | PartJob, run: JobRun | None = None) -> str:
    """Remove what ``job``'s task wrote (while the memory is its own); ``run`` is cancelled."""
    await store.undo_memory(res.store.graph(job.namespace), job.memory_id, job.task_id)
    return cancelled(run) if run is not None else "cancelled"


def cancelled(run: JobRun) -> str:
    run.outcome = "cancelled"
    return "cancelled"
