"""The one way a memory is deleted: a delete task takes the memory over and its job goes to
the head of the queue, in one step (shared/tasks/takeover.py: a delete is never accepted without its
job); workers/delete.py runs it. delete_memory and the cancel of an ingest
(services/mcp/front.py) and the expiry sweep (workers/expiry.py) all come through here."""

from __future__ import annotations

import time
from dataclasses import dataclass

from arq.connections import ArqRedis

from zapomni.shared.protocol.ids import new_task_id
from zapomni.shared.protocol.jobs import DeleteJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, takeover, tasks
from zapomni.shared.tasks.arq_internals import queued_job
from zapomni.shared.tasks.queue import DELETE, JOB_EXPIRES, payload_size, serialize


@dataclass(frozen=True)
class Queued:
    """The delete task of a memory ('' when none was taken), its state, and whether this
    call made it (False: one was already under way, or nothing was taken)."""

    task_id: str
    state: str
    new: bool = False


async def queue_delete(redis: ArqRedis, settings: Settings, namespace: str, memory_id: str,
                       message: str, *, cancelling: str = "", seen: str = "",
                       reason: str = "") -> Queued:
    """Take the memory over for a delete task and enqueue its job. An ingest under way is
    cancelled in the same step (``cancelling``: only that ingest; nothing is taken when it
    no longer owns the memory). ``seen``: only if no task or that one owns the memory. A
    delete already under way is answered instead of a second one. ``message``: the task's
    while it waits; ``reason``: why, kept in its message when done."""
    record = TaskRecord(task_id=new_task_id(), kind="delete", namespace=namespace,
                        memory_id=memory_id, total=1, created_at=time.time(), message=message)
    note = (f"cancelled by request; {record.task_id} removes what was written" if cancelling
            else "the memory was deleted")
    job = DeleteJob(task_id=record.task_id, memory_id=memory_id, namespace=namespace,
                    reason=reason)
    # first in the queue: it is short, and an add of the same text is refused until it is
    # done (shared/tasks/tasks.py)
    queued = queued_job(capacity.QUEUE_NAME, DELETE, job, job.task_id, serializer=serialize,
                        expires_s=JOB_EXPIRES, size=payload_size(job),
                        first=True)
    code, owner = await takeover.take_for_delete(redis, record, tasks.TASK_TTL, queued,
                                              from_task=cancelling, message=note, seen=seen)
    if code == 0:
        return Queued("", "")
    if code == 2:
        pending = await tasks.get_task(redis, owner)
        return Queued(owner, pending.state if pending else "queued")
    return Queued(record.task_id, "queued", new=True)
