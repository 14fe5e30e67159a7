"""Small memories travel in batches (shared/tasks/adds.py, workers/ingest.py; issue 32, item 6): the
adds made while the workers are busy share one job, by bytes, and each memory keeps what it
would have alone — its task (graph_status, cancel_task, get_memory while queued), its place
in its thread, its stored shape — while a batch that runs again never writes twice."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from tests.support.graph import query, stored
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.errors import Overloaded
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import capacity, tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.workers.store import (
    link_chunks,
    write_batch_chunks,
    write_chunks,
    write_memories,
    write_memory,
)

TURNS = [f"Turn {i}: the crew of the research ship Kestrel logged {i * 7} dolphins at dawn "
         f"near buoy {i}." for i in range(6)]


@pytest.fixture
async def front(settings):
    front = Front(settings)
    yield front
    await front.aclose()


async def add(front, text, metadata=None, namespace=None):
    return await ops.add_memory(front, decode_add_memory(text, metadata, namespace))


async def test_adds_made_while_no_worker_runs_share_a_job_and_keep_their_tasks(
        settings, front, aredis, query_service):
    added = [await add(front, text, {"thread": "voyage"}) for text in TURNS]
    assert len({r.task_id for r in added}) == len(TURNS)
    assert await aredis.zcard(QUEUE_NAME) == 1  # one job holds them all
    records = [await ops.task_status(front, r.task_id) for r in added]
    assert {r.batch for r in records} == {added[0].task_id}
    assert [r.state for r in records] == ["queued"] * len(TURNS)
    pending = await ops.get_memory(front, MemoryRef(memory_id=added[3].memory_id))
    assert (pending.text, pending.status, pending.task_id) == (TURNS[3], "queued",
                                                              added[3].task_id)

    await run_workers(settings)

    done = [await ops.task_status(front, r.task_id) for r in added]
    assert [(r.state, r.done, r.total, r.chunks) for r in done] == [("done", 1, 1, 1)] * 6
    assert len({r.graph_task_id for r in done}) == 1  # one entity extraction for the batch
    chain = await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id")
    ids = [r.memory_id for r in added]
    assert sorted(chain) == sorted([[a, b] for a, b in zip(ids, ids[1:], strict=False)])
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == counts["chunks"] == 6
    assert await capacity.queued_bytes(aredis) == 0  # the batch's bytes went with its job
    assert await aredis.keys(capacity.BATCH_PREFIX + "*") == []


async def test_a_memory_cancelled_in_its_batch_is_the_only_one_undone(settings, front,
                                                                       aredis):
    added = [await add(front, text) for text in TURNS[:3]]
    cancelled = await ops.cancel_task(front, added[1].task_id)
    assert cancelled.state == "cancelled"

    await run_workers(settings)

    states = [(await tasks.get_task(aredis, r.task_id)).state for r in added]
    assert states == ["done", "cancelled", "done"]
    rows = await query(settings, "MATCH (m:Memory) RETURN m.text ORDER BY m.text")
    assert rows == [[TURNS[0]], [TURNS[2]]]
    again = await add(front, TURNS[1])  # free to be added again
    assert not again.duplicate
    await run_workers(settings)
    assert (await stored(settings))["ready"] == 3


@pytest.mark.parametrize("point", ["memory_written", "part_written", "finishing"])
async def test_a_batch_that_ran_in_part_runs_again_without_writing_twice(settings, front,
                                                                         aredis, point):
    """The job dies after a write (arq runs it again): the same graph, once."""
    added = [await add(front, text, {"thread": "voyage"}) for text in TURNS]
    crashed: list[str] = []

    async def crash(at: str, job) -> None:
        if at == point and not crashed:
            crashed.append(job.task_id)
            raise RuntimeError("the worker's process dies here")

    await run_workers(settings, checkpoint=crash)

    assert crashed
    assert [(await tasks.get_task(aredis, r.task_id)).state for r in added] == ["done"] * 6
    counts = await stored(settings)
    assert counts == {"memories": 6, "ready": 6, "chunks": 6, "has_chunk": 6, "next": 0,
                      "orphan_chunks": 0}
    assert await query(settings, "MATCH ()-[r:THEN]->() RETURN count(r)") == [[5]]


@pytest.mark.parametrize("point", ["memory_written", "part_written", "finishing"])
async def test_memories_deleted_while_their_batch_runs_are_undone_alone(settings, front,
                                                                         aredis, point):
    """Two of three deleted at one moment of the batch, then all three at another: each
    deleted one leaves nothing, the one kept is done, and the batch never fails."""
    added = [await add(front, text) for text in TURNS[:3]]
    doomed = {r.memory_id for r in added[1:]}
    deleted: list[str] = []

    async def delete(at: str, job) -> None:
        if at == point and job.memory_id in doomed and job.memory_id not in deleted:
            deleted.append(job.memory_id)
            await ops.delete_memory(front, MemoryRef(memory_id=job.memory_id))

    await run_workers(settings, checkpoint=delete)

    assert sorted(deleted) == sorted(doomed)
    states = [(await tasks.get_task(aredis, r.task_id)).state for r in added]
    assert states == ["done", "cancelled", "cancelled"]
    assert await query(settings, "MATCH (m:Memory) RETURN m.text") == [[TURNS[0]]]
    assert (await stored(settings))["orphan_chunks"] == 0


async def test_a_batch_whose_memories_are_all_deleted_ends_quietly(settings, front, aredis):
    added = [await add(front, text) for text in TURNS[:2]]

    async def delete_all(at: str, job) -> None:
        if at == "memory_written":
            await ops.delete_memory(front, MemoryRef(memory_id=job.memory_id))

    await run_workers(settings, checkpoint=delete_all)

    assert [(await tasks.get_task(aredis, r.task_id)).state for r in added] == \
        ["cancelled", "cancelled"]
    assert [(await tasks.get_task(aredis, r.task_id)).attempts for r in added] == [1, 1]
    assert (await stored(settings))["memories"] == 0


async def test_a_batch_is_sealed_when_its_job_starts(settings, front, aredis):
    """An add made while its namespace's batch runs waits in the next batch, and keeps its
    place in its thread."""
    first = await add(front, TURNS[0], {"thread": "voyage"})
    later: list = []

    async def add_meanwhile(at: str, job) -> None:
        if at == "owned" and not later:
            later.append(await add(front, TURNS[1], {"thread": "voyage"}))

    await run_workers(settings, checkpoint=add_meanwhile)

    second = await ops.task_status(front, later[0].task_id)
    assert second.batch != first.task_id and second.state == "done"
    assert await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id") \
        == [[first.memory_id, later[0].memory_id]]


async def test_a_large_memory_has_a_job_of_its_own(settings, front, aredis):
    small = await add(front, TURNS[0])
    large = await add(front, " ".join(TURNS) * 60)  # over adds.MEMBER_BYTES
    after = await add(front, TURNS[1])
    assert await aredis.zcard(QUEUE_NAME) == 2
    assert (await ops.task_status(front, large.task_id)).batch == large.task_id
    assert (await ops.task_status(front, after.task_id)).batch == small.task_id
    await run_workers(settings)
    assert (await stored(settings))["ready"] == 3


async def test_joining_a_batch_is_refused_only_past_the_bytes(settings, aredis):
    """Past the jobs limit, small adds still join the open batch; past the bytes, none."""
    one_job = Front(msgspec.structs.replace(settings, max_queue_depth=1))
    try:
        joined = [await add(one_job, text) for text in TURNS]
        assert await aredis.zcard(QUEUE_NAME) == 1
        with pytest.raises(Overloaded, match="jobs"):
            await add(one_job, TURNS[0], namespace="elsewhere")  # would be a second job
    finally:
        await one_job.aclose()
    held = await capacity.queued_bytes(aredis)
    full = Front(msgspec.structs.replace(settings, max_queue_bytes=held + 50))
    try:
        with pytest.raises(Overloaded, match="MB waiting"):
            await add(full, "Another turn of the voyage, past the queue's bytes.")
    finally:
        await full.aclose()
    assert await capacity.queued_bytes(aredis) == held  # the refused add holds nothing
    assert len(await aredis.keys("zapomni:task:*")) == len(joined)


async def test_a_memory_written_in_a_batch_is_stored_as_one_written_alone(settings):
    """The batch's statements are derived from the single ones (shared/store/cypher_batch.py):
    the same properties, node for node, whatever a memory or chunk gains."""
    job = IngestJob(task_id="task_" + "1" * 32, memory_id="mem_" + "1" * 32, namespace="x",
                    text=TURNS[0], content_hash="h", tags=["sea"], source="log",
                    metadata_json='{"thread": "voyage", "mood": "calm"}', created_at=1.5e9,
                    thread="voyage", after="mem_" + "0" * 32, gen=7, importance=0.7,
                    memory_type="event", expires_at=2e9, line_offset=2)
    spans = [ChunkSpan(idx=0, text=TURNS[0][:40], char_start=0, char_end=40, tokens=9,
                       start_line=3, end_line=3),
             ChunkSpan(idx=1, text=TURNS[0][30:], char_start=30, char_end=len(TURNS[0]),
                       tokens=12, start_line=3, end_line=4)]
    vectors = np.eye(2, 384, dtype=np.float32)
    store = GraphStore(settings)
    try:
        for name in ("alone", "batch"):
            await prepare_namespace(store, name, "test", 384)
        await write_memory(store.graph("alone"), job, 2)
        await write_chunks(store.graph("alone"), job.memory_id, spans, vectors)
        await link_chunks(store.graph("alone"), job.memory_id, 2)  # as its last part does
        await write_memories(store.graph("batch"), [(job, 2)])
        await write_batch_chunks(store.graph("batch"), [(job.memory_id, spans)], vectors)
        shapes = [[await run(store.graph(name), q) for q in (
            "MATCH (m:Memory) RETURN properties(m)",
            "MATCH (c:Chunk) RETURN properties(c) ORDER BY c.idx",
            "MATCH (:Chunk)-[r:NEXT]->(:Chunk) RETURN count(r)")]
            for name in ("alone", "batch")]
    finally:
        await store.aclose()
    assert shapes[0] == shapes[1]
    memory, chunks, links = shapes[0]
    assert memory[0][0]["metadata"] == job.metadata_json and memory[0][0]["gen"] == 7
    assert [c[0]["start_line"] for c in chunks] == [3, 3] and links == [[1]]


async def test_a_batch_of_many_adds_by_one_call_is_refused_whole_past_the_bytes(settings,
                                                                                 aredis):
    items = [decode_add_memory(text, None, None) for text in TURNS]
    tight = Front(msgspec.structs.replace(settings, max_queue_bytes=len(TURNS[0]) * 3))
    try:
        with pytest.raises(Overloaded):
            await ops.add_memories(tight, items)
    finally:
        await tight.aclose()
    assert await aredis.keys("zapomni:task:*") == []
