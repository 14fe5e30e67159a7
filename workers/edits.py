"""Changes to what is stored: a memory's delete, a metadata change applied in place
(update_memory without a new text), a namespace re-embedded with this worker's model.

A delete or an update task owns the memory from the moment it was accepted (the front took
it over: shared/tasks/tasks.py), so no ingest of the same text and no other update starts
meanwhile, and it ends and gives the memory up in one step. Both run again safely: a re-run
after the end does nothing; an update sets the whole new metadata. A delete removes the
chunks in batches, then the memory (one that fails for good leaves the memory stored, to be
deleted again); an ingest still running undoes its own late writes. A delete accepted
during an update cancels it in the step that takes the memory: the update's write matches a
stored memory only (never brings one back), and its end is refused once cancelled.

A reembed (``zapomni reembed``) leaves the vectors where search reads them (``x.prop`` on
the namespace's ZapomniMeta) until the new ones are complete: it records the new model
beside the old, embeds the chunks without a vector of the new model, a batch at a time in
id order from a cursor, into the other vector property (its own index), and passes the
cursor to a job of its own after its time share. Then one statement switches model,
dimension and property together, only if no chunk lacks the new vector at that moment
(else another pass runs); the old index is dropped and the old vectors removed. Meanwhile a
worker of the new model writes new vectors only (graphstore.vector_prop), one of the old
model old ones, which the next pass embeds again. A cancelled or failed reembed removes its
new vectors and leaves the namespace on its old model.
"""

from __future__ import annotations

import logging
import time

import redis.exceptions
from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.embedding.embed import to_params
from zapomni.shared.protocol.errors import EmbeddingRejected, StoreError
from zapomni.shared.protocol.jobs import DeleteJob, ReembedJob, UpdateJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.store import cypher_memories, cypher_moves, replication
from zapomni.shared.store.graphstore import run
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import DELETE, REEMBED, UPDATE, enqueue
from zapomni.workers import store
from zapomni.workers.outcome import SLICE_SECONDS, JobRun, progressed, task_job
from zapomni.workers.resources import Resources
from zapomni.workers.store import delete_memory_graph

log = logging.getLogger(__name__)


@task_job(DELETE, DeleteJob, restores="delete")  # a delete job carries all it needs
async def delete_memory(res: Resources, run: JobRun, job: DeleteJob) -> str:
    since = await replication.mark(res.store, job.namespace)
    memories, chunks = await delete_memory_graph(res.store.graph(job.namespace),
                                                 job.memory_id)
    await replication.confirm(res.store, job.namespace, since)
    await tasks.end_and_release(res.redis, job.task_id, "done", ttl=res.task_ttl, done=1,
                                total=1, finished_at=time.time(),
                                message=f"deleted {memories} memory and {chunks} chunks"
                                + (f" ({job.reason})" if job.reason else ""))
    return "done"


async def lost(res: Resources, job: UpdateJob, before: str) -> None:
    """An update that may not start: one whose memory another task took is cancelled."""
    if before == tasks.LOST:
        await tasks.end_and_release(res.redis, job.task_id, "cancelled", ttl=res.task_ttl,
                                    finished_at=time.time(),
                                    message="the memory was taken by another task")


@task_job(UPDATE, UpdateJob, owning=True, ended=lost)
async def update_memory(res: Resources, run: JobRun, job: UpdateJob) -> str:
    since = await replication.mark(res.store, job.namespace)
    updated = await write_metadata(res.store.graph(job.namespace), job)
    await replication.confirm(res.store, job.namespace, since)
    if updated:
        ended = await tasks.end_and_release(
            res.redis, job.task_id, "done", ttl=res.task_ttl, done=1, total=1,
            finished_at=time.time(), message="metadata updated")
    else:
        ended = await tasks.end_and_release(
            res.redis, job.task_id, "failed", ttl=res.task_ttl, finished_at=time.time(),
            message="failed", error="the memory is no longer stored; nothing was updated")
    if ended.ok:
        run.outcome = "done" if updated else "failed"
    else:  # ended already: a re-run of a done update, or a delete cancelled it
        run.outcome = "done" if ended.before == "done" else "cancelled"
    return run.outcome


async def write_metadata(graph: AsyncGraph, job: UpdateJob) -> bool:
    """Set the memory's metadata and the columns derived from it; False when no searchable
    memory has that id."""
    rows = await store.run(graph, cypher_memories.UPDATE_METADATA, op="update", params={
        "id": job.memory_id, "tags": job.tags, "source": job.source,
        "metadata": job.metadata_json, "meta_kv": store.meta_pairs(job.metadata_json),
        "importance": job.importance, "memory_type": job.memory_type, "pinned": job.pinned,
        "expires_at": job.expires_at or None, "occurred_at": job.occurred_at,
        "role": job.role or None,
    })
    return bool(rows and rows[0][0])


# ---- re-embedding a namespace ----

CLEAR_BATCH = 1000  # vectors removed per statement
REEMBED_BATCH = 64  # chunks embedded and written per step (a few seconds of the in-process model)


async def reembed_ended(res: Resources, job: ReembedJob, before: str) -> None:
    if before in ("cancelled", "failed"):
        await abandon_reembed(res, job)


@task_job(REEMBED, ReembedJob, ended=reembed_ended)
async def reembed_chunks(res: Resources, run: JobRun, job: ReembedJob) -> str:
    prop = await begin_reembed(res, job)
    if prop is None:
        return "done"
    return await reembed_steps(res, job, prop, run.started)


async def begin_reembed(res: Resources, job: ReembedJob) -> str | None:
    """Record the new model beside the old (the first step) and return the property the
    new vectors go to; None when the namespace is on this model already (the task is done)."""
    graph = res.store.graph(job.namespace)
    model, dim = res.embedder.name, await res.embedder.dimension()
    meta = await run(graph, cypher_moves.READ_META)
    if not meta:
        await end_reembed(res, job.task_id, "done",
                          f"namespace '{job.namespace}' holds nothing yet")
        return None
    have, prop, other_task = (meta[0][0], int(meta[0][1])), meta[0][2], meta[0][5]
    if have == (model, dim) and other_task in (None, job.task_id):
        await end_reembed(res, job.task_id, "done", f"already embedded with {model} ({dim}-d)")
        return None
    if other_task not in (None, job.task_id):
        await refuse_if_running(res, job, other_task)
    new_prop = cypher_moves.other(prop)
    if other_task is None:
        await clear_vectors(res, job.namespace, new_prop)  # a cancelled run's leftovers
    rows = await run(graph, cypher_moves.BEGIN_REEMBED, {"model": model, "dim": dim,
                                                         "task": job.task_id})
    if not rows:
        raise StoreError("another reembed took the namespace meanwhile; retrying")
    await prepare_namespace(res.store, job.namespace, model, dim)  # the new vector index
    if job.seq == 0:
        left = await run(graph, cypher_moves.REEMBED_LEFT[new_prop])
        await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, total=int(left[0][0]),
                         message=f"re-embedding {int(left[0][0])} chunks with {model} "
                                 f"({dim}-d); search answers from {have[0]} until the switch")
    return new_prop


async def refuse_if_running(res: Resources, job: ReembedJob, other_task: str) -> None:
    """Another reembed is recorded: refuse while it runs, take over from one that ended
    without cleaning up (its worker died)."""
    other = await tasks.get_task(res.redis, other_task)
    if other is not None and other.state in tasks.ACTIVE:
        raise EmbeddingRejected(f"namespace '{job.namespace}' is being re-embedded by task "
                                f"{other_task}; cancel_task it or wait until it ends")
    await abandon_reembed(res, ReembedJob(task_id=other_task, namespace=job.namespace))


async def reembed_steps(res: Resources, job: ReembedJob, prop: str, started: float) -> str:
    """Batches from the cursor until none is left (then the switch) or the time share is
    used (then the next step)."""
    graph = res.store.graph(job.namespace)
    budget = SLICE_SECONDS
    after = job.after
    while time.monotonic() - started < budget:
        rows = await run(graph, cypher_moves.REEMBED_BATCH[prop],
                         {"after": after, "batch": REEMBED_BATCH})
        if not rows:
            return await switch_model(res, job, prop)
        after = rows[-1][0]
        if not await reembed_batch(res, job, prop, rows):  # cancelled (or failed) meanwhile
            await abandon_reembed(res, job)
            return "ended"
        progressed()
    await enqueue(res.redis, res.settings, REEMBED,
                  ReembedJob(task_id=job.task_id, namespace=job.namespace, after=after,
                             seq=job.seq + 1), f"{job.task_id}:step:{job.seq + 1}")
    return f"step {job.seq + 1}: up to {after}"


async def reembed_batch(res: Resources, job: ReembedJob, prop: str, rows: list) -> bool:
    """One batch's new vectors written and counted; False once the task has ended."""
    vectors = await res.embedder.embed([text for _, text in rows])
    await run(res.store.graph(job.namespace), cypher_moves.REEMBED_WRITE[prop], {"rows": [
        {"id": cid, "vec": vec} for (cid, _), vec in zip(rows, to_params(vectors), strict=True)]})
    moved = await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, heartbeat_at=time.time(),
                             add={"done": len(rows), "embedded": len(rows)})
    return moved.ok


async def switch_model(res: Resources, job: ReembedJob, prop: str) -> str:
    """Every chunk has its new vector: switch the namespace, then remove the old vectors.
    A chunk written by the old model meanwhile blocks the switch: one more pass."""
    graph = res.store.graph(job.namespace)
    rows = await run(graph, cypher_moves.SWITCH_MODEL[prop], {"task": job.task_id,
                                                              "prop": prop, "now": time.time()})
    if not rows:
        await enqueue(res.redis, res.settings, REEMBED,
                      ReembedJob(task_id=job.task_id, namespace=job.namespace, after="",
                                 seq=job.seq + 1), f"{job.task_id}:step:{job.seq + 1}")
        return "another pass: chunks written by the old model meanwhile"
    old = cypher_moves.other(prop)
    await drop_index(res, job.namespace, old)
    await clear_vectors(res, job.namespace, old)
    record = await tasks.get_task(res.redis, job.task_id)
    await end_reembed(res, job.task_id, "done", f"switched to {rows[0][0]}: "
                                        f"{record.embedded if record else 0} chunks embedded")
    return "done"


async def drop_index(res: Resources, namespace: str, prop: str) -> None:
    try:
        await res.store.graph(namespace).query(cypher_moves.DROP_VECTOR_INDEX[prop])
    except redis.exceptions.ResponseError as exc:  # dropped by an earlier run of this step
        log.info("vector index on %s in %s not dropped: %s", prop, namespace, exc)
    res.store.prepared.pop(namespace, None)


async def clear_vectors(res: Resources, namespace: str, prop: str) -> None:
    graph = res.store.graph(namespace)
    while True:
        rows = await run(graph, cypher_moves.CLEAR_VECTORS[prop], {"batch": CLEAR_BATCH})
        if not rows or int(rows[0][0]) < CLEAR_BATCH:
            return


async def abandon_reembed(res: Resources, job: ReembedJob) -> None:
    """A reembed that ended before its switch: its new vectors go, the model stays."""
    graph = res.store.graph(job.namespace)
    meta = await run(graph, cypher_moves.READ_META)
    if not meta or meta[0][5] != job.task_id:
        return
    new_prop = cypher_moves.other(meta[0][2])
    await drop_index(res, job.namespace, new_prop)
    await clear_vectors(res, job.namespace, new_prop)
    await run(graph, cypher_moves.ABANDON_REEMBED, {"task": job.task_id})


async def end_reembed(res: Resources, task_id: str, state: str, message: str) -> None:
    """End the task; its progress shows every chunk done (ingest meanwhile may have added
    to the count)."""
    record: TaskRecord | None = await tasks.get_task(res.redis, task_id)
    await tasks.move(res.redis, task_id, state, ttl=res.task_ttl, finished_at=time.time(),
                     message=message, done=max(record.done, record.total) if record else 0)
