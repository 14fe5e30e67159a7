"""The ingest of a batch of small memories (the add path gathers them: shared/tasks/adds.py), top to
bottom: seal -> start each task -> chunk all -> write their memory nodes -> embed every chunk
of the batch in one call -> write the chunks -> mark them searchable -> one graph task ->
each task done. A large memory has a batch of its own (``alone``) and takes the path of one
memory, which may fan out (workers/ingest.py).

Each memory keeps its own task, as if it came alone. One whose task has ended, or that lost
its memory (deleted, or its ingest cancelled) before the batch starts, is left out, and what
an earlier run wrote of it is undone; one that loses it while the batch runs is undone after
the next write; only the memories still their task's are made searchable, and each task is
made done by the script that checks that it still owns its memory. Every step is one
statement or one round trip for the whole batch (shared/store/cypher_batch.py), and the embedder
sees every chunk of the batch in one call: that is what a batch saves. arq runs a job at
least once: run again, a batch skips its memories that are done and writes the others again,
the same graph (ids are derived, writes MERGE), never a second copy.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import StoreError
from zapomni.shared.protocol.jobs import BatchJob, ChunkSpan, IngestJob
from zapomni.shared.store import replication
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.adds import seal_batch
from zapomni.shared.tasks.queue import INGEST_BATCH
from zapomni.shared.text.chunking import code_language
from zapomni.workers import ingest
from zapomni.workers.graph import follow_with_graph
from zapomni.workers.ingest import ingest_one, left_behind
from zapomni.workers.outcome import progressed, read_job, tasks_outcome, this_attempt
from zapomni.workers.resources import Resources, hook_for_tests, resources
from zapomni.workers.store import (
    mark_all_ready,
    supersede,
    undo_memory,
    write_batch_chunks,
    write_memories,
)

log = logging.getLogger(__name__)

Members = list[tuple[IngestJob, list[ChunkSpan]]]  # each memory with its chunks


async def ingest_batch(ctx: dict, payload: dict) -> str:
    res = resources(ctx)
    batch = await read_job(res, payload, BatchJob)
    if batch is None:
        return "unreadable"
    jobs = await members(res, batch)
    if batch.alone:
        return "; ".join([await ingest_one(ctx, job) for job in jobs]) or "nothing to do"
    owners = [(job.task_id, job.namespace, job.memory_id) for job in jobs]
    parted: list[IngestJob] = []
    said = "failed"
    async with tasks_outcome(ctx, INGEST_BATCH, owners):
        split = await chunk_all(res, await start(res, ctx, jobs))
        # a memory of more chunks than a part holds fans out, as it would alone
        parted = [job for job, spans in split if len(spans) > ingest.PART_CHUNKS]
        whole = [(job, spans) for job, spans in split if len(spans) <= ingest.PART_CHUNKS]
        said = await write_batch(res, batch, whole) if whole else "nothing to write"
    for job in parted:  # each its own task's outcome (started: its run resumes it)
        said += f"; {await ingest_one(ctx, job)}"
    return said


async def members(res: Resources, batch: BatchJob) -> list[IngestJob]:
    """The batch's memories in the order they were added, each with its turn before it and
    its claim's generation (the add step's, kept in its task record)."""
    found = []
    for payload, gen, after in await seal_batch(res.redis, batch):
        job = await read_job(res, payload, IngestJob)  # unreadable: its task fails, says why
        if job is not None:
            found.append(msgspec.structs.replace(job, gen=gen, after=after))
    return found


async def start(res: Resources, ctx: dict, jobs: list[IngestJob]) -> list[IngestJob]:
    """Start (or resume) each memory's task; the memories that go on."""
    attempt = this_attempt(res, ctx)
    now = time.time()
    moved = await tasks.move_all(res.redis, [(job.task_id, {
        "worker": res.worker_id, "heartbeat_at": now, "attempts": attempt,
        "message": f"ingesting, in a batch of {len(jobs)} memories"}) for job in jobs],
        "running", ttl=res.task_ttl, owning=True)
    going = []
    for job, start_ in zip(jobs, moved, strict=True):
        if start_.ok:
            await hook_for_tests(res, "owned", job)
            going.append(job)
        else:
            await left_behind(res, job, start_.before)
    return going


async def chunk_all(res: Resources, jobs: list[IngestJob]) -> Members:
    """Every memory chunked, in one thread; each one chunked is progress (the stall limit,
    workers/outcome.py)."""
    def split_each() -> list[list[ChunkSpan]]:
        split = []
        for j in jobs:
            split.append(res.chunker.split(j.text, code_language(j.metadata_json), None,
                                           j.line_offset))
            progressed()
        return split

    with metrics.STAGE_SECONDS.labels("chunk").time():
        split = await asyncio.to_thread(split_each)
    return list(zip(jobs, split, strict=True))


async def write_batch(res: Resources, batch: BatchJob, split: Members) -> str:
    graph = res.store.graph(batch.namespace)
    since = await replication.mark(res.store, batch.namespace)
    dim = await res.embedder.dimension()
    prop = await prepare_namespace(res.store, batch.namespace, res.embedder.name, dim)
    await write_memories(graph, [(job, len(spans)) for job, spans in split])
    progressed()
    kept = await keep_owned(res, split, "memory_written")
    started = time.perf_counter()
    vectors = await ingest.embed(res, [c.text for _, spans in kept for c in spans])
    metrics.CHUNKS_EMBEDDED.inc(len(vectors))
    embedded = time.perf_counter()
    with metrics.STAGE_SECONDS.labels("write").time():
        await write_batch_chunks(graph, [(job.memory_id, spans) for job, spans in kept],
                                 vectors, prop)
    progressed()
    log.info("batch %s: %d memories, %d chunks, embed %.2fs, write %.2fs", batch.batch_id,
             len(kept), len(vectors), embedded - started, time.perf_counter() - embedded)
    kept = await keep_owned(res, kept, "part_written")
    return await finish(res, batch, kept, since)


async def keep_owned(res: Resources, kept: Members, point: str) -> Members:
    """After a write: the memories still their task's; the others are undone."""
    for job, _ in kept:
        await hook_for_tests(res, point, job)
    owners = await tasks.owners(res.redis, kept[0][0].namespace if kept else "",
                                [job.memory_id for job, _ in kept])
    going = []
    for (job, spans), owner in zip(kept, owners, strict=True):
        if owner == job.task_id:
            going.append((job, spans))
        else:
            await undo_memory(res.store.graph(job.namespace), job.memory_id, job.task_id)
    return going


async def finish(res: Resources, batch: BatchJob, kept: Members,
                 since: replication.Mark | None) -> str:
    """Make the memories searchable (a new version then replaces its old one), start one
    entity extraction for them all, and mark each task done, which succeeds only while the
    memory is still its task's: one a delete took meanwhile is undone."""
    graph = res.store.graph(batch.namespace)
    with metrics.STAGE_SECONDS.labels("finish").time():
        for job, _ in kept:
            await hook_for_tests(res, "finishing", job)
        ready = await mark_all_ready(graph, [job for job, _ in kept])
        kept = await missing_nodes(res, kept, ready)
        for job, _ in kept:
            if job.supersedes:
                await supersede(graph, job.memory_id)
        await replication.confirm(res.store, batch.namespace, since)
    follow = await follow_with_graph(res, batch.batch_id, batch.namespace,
                                     [job.memory_id for job, _ in kept]) if kept else ""
    now = time.time()
    moved = await tasks.move_all(res.redis, [(job.task_id, {
        "done": 1, "total": 1, "chunks": len(spans), "finished_at": now, "error": "",
        "message": f"searchable: {len(spans)} chunks", "graph_task_id": follow})
        for job, spans in kept], "done", ttl=res.task_ttl, owning=True)
    done = 0
    for (job, _), end in zip(kept, moved, strict=True):
        if end.ok or end.before == "done":
            done += 1
        else:  # taken away meanwhile: a delete or cancel removes it too
            await undo_memory(graph, job.memory_id, job.task_id)
    return f"{done} memories searchable"


async def missing_nodes(res: Resources, kept: Members, ready: set[str]) -> Members:
    """The memories made searchable. One that was not lost its node to a newer ingest of
    the same text, or to a delete (undone); one still its task's whose node is missing is
    written again (the batch retries)."""
    lost = [(job, spans) for job, spans in kept if job.memory_id not in ready]
    if not lost:
        return kept
    owners = await tasks.owners(res.redis, lost[0][0].namespace,
                                [job.memory_id for job, _ in lost])
    if any(owner == job.task_id for (job, _), owner in zip(lost, owners, strict=True)):
        raise StoreError("a memory's node is missing; it is written again")
    for job, _ in lost:
        await undo_memory(res.store.graph(job.namespace), job.memory_id, job.task_id)
    return [(job, spans) for job, spans in kept if job.memory_id in ready]
