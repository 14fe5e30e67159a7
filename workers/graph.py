"""The knowledge-graph path: plan -> (fan out) -> extract entities in batches -> write.

``build_graph`` picks the chunks a graph task covers (those not yet processed, or all of
them on rebuild, after undoing what they added), records the total and runs them, fanning out
into ``graph_part`` jobs of at most ``graph_part_chunks`` chunks when there are many. Each
part runs spaCy NER over batches of ``graph_batch`` chunks, writes each batch (MERGE on ids:
safe to run again), marks its chunks processed and adds to the task's progress. A cancelled
task stops before its next batch; what was written is whole batches only.
"""

from __future__ import annotations

import logging
import time

from shared import cypher, metrics, tasks
from shared.graphstore import run
from shared.ids import graph_task_id
from shared.messages import GraphJob, GraphPartJob, TaskRecord
from shared.queue import BUILD_GRAPH, GRAPH_PART, enqueue_graph, enqueue_graph_part
from workers.outcome import read_job, start_task, task_outcome
from workers.resources import Resources, resources
from workers.store import clear_entities, forget_entities, write_entities

log = logging.getLogger(__name__)


async def build_graph(ctx: dict, payload: dict) -> str:
    res = resources(ctx)
    job = await read_job(res, payload, GraphJob)
    if job is None:
        return "unreadable"
    async with task_outcome(ctx, BUILD_GRAPH, job.task_id, job.namespace, ""):
        if not (await start_task(res, ctx, job.task_id)).ok:
            return "ended"
        graph = res.store.graph(job.namespace)
        if job.rebuild:
            await undo(res, job)
        rows = await run(graph, cypher.GRAPH_CHUNKS, {"memory_ids": job.memory_ids,
                                                       "rebuild": job.rebuild})
        chunk_ids = [row[0] for row in rows]
        size = max(1, res.settings.graph_part_chunks)
        parts = [chunk_ids[i : i + size] for i in range(0, len(chunk_ids), size)]
        await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, total=len(chunk_ids),
                         message=f"{len(chunk_ids)} chunks to read in {len(parts)} part(s)")
        if not parts:
            await finish(res, job.task_id, job.namespace, "nothing new to read")
            return "done"
        if len(parts) == 1:
            return await extract_part(res, GraphPartJob(
                task_id=job.task_id, namespace=job.namespace, part=0, parts=1,
                chunk_ids=parts[0], rebuild=job.rebuild))
        for i, ids in enumerate(parts):
            await enqueue_graph_part(res.redis, res.settings, GraphPartJob(
                task_id=job.task_id, namespace=job.namespace, part=i, parts=len(parts),
                chunk_ids=ids, rebuild=job.rebuild))
        return f"fanned out into {len(parts)} parts"
    return "failed"


async def graph_part(ctx: dict, payload: dict) -> str:
    res = resources(ctx)
    job = await read_job(res, payload, GraphPartJob)
    if job is None:
        return "unreadable"
    async with task_outcome(ctx, GRAPH_PART, job.task_id, job.namespace, ""):
        if not (await start_task(res, ctx, job.task_id)).ok:
            return "ended"
        return await extract_part(res, job)
    return "failed"


async def extract_part(res: Resources, job: GraphPartJob) -> str:
    graph = res.store.graph(job.namespace)
    model = await res.entity_model()
    step = max(1, res.settings.graph_batch)
    for start in range(0, len(job.chunk_ids), step):
        if await cancelled(res, job.task_id):
            return "cancelled"
        batch = job.chunk_ids[start : start + step]
        # a retried part skips what it already wrote (unless rebuilding); a deleted chunk
        # is simply gone
        rows = await run(graph, cypher.CHUNK_TEXTS, {"ids": batch, "rebuild": job.rebuild})
        if rows:
            with metrics.STAGE_SECONDS.labels("entities").time():
                found = await model.extract_async([row[1] for row in rows])
            with metrics.STAGE_SECONDS.labels("graph_write").time():
                entities, relations = await write_entities(graph, [row[0] for row in rows],
                                                           found)
            metrics.CHUNKS_GRAPHED.inc(len(rows))
            await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, heartbeat_at=time.time(),
                             add={"done": len(rows), "entities": entities,
                                  "relations": relations})
        else:
            await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, heartbeat_at=time.time(),
                             add={"done": len(batch)})
    done = await tasks.finish_part(res.redis, job.task_id, job.part, res.worker_id,
                                   res.task_ttl, progress=False)
    if done >= job.parts:
        await finish(res, job.task_id, job.namespace, "entities extracted")
        return "done"
    return f"part {job.part + 1}/{job.parts} read"


async def undo(res: Resources, job: GraphJob) -> None:
    """Rebuild: forget what the covered chunks added, so they are read afresh."""
    graph = res.store.graph(job.namespace)
    await tasks.move(res.redis, job.task_id, ttl=res.task_ttl,
                     message="clearing the previous graph")
    if job.memory_ids is None:
        await clear_entities(graph)
        return
    rows = await run(graph, cypher.GRAPH_CHUNKS, {"memory_ids": job.memory_ids,
                                                   "rebuild": True})
    await forget_entities(graph, [row[0] for row in rows])


async def cancelled(res: Resources, task_id: str) -> bool:
    record = await tasks.get_task(res.redis, task_id)
    return record is None or record.state not in tasks.ACTIVE


async def finish(res: Resources, task_id: str, namespace: str, message: str) -> None:
    record = await tasks.get_task(res.redis, task_id)
    await tasks.move(res.redis, task_id, "done", ttl=res.task_ttl,
                     done=record.total if record else 0, finished_at=time.time(),
                     message=message, error="")


async def follow_ingest(res: Resources, ingest_task_id: str, namespace: str,
                        memory_id: str) -> str:
    """After an ingest: extract the new memory's entities in a graph task of its own, unless
    the namespace has automatic extraction turned off. Idempotent (the id is derived).
    Returns the graph task's id, or ''."""
    if not res.settings.graph_on(namespace):
        return ""
    task_id = graph_task_id(ingest_task_id)
    await tasks.create_task(res.redis, TaskRecord(
        task_id=task_id, kind="graph", namespace=namespace, memory_id=memory_id,
        created_at=time.time(), message="waiting for a worker"), res.task_ttl)
    await enqueue_graph(res.redis, res.settings, GraphJob(task_id=task_id, namespace=namespace,
                                                           memory_ids=[memory_id]))
    return task_id
