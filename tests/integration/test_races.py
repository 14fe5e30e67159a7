"""Deletes and cancels against a running ingest, each forced at its exact moment.

The worker awaits a checkpoint at named points of a job (workers/ingest.py); the test acts
there — a delete or cancel through the front, waited for until its task is done — and the job
then goes on. Whatever the moment, the memory ends as the last accepted operation says, with
nothing half-written left behind, and the task states are final.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.graph import query, stored
from tests.support.workers import add_text, run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.errors import Unavailable
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import takeover, tasks
from zapomni.shared.tasks.arq_internals import queued_job
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.queue import DELETE, INGEST_BATCH, connect_queue, serialize
from zapomni.workers.upkeep import SWEEP

TEXT = ("The lighthouse keeper logs the weather at dawn and dusk. " * 40).strip()
LONG = "\n\n".join(f"Paragraph {i}: the archive of harbour records, shelf {i}, holds the "
                   f"tide tables and pilot notes of year {1900 + i}." for i in range(60))


def nothing_stored() -> dict[str, int]:
    return {"memories": 0, "ready": 0, "chunks": 0, "has_chunk": 0, "next": 0,
            "orphan_chunks": 0}


class Act:
    """A checkpoint that runs ``action`` once, the first time a job reaches ``point``."""

    def __init__(self, point: str, action, *, part: int | None = None) -> None:
        self.point, self.action, self.part = point, action, part
        self.fired = 0

    async def __call__(self, point: str, job) -> None:
        if point != self.point or self.fired:
            return
        if self.part is not None and getattr(job, "part", None) != self.part:
            return
        self.fired += 1
        await self.action(job)


def delete_now(settings, aredis, *, wait: bool = True):
    async def action(job) -> None:
        front = Front(settings)
        try:
            receipt = await ops.delete_memory(front, MemoryRef(memory_id=job.memory_id,
                                                                namespace=job.namespace))
        finally:
            await front.aclose()
        if wait:  # the same worker runs the delete beside the paused ingest
            await wait_tasks(aredis, [receipt.task_id], timeout=60)
    return action


def cancel_now(settings, aredis):
    async def action(job) -> None:
        front = Front(settings)
        try:
            record = await ops.cancel_task(front, job.task_id)
        finally:
            await front.aclose()
        assert record.state == "cancelled"
        undo = record.message.split()[3]  # "cancelled by request; task_x removes ..."
        await wait_tasks(aredis, [undo], timeout=60)
    return action


async def state(aredis, task_id: str) -> str:
    return (await tasks.get_task(aredis, task_id)).state


@pytest.mark.parametrize("point", ["owned", "memory_written", "part_written", "finishing"])
async def test_a_delete_at_any_moment_of_an_ingest_leaves_nothing(settings, aredis, point):
    receipt = await add_text(settings, TEXT)
    act = Act(point, delete_now(settings, aredis))
    await run_workers(settings, checkpoint=act)
    assert act.fired == 1
    assert await stored(settings) == nothing_stored()
    assert await state(aredis, receipt.task_id) == "cancelled"
    assert await tasks.owner_task(aredis, "default", receipt.memory_id) is None


async def test_a_delete_during_finish_that_runs_after_it_still_wins(settings, aredis):
    """The delete is accepted while the last part finishes, but its job runs later: the
    ingest's done is refused (it no longer owns the memory) and it undoes itself."""
    receipt = await add_text(settings, TEXT)
    act = Act("finishing", delete_now(settings, aredis, wait=False))
    await run_workers(settings, checkpoint=act)
    assert await stored(settings) == nothing_stored()
    assert await state(aredis, receipt.task_id) == "cancelled"


async def test_a_cancel_between_parts_undoes_every_part(settings, aredis, part_chunks):
    part_chunks(2)
    fanned = settings
    receipt = await add_text(fanned, LONG)
    act = Act("part_written", cancel_now(fanned, aredis), part=0)
    await run_workers(fanned, checkpoint=act)
    assert act.fired == 1
    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.total > 2 and record.state == "cancelled"
    assert await stored(fanned) == nothing_stored()
    again = await add_text(fanned, LONG)  # the text can be added again, and lands whole
    await run_workers(fanned)
    assert await state(aredis, again.task_id) == "done"
    counts = await stored(fanned)
    assert counts["memories"] == counts["ready"] == 1
    assert counts["chunks"] == counts["has_chunk"] == counts["next"] + 1 > 4


async def test_an_old_writer_never_undoes_the_text_added_again(settings, aredis):
    """Deleted while its job was paused, the same text added again and finished; then the
    old job goes on: its writes and its undo must leave the new memory as it is."""
    first = await add_text(settings, TEXT)
    added: list = []

    async def delete_then_add_again(job) -> None:
        await delete_now(settings, aredis)(job)
        added.append(await add_text(settings, TEXT, {"source": "second"}))
        await wait_tasks(aredis, [added[0].task_id], timeout=60)

    await run_workers(settings, checkpoint=Act("owned", delete_then_add_again))
    assert await state(aredis, first.task_id) == "cancelled"
    assert await state(aredis, added[0].task_id) == "done"
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == 1 and counts["chunks"] > 0
    assert counts["orphan_chunks"] == 0
    rows = await query(settings, "MATCH (m:Memory) RETURN m.task_id, m.source")
    assert rows == [[added[0].task_id, "second"]]


async def test_adding_a_text_while_its_delete_runs_is_refused_with_a_retry(settings, aredis):
    receipt = await add_text(settings, TEXT)
    await run_workers(settings)
    front = Front(settings)
    try:
        deleting = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
        again = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
        assert again.task_id == deleting.task_id  # one delete, not two
        with pytest.raises(Unavailable, match="is being deleted .* Add it again once"):
            await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    finally:
        await front.aclose()
    await run_workers(settings)
    assert await state(aredis, deleting.task_id) == "done"
    assert await stored(settings) == nothing_stored()
    assert (await add_text(settings, TEXT)).duplicate is False


async def test_ended_tasks_stay_ended_and_expired_records_stay_gone(settings, aredis):
    ttl = 3600
    record = TaskRecord(task_id="task_" + "a" * 32, kind="graph", namespace="default",
                        created_at=time.time())
    assert await tasks.create_task(aredis, record, ttl)
    assert not await tasks.create_task(aredis, record, ttl)  # once
    assert (await tasks.move(aredis, record.task_id, "running", ttl=ttl)).ok
    assert (await tasks.move(aredis, record.task_id, "cancelled", ttl=ttl)).ok
    late = await tasks.move(aredis, record.task_id, "running", ttl=ttl, worker="late")
    progress = await tasks.move(aredis, record.task_id, ttl=ttl, add={"done": 5})
    done = await tasks.move(aredis, record.task_id, "done", ttl=ttl)
    assert (late.ok, progress.ok, done.ok) == (False, False, False)
    after = await tasks.get_task(aredis, record.task_id)
    assert (after.state, after.done, after.worker) == ("cancelled", 0, "")
    assert await tasks.task_counts(aredis, "default", ttl) == {
        "queued": 0, "running": 0, "done": 0, "failed": 0, "cancelled": 1}
    assert await tasks.task_totals(aredis, ttl) == await tasks.task_counts(aredis, "default",
                                                                           ttl)
    await aredis.delete(tasks.task_key(record.task_id))  # as when it expires
    assert await tasks.move(aredis, record.task_id, ttl=ttl, add={"done": 1}) == \
        tasks.Moved(False, "")
    assert await tasks.finish_part(aredis, record.task_id, 0, "w", ttl) == -1
    assert not await aredis.exists(tasks.task_key(record.task_id))


async def test_a_job_this_worker_cannot_read_fails_its_task_and_says_why(settings, aredis):
    receipt = await add_text(settings, TEXT)
    queue = connect_queue(settings)
    try:
        await queue.delete(f"arq:job:{receipt.task_id}")  # lost; replaced by a bad one
        await queue.zrem(QUEUE_NAME, receipt.task_id)
        await queue.enqueue_job(INGEST_BATCH, {"task_id": receipt.task_id, "memory_id": 7,
                                               "version": 9}, _job_id=receipt.task_id)
    finally:
        await queue.aclose()
    await run_workers(settings)
    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.state == "failed"
    assert "cannot read the job" in record.error and "version 9" in record.error
    assert await tasks.owner_task(aredis, "default", receipt.memory_id) is None


async def test_the_sweep_removes_what_ended_tasks_left_and_keeps_the_rest(settings, aredis):
    ended, live = "task_" + "e" * 32, "task_" + "1" * 32
    now = time.time()
    for task_id, state_now in ((ended, "cancelled"), (live, "running")):
        await tasks.create_task(aredis, TaskRecord(task_id=task_id, kind="ingest",
                                                   namespace="default", created_at=now),
                                3600)
        await tasks.move(aredis, task_id, state_now, ttl=3600, allowed=tasks.ACTIVE)
    store = GraphStore(settings)
    try:
        await prepare_namespace(store, "default", "test", 3)
        graph = store.graph("default")
        for task_id, mid in ((ended, "mem_" + "e" * 32), (live, "mem_" + "1" * 32)):
            await graph.query("CREATE (:Memory {id: $id, ready: false, task_id: $t, "
                              "created_at: $now})-[:HAS_CHUNK]->(:Chunk {id: $id + ':0', "
                              "memory_id: $id})", {"id": mid, "t": task_id, "now": now - 1})
    finally:
        await store.aclose()
    queue = connect_queue(settings)
    try:
        await queue.enqueue_job(SWEEP)
    finally:
        await queue.aclose()
    await run_workers(settings)
    assert await query(settings, "MATCH (m:Memory) RETURN m.id") == [["mem_" + "1" * 32]]
    assert await query(settings, "MATCH (c:Chunk) RETURN c.memory_id") == [["mem_" + "1" * 32]]


async def test_each_claim_has_a_newer_generation(settings, aredis):
    receipt = await add_text(settings, TEXT)
    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.gen > 0
    second = await add_text(settings, TEXT + " Again.")
    assert (await tasks.get_task(aredis, second.task_id)).gen > record.gen


async def test_a_delete_goes_ahead_of_the_jobs_waiting(settings, aredis):
    """An add of the same text waits for its delete: the delete does not wait for the
    queue."""
    kept = await add_text(settings, TEXT)
    await run_workers(settings)
    # three jobs waiting (in three namespaces: adds to one would share a batch's job)
    waiting = [await add_text(settings, f"Waiting note number {i}.", namespace=f"wait{i}")
               for i in range(3)]
    front = Front(settings)
    try:
        deleting = await ops.delete_memory(front, MemoryRef(memory_id=kept.memory_id))
    finally:
        await front.aclose()
    order = [job.decode() for job in await aredis.zrange(QUEUE_NAME, 0, -1)]
    assert order == [deleting.task_id] + [w.task_id for w in waiting]
    await run_workers(settings)
    assert await state(aredis, deleting.task_id) == "done"
    assert [(await stored(settings, f"wait{i}"))["ready"] for i in range(3)] == [1, 1, 1]


async def test_a_cancel_that_comes_after_the_end_changes_nothing(settings, aredis):
    """The ingest finishes between cancel_task reading its state and taking its memory:
    the finished memory stays."""
    receipt = await add_text(settings, TEXT)
    await run_workers(settings)
    record = TaskRecord(task_id="task_" + "c" * 32, kind="delete", namespace="default",
                        memory_id=receipt.memory_id, created_at=time.time())
    job = queued_job(QUEUE_NAME, DELETE, {}, record.task_id, serializer=serialize,
                     expires_s=60, size=10, first=True)
    code, owner = await takeover.take_for_delete(aredis, record, 3600, job,
                                              from_task=receipt.task_id)
    assert (code, owner) == (0, receipt.task_id)
    assert await tasks.owner_task(aredis, "default", receipt.memory_id) == receipt.task_id
    assert await tasks.get_task(aredis, record.task_id) is None
    assert await aredis.zcard(QUEUE_NAME) == 0  # and no job
    assert (await stored(settings))["ready"] == 1


async def test_first_writers_of_a_namespace_make_one_model_record(settings):
    """Eight processes' first writes to fresh namespaces at once: each namespace ends with
    one record of its model and one of its stored shape's version (FalkorDB's MERGEs of a
    label new to the graph each created their own node, 2-16 of 16, before the indexes were
    made first)."""
    stores = [GraphStore(settings) for _ in range(8)]
    try:
        for n in range(5):
            namespace = f"fresh-{n}"
            await asyncio.gather(*(prepare_namespace(s, namespace, "test", 3) for s in stores))
            rows = await stores[0].graph(namespace).query(
                "MATCH (x:ZapomniMeta) RETURN x.key, count(x) ORDER BY x.key")
            assert rows.result_set == [["embedding", 1], ["schema", 1]]
    finally:
        for s in stores:
            await s.aclose()
