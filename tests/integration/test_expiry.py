"""Forgetting: an expired memory leaves search and listing at once, and the sweep deletes it
through the ordinary delete path (a delete task), never a pinned one, never one still being
ingested. Real Redis/FalkorDB, query service and workers."""

from __future__ import annotations

import time
from datetime import datetime

import msgspec
import pytest

from tests.support.graph import stored
from tests.support.waiting import eventually
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.shared.protocol.answers import MemoryPage, MemoryRecord, SearchResponse
from zapomni.shared.protocol.api import ListRequest, MemoryRef
from zapomni.shared.protocol.errors import NotFound
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.store import deletes
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks import tasks
from zapomni.workers.resources import close_resources, open_resources
from zapomni.workers.upkeep import sweep_expired, sweep_memories


async def search_ids(front, text: str) -> list[str]:
    request = decode_search(text, 10, None, None)
    return [h.memory_id for h in
            (await front.query.call("/v1/search", request, SearchResponse)).results]


async def listed(front) -> list[str]:
    page = await front.query.call("/v1/list", ListRequest(), MemoryPage)
    return [m.memory_id for m in page.memories]


async def write(settings, query: str, params: dict) -> None:
    store = GraphStore(settings)
    try:
        await store.graph("default").query(query, params)
    finally:
        await store.aclose()


async def sweep_once(settings) -> str:
    """One run of the worker's periodic sweep (the arq cron function), as a worker runs it."""
    from zapomni.shared.tasks.queue import connect_queue

    ctx = {"redis": connect_queue(settings)}
    await open_resources(ctx, settings)
    try:
        return await sweep_memories(ctx)
    finally:
        await close_resources(ctx)
        await ctx["redis"].aclose()


async def delete_task_of(aredis, memory_id: str):
    owner = await tasks.owner_task(aredis, "default", memory_id)
    return await tasks.get_task(aredis, owner) if owner else None


async def test_an_expired_memory_is_hidden_then_swept_through_a_delete_task(
        settings, front, query_service, aredis):
    # a point in time as unix seconds, a few seconds ahead (issue 32: it was read as seconds
    # from now, so it expired 57 years later)
    soon = await add_text(settings, "The door code is 4711 until the locks change.",
                          {"expires_at": int(time.time()) + 4})
    pinned = await add_text(settings, "The door code of the shed is 1234.", {"pinned": True})
    later = await add_text(settings, "The door code of the garage is 9999.",
                           {"expires_in": 3600})
    await run_workers(settings)
    record = await front.query.call("/v1/memory", MemoryRef(memory_id=soon.memory_id),
                                    MemoryRecord)
    expires = datetime.fromisoformat(record.metadata["expires_at"]).timestamp()

    hits = await eventually(lambda: search_ids(front, "door code"),
                            lambda ids: soon.memory_id not in ids, "the memory to expire",
                            timeout=60)
    assert time.time() >= expires
    assert set(hits) == {pinned.memory_id, later.memory_id}
    assert set(await listed(front)) == {pinned.memory_id, later.memory_id}
    gone = await front.query.call("/v1/memory", MemoryRef(memory_id=soon.memory_id),
                                  MemoryRecord)
    assert gone.status == "expired"  # get_memory still shows it, and says why it is hidden

    assert "queued 1 deletes of expired memories" in await sweep_once(settings)
    task = await delete_task_of(aredis, soon.memory_id)
    assert (task.kind, task.state, task.message) == (
        "delete", "queued", f"waiting for a worker (expired at {record.metadata['expires_at']})")
    await run_workers(settings)
    task = await tasks.get_task(aredis, task.task_id)
    assert (task.state, task.message) == (
        "done", f"deleted 1 memory and 1 chunks (expired at {record.metadata['expires_at']})")
    with pytest.raises(NotFound):
        await front.query.call("/v1/memory", MemoryRef(memory_id=soon.memory_id), MemoryRecord)
    assert (await stored(settings))["memories"] == 2
    assert "queued 0 deletes" in await sweep_once(settings)  # nothing left to do

    # an hour on: the other expires too; a pinned memory never does, even one that carries
    # an expiry (validation refuses the pair; the sweep's query is the guard)
    await write(settings, "MATCH (m:Memory {id: $id}) SET m.expires_at = $at",
                {"id": pinned.memory_id, "at": time.time() - 60})
    store = GraphStore(settings)
    try:
        queued = await sweep_expired(front.redis, store, settings, ["default"],
                                     time.time() + 7200)
    finally:
        await store.aclose()
    assert queued == 1
    await run_workers(settings)
    assert (await delete_task_of(aredis, later.memory_id)) is None  # done: the claim is free
    kept = await front.query.call("/v1/memory", MemoryRef(memory_id=pinned.memory_id),
                                  MemoryRecord)
    assert kept.metadata == {"pinned": True}
    assert (await stored(settings))["memories"] == 1


async def test_the_sweep_skips_a_memory_being_deleted_or_added_again(settings, front,
                                                                     query_service, aredis):
    first = await add_text(settings, "Parking is on level 3 this week.", {"expires_in": 60})
    second = await add_text(settings, "Parking is on level 5 next week.", {"expires_in": 60})
    await run_workers(settings)
    deleting = await ops.delete_memory(front, MemoryRef(memory_id=first.memory_id))
    store = GraphStore(settings)
    try:
        # the ingest that wrote it no longer owns the memory: it was added again meanwhile
        changed = await deletes.queue_delete(front.redis, settings, "default",
                                             second.memory_id, "sweep", seen="task_" + "0" * 32)
        assert (changed.task_id, changed.new) == ("", False)
        assert await sweep_expired(front.redis, store, settings, ["default"],
                                   time.time() + 120) == 1
    finally:
        await store.aclose()
    # the delete already under way is the one that runs; the other memory got its own
    assert (await delete_task_of(aredis, first.memory_id)).task_id == deleting.task_id
    swept = await delete_task_of(aredis, second.memory_id)
    assert (swept.kind, swept.state) == ("delete", "queued")
    await run_workers(settings)
    assert (await stored(settings))["memories"] == 0


async def test_a_memory_still_ingesting_waits_for_its_ingest(settings, front, query_service,
                                                             aredis, part_chunks):
    from zapomni.workers.main import make_worker

    part_chunks(2)
    fan_out = msgspec.structs.replace(settings, chunk_tokens=64)
    text = " ".join(f"Sentence {i} of a long report on harbour cranes." for i in range(80))
    receipt = await add_text(settings, text, {"expires_in": 60})
    worker = make_worker(fan_out, burst=True, handle_signals=False)
    worker.max_burst_jobs = 1  # the ingest job only: the memory is written, its parts queued
    await worker.main()
    await worker.close()
    store = GraphStore(settings)
    try:
        assert await sweep_expired(front.redis, store, settings, ["default"],
                                   time.time() + 120) == 0
        assert (await tasks.get_task(aredis, receipt.task_id)).state in tasks.ACTIVE
        await run_workers(fan_out)
        assert (await tasks.get_task(aredis, receipt.task_id)).state == "done"
        assert await sweep_expired(front.redis, store, settings, ["default"],
                                   time.time() + 120) == 1
    finally:
        await store.aclose()
    await run_workers(settings)
    assert (await stored(settings))["memories"] == 0
