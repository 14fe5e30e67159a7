"""Deleting a memory: forget its dedupe key first (in-flight ingest parts then stop), then
remove its chunks in batches and the memory node. Safe to run again."""

from __future__ import annotations

import time

import msgspec

from shared import tasks
from shared.messages import DeleteJob
from shared.queue import DELETE
from workers.outcome import start_task, task_outcome
from workers.resources import resources
from workers.store import delete_memory_graph


async def delete_memory(ctx: dict, payload: dict) -> str:
    job = msgspec.convert(payload, DeleteJob)
    res = resources(ctx)
    async with task_outcome(ctx, DELETE, job.task_id, job.namespace, job.memory_id):
        await start_task(res, ctx, job.task_id, job.namespace)
        owner = await tasks.owner_task(res.redis, job.namespace, job.memory_id)
        if owner is not None:
            await tasks.release_memory(res.redis, job.namespace, job.memory_id, owner)
            record = await tasks.get_task(res.redis, owner)
            if record is not None and record.state in ("queued", "running"):
                await tasks.update_task(res.redis, owner, job.namespace, state="cancelled",
                                        finished_at=time.time(),
                                        message="the memory was deleted")
        memories, chunks = await delete_memory_graph(res.store.graph(job.namespace),
                                                     job.memory_id)
        await tasks.update_task(res.redis, job.task_id, job.namespace, state="done", done=1,
                                total=1, finished_at=time.time(),
                                message=f"deleted {memories} memory and {chunks} chunks")
        return "done"
    return "failed"
