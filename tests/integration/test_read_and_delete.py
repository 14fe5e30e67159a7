"""Search filters, namespaces, get/delete, through the real query service over HTTP."""

from __future__ import annotations

import time

import pytest

from tests.support.graph import stored
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.shared.protocol.answers import MemoryRecord, SearchResponse, Stats
from zapomni.shared.protocol.api import MemoryRef, StatsRequest
from zapomni.shared.protocol.errors import NotFound
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME


async def add(front, text, metadata=None, namespace=None):
    return await ops.add_memory(front, decode_add_memory(text, metadata, namespace))


async def search(front, text, limit=10, filters=None, namespace=None) -> list:
    request = decode_search(text, limit, filters, namespace)
    return (await front.query.call("/v1/search", request, SearchResponse)).results


async def test_filters_select_by_tags_source_and_date(settings, front, query_service, aredis):
    a = await add(front, "Meeting notes: the budget review moved to Thursday.",
                  {"tags": ["work", "meetings"], "source": "notes"})
    b = await add(front, "Grocery list: apples, oat milk and coffee beans.",
                  {"tags": ["home"], "source": "phone"})
    c = await add(front, "The team offsite is planned for the mountains in June.",
                  {"tags": ["work"], "source": "email"})
    await run_workers(settings)

    def ids(hits):
        return {h.memory_id for h in hits}

    assert ids(await search(front, "plans", filters={"tags": ["work"]})) == {a.memory_id,
                                                                              c.memory_id}
    assert ids(await search(front, "plans", filters={"tags": ["home", "meetings"]})) == \
        {a.memory_id, b.memory_id}
    assert ids(await search(front, "plans", filters={"source": "phone"})) == {b.memory_id}
    assert await search(front, "plans", filters={"tags": ["nope"]}) == []
    now = time.time()
    assert len(await search(front, "plans", filters={"after": now - 3600})) == 3
    assert await search(front, "plans", filters={"before": now - 3600}) == []
    assert ids(await search(front, "plans", filters={"tags": ["work"], "source": "email"})) \
        == {c.memory_id}


@pytest.mark.timeout(900)  # 2,000 memories: 240 s measured on a loaded 2-core machine
async def test_a_selective_filter_returns_every_match_among_many(settings, front,
                                                                 query_service):
    """3 tagged memories among 2,000 chunks: HNSW candidates alone would miss them; the
    exact path over the filtered set must return all 3."""
    items = [decode_add_memory(f"Filler note number {i} about weather, traffic and lunch "
                               f"options near office {i}.", None, None) for i in range(1997)]
    rare = [decode_add_memory(f"Rare fact {i}: the vault code is kept by keeper {i}.",
                              {"tags": ["vault"]}, None) for i in range(3)]
    await ops.add_memories(front, items + rare)
    await run_workers(settings, count=2, timeout=600)
    assert (await stored(settings))["chunks"] == 2000
    hits = await search(front, "weather and traffic", limit=10, filters={"tags": ["vault"]})
    assert sorted(h.text for h in hits) == sorted(m.text for m in rare)


async def test_namespaces_are_isolated(settings, front, query_service):
    mine = await add(front, "My locker combination is 12-34-56.", namespace="alice")
    await add(front, "My locker combination is 98-76-54.", namespace="bob")
    await run_workers(settings)
    hits = await search(front, "locker combination", namespace="alice")
    assert [h.memory_id for h in hits] == [mine.memory_id]
    assert await search(front, "locker combination", namespace="carol") == []
    stats = await front.query.call("/v1/stats", StatsRequest(namespace="alice"), Stats)
    # done: the ingest and the entity extraction that followed it
    assert (stats.memories, stats.chunks, stats.tasks["done"]) == (1, 1, 2)
    with pytest.raises(NotFound):
        await front.query.call("/v1/memory", MemoryRef(memory_id=mine.memory_id,
                                                       namespace="bob"), MemoryRecord)


async def test_get_and_delete_memory(settings, front, query_service, aredis):
    keep = await add(front, "Keep: the spare key is under the blue flowerpot.",
                     {"tags": ["home"], "source": "me", "room": "porch"})
    gone = await add(front, "Delete me: the old wifi password was hunter2.")
    await run_workers(settings)

    record = await front.query.call("/v1/memory", MemoryRef(memory_id=keep.memory_id),
                                    MemoryRecord)
    assert (record.text, record.tags, record.source, record.metadata, record.status,
            record.chunk_count) == ("Keep: the spare key is under the blue flowerpot.",
                                    ["home"], "me", {"room": "porch"}, "ready", 1)

    receipt = await ops.delete_memory(front, MemoryRef(memory_id=gone.memory_id))
    assert (await tasks.get_task(aredis, receipt.task_id)).kind == "delete"
    await run_workers(settings)
    task = await tasks.get_task(aredis, receipt.task_id)
    assert (task.state, task.message) == ("done", "deleted 1 memory and 1 chunks")
    assert await stored(settings) == {"memories": 1, "ready": 1, "chunks": 1, "has_chunk": 1,
                                      "next": 0, "orphan_chunks": 0}
    assert [h.memory_id for h in await search(front, "wifi password")] == [keep.memory_id]
    # a second delete (the tool is idempotent) answers that it is gone, and changes nothing
    twice = await ops.delete_memory(front, MemoryRef(memory_id=gone.memory_id))
    assert (twice.status, twice.task_id, twice.message) == (
        "gone", None, f"{gone.memory_id} is not stored in namespace 'default' (deleted "
                      "already, or never added); nothing to delete")
    assert await aredis.zcard(QUEUE_NAME) == 0
    assert await stored(settings) == {"memories": 1, "ready": 1, "chunks": 1, "has_chunk": 1,
                                      "next": 0, "orphan_chunks": 0}

    again = await add(front, "Delete me: the old wifi password was hunter2.")
    assert not again.duplicate and again.memory_id == gone.memory_id
    await run_workers(settings)
    assert (await search(front, "wifi password"))[0].memory_id == gone.memory_id


async def test_delete_during_fan_out_leaves_nothing(falkordb_url, aredis, part_chunks):
    from tests.conftest import make_settings
    from zapomni.services.mcp.front import Front
    from zapomni.workers.main import make_worker

    part_chunks(2)
    settings = make_settings(falkordb_url, chunk_tokens=64)
    front = Front(settings)
    try:
        text = " ".join(f"Sentence {i} of a long report on harbour cranes." for i in range(80))
        receipt = await add(front, text)
        worker = make_worker(settings, burst=True, handle_signals=False)
        worker.max_burst_jobs = 1  # only the ingest job: its parts stay queued
        await worker.main()
        await worker.close()
        deleted = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
        # the delete runs before the queued parts, as if it overtook them
        await front.redis.zadd(QUEUE_NAME, {deleted.task_id: 1})  # arq skips 0
        await run_workers(settings)
    finally:
        await front.aclose()
    assert (await tasks.get_task(aredis, deleted.task_id)).state == "done"
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    assert await stored(settings) == dict.fromkeys(
        ["memories", "ready", "chunks", "has_chunk", "next", "orphan_chunks"], 0)


async def test_stats_count_what_is_stored_and_queued(settings, front, query_service):
    await add(front, "one")
    await add(front, "two")
    before = await front.query.call("/v1/stats", StatsRequest(), Stats)
    # two tasks in one job: small adds made while no worker runs share a batch
    assert (before.memories, before.queue_depth, before.tasks["queued"]) == (0, 1, 2)
    await run_workers(settings)
    after = await front.query.call("/v1/stats", StatsRequest(), Stats)
    assert (after.memories, after.chunks, after.queue_depth) == (2, 2, 0)
    # two ingest tasks, and the graph task of their batch
    assert after.tasks == {"queued": 0, "running": 0, "done": 3, "failed": 0, "cancelled": 0}
    assert (after.embedding_model, after.embedding_dim) == ("onnx:all-MiniLM-L6-v2-int8", 384)
