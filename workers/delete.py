"""Deleting a memory. The delete task owns the memory from the moment it was accepted (the
front took it over from its ingest, cancelling that ingest: shared/tasks/tasks.py), so no new ingest
of the same text starts meanwhile; an ingest still running undoes its own late writes. The
chunks go in batches, then the memory (a delete that fails for good leaves the memory
stored, to be deleted again); the task ends and gives the memory up in one step. Safe to run
again: a re-run after the end does nothing."""

from __future__ import annotations

import time

from zapomni.shared.protocol.jobs import DeleteJob
from zapomni.shared.store import replication
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import DELETE
from zapomni.workers.outcome import JobRun, task_job
from zapomni.workers.resources import Resources, hook_for_tests
from zapomni.workers.store import delete_memory_graph


@task_job(DELETE, DeleteJob, restores="delete")  # a delete job carries all it needs
async def delete_memory(res: Resources, run: JobRun, job: DeleteJob) -> str:
    since = await replication.mark(res.store, job.namespace)
    memories, chunks = await delete_memory_graph(res.store.graph(job.namespace),
                                                 job.memory_id)
    await hook_for_tests(res, "deleted", job)
    await replication.confirm(res.store, job.namespace, since)
    await tasks.end_and_release(res.redis, job.task_id, "done", ttl=res.task_ttl, done=1,
                                total=1, finished_at=time.time(),
                                message=f"deleted {memories} memory and {chunks} chunks"
                                + (f" ({job.reason})" if job.reason else ""))
    return "done"
