"""Reads carry FalkorDB's per-query time limit, matched to the front's (shared/store/graphstore.py):
a read that runs long is stopped by the server itself, and the user is told to retry."""

from __future__ import annotations

import msgspec
import pytest
from fastmcp.exceptions import ToolError

from zapomni.services.mcp.calls import tool_call
from zapomni.shared.protocol.errors import Overloaded
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, read_timeout_ms, run

# every triple of 300 nodes: 27 million rows, seconds of work, and no row matches
SLOW = "MATCH (a:Slow), (b:Slow), (c:Slow) WHERE a.i + b.i + c.i < 0 RETURN count(*)"


@pytest.fixture
async def store(settings: Settings):
    store = GraphStore(msgspec.structs.replace(settings, request_timeout=0.5))
    await store.graph("slow").query("UNWIND range(1, 300) AS i CREATE (:Slow {i: i})")
    yield store
    await store.aclose()


async def test_a_slow_read_is_stopped_by_the_server_with_a_retryable_error(store):
    assert read_timeout_ms(store.settings) == 450
    with pytest.raises(Overloaded) as stopped:
        await run(store.graph("slow"), SLOW, read_only=True)
    assert stopped.value.message == (
        "the query ran over its time limit (0.45 s) in the graph store and was stopped; retry "
        "in a few seconds, or ask for less (a lower limit, a filter)")
    # what a tool call shows the user
    with pytest.raises(ToolError) as shown, tool_call("search_memory"):
        await run(store.graph("slow"), SLOW, read_only=True)
    assert str(shown.value) == f"temporarily unavailable: {stopped.value.message}"
    # the store is free again at once: a small read answers
    assert await run(store.graph("slow"), "MATCH (n:Slow) RETURN count(n)", read_only=True) \
        == [[300]]
