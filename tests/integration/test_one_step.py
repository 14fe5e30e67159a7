"""A task and its job are one step (issue 33, defects 1 and 2).

Redis is lost (or the front dies) right after the step that writes a task: a delete, the
cancel of an ingest or an add must never be left accepted with no job to run it. And a
duplicate add changes nothing: it never runs an ingest again and never replaces the stored
metadata, even when arq no longer remembers the first ingest's job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import msgspec
import pytest
import redis.exceptions
from prometheus_client import REGISTRY

from tests.support.graph import query, stored
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import BuildGraph, MemoryRef
from zapomni.shared.protocol.errors import Unavailable
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.store import postings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks import tasks

TEXT = "The night ferry to Hvar leaves at eleven from the second pier."
LONG = "\n\n".join(f"Paragraph {i}: the archive of harbour records, shelf {i}, holds the "
                   f"tide tables and pilot notes of year {1900 + i}." for i in range(60))
TAKE = "it finished first"  # a line of the script that takes a memory for a delete
CLAIM = "redis.call('INCR', 'zapomni:gen')"  # a line of the script that claims for an add


@contextlib.contextmanager
def redis_lost_after(client, marker: str) -> Iterator[list]:
    """Every Redis call of ``client`` after the script holding ``marker`` fails, as when
    the front loses Redis, or its answer, just after that step."""
    original = client.execute_command
    lost: list = []

    async def execute(*args, **options):
        if lost:
            raise redis.exceptions.ConnectionError("connection lost")
        answer = await original(*args, **options)
        if args[0] == "EVAL" and marker in args[1]:
            lost.append(args[0])
        return answer

    client.execute_command = execute
    try:
        yield lost
    finally:
        client.execute_command = original


async def nothing_waits(aredis) -> None:
    """No task is left queued once the workers have emptied the queue."""
    assert await aredis.zrange(tasks.state_key("default", "queued"), 0, -1) == []
    assert await aredis.zrange(tasks.state_key("default", "running"), 0, -1) == []


@pytest.mark.parametrize("step", ["delete_memory", "cancel_task"])
async def test_a_delete_is_never_accepted_without_its_job(settings, aredis, query_service,
                                                          step):
    front = Front(settings)
    try:
        added = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
        if step == "delete_memory":
            await run_workers(settings)
        # told to retry, or answered: either way the delete must run
        with redis_lost_after(front.redis, TAKE) as lost, contextlib.suppress(Unavailable):
            if step == "delete_memory":
                await ops.delete_memory(front, MemoryRef(memory_id=added.memory_id))
            else:
                await ops.cancel_task(front, added.task_id)
        assert lost, "the delete never took the memory"
    finally:
        await front.aclose()
    await run_workers(settings)
    await nothing_waits(aredis)
    # the delete (or the cancel's undo) ran: nothing is stored, and the text is free again
    assert (await stored(settings))["memories"] == 0
    assert await tasks.owner_task(aredis, "default", added.memory_id) is None


async def test_an_add_is_never_left_queued_without_its_job(settings, aredis):
    front = Front(settings)
    try:
        with redis_lost_after(front.redis, CLAIM) as lost, contextlib.suppress(Unavailable):
            await ops.add_memory(front, decode_add_memory(TEXT, {"thread": "t"}, None))
        assert lost, "the add never claimed its memory"
    finally:
        await front.aclose()
    await run_workers(settings)
    await nothing_waits(aredis)
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == 1


def ingest_runs() -> float:
    """Ingest jobs run so far in this process (the workers of run_workers run here)."""
    return sum(REGISTRY.get_sample_value("zapomni_jobs_total", {"job": job, "outcome": o})
               or 0.0 for job in ("ingest_memory", "ingest_batch")
               for o in ("done", "cancelled", "retry", "failed"))


async def test_a_duplicate_add_never_runs_again_nor_changes_what_is_stored(settings, aredis,
                                                                           query_service,
                                                                           part_chunks):
    """A large text still writing its parts, added again with other metadata once arq has
    forgotten the first job's result (it keeps results 60 s): the duplicate is answered,
    and that is all."""
    part_chunks(2)
    fanned = msgspec.structs.replace(settings, graph_auto=False)
    front = Front(fanned)
    try:
        first = await ops.add_memory(front, decode_add_memory(LONG, {"source": "first"}, None))
        await run_workers(fanned, max_jobs=1)  # its ingest: part 1 written, the rest queued
        assert (await tasks.get_task(aredis, first.task_id)).state == "running"
        await aredis.delete(*await aredis.keys("arq:result:*"))  # as 60 s later
        runs = ingest_runs()
        again = await ops.add_memory(front, decode_add_memory(LONG, {"source": "second"},
                                                              None))
        assert (again.duplicate, again.task_id, again.metadata_changed) == \
            (True, first.task_id, True)
        await run_workers(fanned)
    finally:
        await front.aclose()
    assert ingest_runs() == runs  # the parts ran; no ingest job ran again
    assert (await tasks.get_task(aredis, first.task_id)).state == "done"
    assert await query(fanned, "MATCH (m:Memory) RETURN m.source") == [["first"]]
    counts = await stored(fanned)
    assert counts["memories"] == counts["ready"] == 1 and counts["orphan_chunks"] == 0


RECORD_WRITTEN = "'', 'queued'"  # a line of each script that writes a new task's record


async def test_a_front_task_is_never_left_queued_without_its_job(settings, aredis):
    """Issue 45 item 5: build_graph, ingest_path and reembed (``queue_task``) reserved,
    wrote the record and enqueued in three round trips; Redis lost after the record left
    the task queued for a week with no job."""
    front = Front(settings)
    try:
        with redis_lost_after(front.redis, RECORD_WRITTEN) as lost, \
                contextlib.suppress(Unavailable):
            await ops.build_graph(front, BuildGraph())
        assert lost, "the graph task's record was never written"
    finally:
        await front.aclose()
    await run_workers(settings)
    await nothing_waits(aredis)
    done = await aredis.zrange(tasks.state_key("default", "done"), 0, -1)
    assert len(done) == 1  # the graph task ran


async def test_the_backfill_lock_is_released_only_by_its_holder(settings, aredis):
    """Issue 45 item 5: the postings' backfill lock was released by a GET then a DEL; had
    it lapsed and another worker taken it in between, the DEL removed that worker's lock."""
    await add_text(settings, TEXT)
    await run_workers(settings)
    store = GraphStore(settings)
    graph = store.graph("default")
    lock = postings.prefix(graph.key) + "backfill:lock"
    original = graph.raw.execute_command
    taken: list[str] = []

    async def execute(*args, **options):
        # as the release begins, the lock changes hands (this holder's lapsed, another took
        # it): before a script that releases it, or after a read that found it ours
        if args[0] in ("EVAL", "EVALSHA") and lock.encode() in map(_bytes, args) and \
                not taken:
            await original("SET", lock, "the-other-worker")
            taken.append(args[0])
        answer = await original(*args, **options)
        if args[0] == "GET" and _bytes(args[1]) == lock.encode() and answer and not taken:
            await original("SET", lock, "the-other-worker")
            taken.append(args[0])
        return answer

    graph.raw.execute_command = execute
    try:
        await postings.backfill(graph)
    finally:
        graph.raw.execute_command = original
        await store.aclose()
    assert taken, "the release never read or ran on the lock"
    assert await aredis.get(lock) == b"the-other-worker"


def _bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else value if isinstance(value, bytes) \
        else str(value).encode()
