"""A metadata change applied in place (update_memory without a new text).

The update task owns the memory from the moment it was accepted (the front took it over
from its ended ingest: shared/tasks/tasks.py), so no ingest of the same text and no other update
starts meanwhile. The job sets the whole new metadata, so running it again writes the same.
A delete accepted meanwhile cancels the update in the same step that takes the memory: the
update's write matches a stored memory only (never brings one back), and its end is refused
once it was cancelled. The task ends and gives the memory back to its ingest in one step.
"""

from __future__ import annotations

import time

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.protocol.jobs import UpdateJob
from zapomni.shared.store import cypher_memories, replication
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import UPDATE
from zapomni.workers import store
from zapomni.workers.outcome import JobRun, task_job
from zapomni.workers.resources import Resources, hook_for_tests


async def lost(res: Resources, job: UpdateJob, before: str) -> None:
    """An update that may not start: one whose memory another task took is cancelled."""
    if before == tasks.LOST:
        await tasks.end_and_release(res.redis, job.task_id, "cancelled", ttl=res.task_ttl,
                                    finished_at=time.time(),
                                    message="the memory was taken by another task")


@task_job(UPDATE, UpdateJob, owning=True, ended=lost)
async def update_memory(res: Resources, run: JobRun, job: UpdateJob) -> str:
    await hook_for_tests(res, "update_owned", job)
    since = await replication.mark(res.store, job.namespace)
    updated = await write_metadata(res.store.graph(job.namespace), job)
    await hook_for_tests(res, "updated", job)
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
