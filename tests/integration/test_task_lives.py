"""A job never depends on a task record that can expire before it, and a claim whose task is
gone is taken over (issue 45, item 1).

Task records lived 7 days and queued jobs 30: after a week of workers down, an add's job
found no record and wrote nothing, while the memory's claim kept answering the same text
"duplicate, done"; a delete's job did nothing and the memory stayed searchable. The repro:
workers stopped, add (or delete), the task's record expires, a worker starts, the same text
is added again (or deleted again)."""

from __future__ import annotations

from tests.support.graph import stored
from tests.support.waiting import eventually
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.shared.protocol.api import BuildGraph, MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME

TEXT = "The lighthouse keeper logs the fog horn's hours in a green ledger."


async def expire(aredis, task_id: str) -> None:
    """The record expires (as it did after 7 days): a record that has expired is gone."""
    await aredis.pexpire(tasks.task_key(task_id), 1)
    await eventually(lambda: aredis.exists(tasks.task_key(task_id)), lambda n: n == 0,
                     f"the record of {task_id} to expire")


async def test_every_record_of_a_queued_task_outlives_its_job(settings, front, aredis):
    """What makes the repro impossible: the record of a queued add, delete or graph task
    lives at least as long as the job arq keeps for it."""
    added = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    await run_workers(settings)
    again = await ops.add_memory(front, decode_add_memory(TEXT + " Twice.", None, None))
    deleted = await ops.delete_memory(front, MemoryRef(memory_id=added.memory_id))
    graph = await ops.build_graph(front, BuildGraph())
    assert await aredis.zcard(QUEUE_NAME) == 3  # nothing has run them
    for task_id in (again.task_id, deleted.task_id, graph.task_id):
        job_ms = await aredis.pttl(f"arq:job:{task_id}")
        assert job_ms > 0
        assert await aredis.pttl(tasks.task_key(task_id)) > job_ms


async def test_an_add_whose_record_expired_is_taken_over_by_the_same_text_again(
        settings, front, aredis, query_service):
    first = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    await expire(aredis, first.task_id)
    await run_workers(settings)  # its job runs and finds no record
    again = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    # not "duplicate, done" for a text that is not stored: a new ingest of it
    assert (again.duplicate, again.status) == (False, "queued")
    assert again.memory_id == first.memory_id and again.task_id != first.task_id
    await run_workers(settings)
    assert (await tasks.get_task(aredis, again.task_id)).state == "done"
    memory = await ops.get_memory(front, MemoryRef(memory_id=again.memory_id))
    assert (memory.text, memory.status) == (TEXT, "ready")
    # and once stored, the same text again is a duplicate, as ever
    third = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    assert (third.duplicate, third.task_id) == (True, again.task_id)


async def test_a_stored_memory_whose_ingest_record_expired_stays_a_duplicate(
        settings, front, aredis, query_service):
    """The claim of a memory stored more than a week ago names a task that is gone: the
    same text again changes nothing (no second ingest, no new turn)."""
    first = await ops.add_memory(front, decode_add_memory(TEXT, {"source": "a"}, None))
    await run_workers(settings)
    await expire(aredis, first.task_id)
    again = await ops.add_memory(front, decode_add_memory(TEXT, {"source": "b"}, None))
    assert (again.duplicate, again.task_id, again.status, again.metadata_changed) == \
        (True, first.task_id, "done", True)
    assert await aredis.zcard(QUEUE_NAME) == 0


async def test_a_delete_whose_record_expired_still_deletes(settings, front, aredis,
                                                           query_service):
    added = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    await run_workers(settings)
    deleted = await ops.delete_memory(front, MemoryRef(memory_id=added.memory_id))
    await expire(aredis, deleted.task_id)
    await run_workers(settings)  # its job runs and finds no record
    assert (await stored(settings))["memories"] == 0  # the delete ran all the same
    record = await tasks.get_task(aredis, deleted.task_id)
    assert record is not None and record.state == "done"
    assert await tasks.owner_task(aredis, "default", added.memory_id) is None
    again = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
    assert not again.duplicate
    await run_workers(settings)
    assert (await stored(settings))["ready"] == 1
