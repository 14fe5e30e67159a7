"""The periodic sweep reaches everything, a bounded page at a time: every not-ready memory of a
namespace (live ingests first in the order do not hide the ended ones behind them) and every
namespace, however many (each run takes the next ones). Real Redis, FalkorDB and the sweep as
a worker runs it."""

from __future__ import annotations

import time

from tests.integration.test_expiry import sweep_once
from tests.support.graph import query
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.workers import upkeep

ENDED, LIVE = "task_" + "e" * 32, "task_" + "1" * 32


async def record_tasks(aredis) -> None:
    for task_id, state in ((ENDED, "cancelled"), (LIVE, "running")):
        await tasks.create_task(aredis, TaskRecord(task_id=task_id, kind="ingest",
                                                   namespace="default",
                                                   created_at=time.time()), 3600)
        await tasks.move(aredis, task_id, state, ttl=3600, allowed=tasks.ACTIVE)


async def leave(settings, namespace: str, rows: list[tuple[str, str, float]]) -> None:
    """Not-ready memories (id, writer task, age in seconds), each with a chunk."""
    store = GraphStore(settings)
    try:
        await prepare_namespace(store, namespace, "test", 3)
        for memory_id, task_id, age in rows:
            await store.graph(namespace).query(
                "CREATE (:Memory {id: $id, ready: false, task_id: $t, created_at: $at})"
                "-[:HAS_CHUNK]->(:Chunk {id: $id + ':0', memory_id: $id})",
                {"id": memory_id, "t": task_id, "at": time.time() - age})
    finally:
        await store.aclose()


async def test_every_page_of_not_ready_memories_is_swept(settings, aredis, monkeypatch):
    """Three live ingests' memories, the oldest, fill the first pages; the two memories of
    an ended task after them are removed all the same, in one run."""
    monkeypatch.setattr(upkeep, "SWEEP_PAGE", 2)
    await record_tasks(aredis)
    live = [(f"mem_{i}" + "0" * 31, LIVE, 100.0 - i) for i in range(1, 4)]
    ended = [(f"mem_{c}" + "0" * 31, ENDED, 10.0) for c in "de"]
    await leave(settings, "default", live + ended)
    assert "removed 2 of 1 namespaces' unfinished memories" in await sweep_once(settings)
    kept = sorted(row[0] for row in await query(settings, "MATCH (m:Memory) RETURN m.id"))
    assert kept == [memory_id for memory_id, _, _ in live]
    chunks = await query(settings, "MATCH (c:Chunk) RETURN count(c)")
    assert chunks == [[3]]


async def test_every_namespace_is_swept_a_bounded_number_per_run(settings, aredis,
                                                                 monkeypatch):
    """Five namespaces, two per run: three runs reach them all, each run the next two."""
    monkeypatch.setattr(upkeep, "MAX_NAMESPACES", 2)
    await record_tasks(aredis)
    names = [f"ns-{c}" for c in "abcde"]
    for name in names:
        await leave(settings, name, [("mem_" + "e" * 32, ENDED, 10.0)])
    left, said = [], []
    for _ in range(3):
        said.append((await sweep_once(settings)).split(" namespaces'")[0])
        left.append([name for name in names
                     if await query(settings, "MATCH (m:Memory) RETURN m.id", None, name)])
    assert said == ["removed 2 of 2", "removed 2 of 2", "removed 1 of 2"]
    assert left == [names[2:], names[4:], []]
