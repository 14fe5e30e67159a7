"""A delete that fails for good, at either of its two removals, leaves the memory stored and
no chunk without its memory: delete_memory finds it again and a second delete leaves
nothing. FalkorDB's failure is injected at the one query (it cannot be made to fail on
cue here); everything else is real: Redis, FalkorDB, the worker, the front's code path."""

from __future__ import annotations

import pytest

from tests.integration.test_races import LONG, nothing_stored
from tests.support.graph import stored
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.errors import StoreError
from zapomni.shared.store import cypher_memories
from zapomni.shared.tasks import tasks
from zapomni.workers import outcome, store


@pytest.mark.parametrize("failing", ["chunks", "memory"])
async def test_a_delete_that_fails_for_good_can_be_made_again(settings, query_service, aredis,
                                                               monkeypatch, failing):
    monkeypatch.setattr(outcome, "MAX_TRIES", 1)  # the first failure is final
    added = await add_text(settings, LONG)
    await run_workers(settings)
    before = await stored(settings)
    assert before["chunks"] > 1
    query = {"chunks": cypher_memories.DELETE_CHUNKS,
             "memory": cypher_memories.DELETE_MEMORY}[failing]
    real = store.run

    async def run(graph, text: str, params: dict, op: str) -> list:
        if text == query:
            raise StoreError("FalkorDB refused the query")
        return await real(graph, text, params, op)

    monkeypatch.setattr(store, "run", run)
    front = Front(settings)
    ref = MemoryRef(memory_id=added.memory_id)
    try:
        first = await ops.delete_memory(front, ref)
        await run_workers(settings)
        assert (await tasks.get_task(aredis, first.task_id)).state == "failed"
        left = await stored(settings)
        assert (left["memories"], left["orphan_chunks"]) == (1, 0)
        monkeypatch.setattr(store, "run", real)  # FalkorDB is well again
        second = await ops.delete_memory(front, ref)  # the memory is found: not NotFound
        await run_workers(settings)
        assert (await tasks.get_task(aredis, second.task_id)).state == "done"
    finally:
        await front.aclose()
    assert await stored(settings) == nothing_stored()
    assert not (await add_text(settings, LONG)).duplicate  # the text can be added again
