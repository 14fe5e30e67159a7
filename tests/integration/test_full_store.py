"""A server that cannot write (its disk full, its memory limit reached) is a clear, retryable
refusal, never an internal error or a dead worker (issue 45's faults campaign: with the data
directory's disk full, Redis answered MISCONF, the client saw "Error calling tool" and both
workers ended on an uncaught ResponseError). Here the test server's memory limit makes it
refuse writes (OOM) the same way, on demand."""

from __future__ import annotations

import asyncio

import pytest
from fastmcp import Client

from tests.support.mcp import call, error
from tests.support.waiting import eventually
from tests.support.workers import add_text
from zapomni.services.mcp.server import build_server
from zapomni.shared.tasks import tasks
from zapomni.workers.main import make_worker

TEXT = "The harbour's tide table is pinned beside the ferry office door."


@pytest.fixture
async def full(aredis):
    """Call to make the server refuse writes until the test (or ``room()``) gives it room."""
    async def refuse() -> None:
        await aredis.config_set("maxmemory-policy", "noeviction")
        await aredis.config_set("maxmemory", 1)

    yield refuse
    await aredis.config_set("maxmemory", 0)


async def test_an_add_while_redis_cannot_write_is_refused_clearly(settings, query_service,
                                                                   aredis, full):
    async with Client(build_server(settings)) as client:
        await full()
        said = await error(client, "add_memory", text=TEXT)
        assert said == ("temporarily unavailable: the queue (Redis) cannot write: its disk is "
                        "full or its memory limit is reached; nothing was stored. Retry once "
                        "it has room")
        await aredis.config_set("maxmemory", 0)
        added = await call(client, "add_memory", text=TEXT)
        assert added["status"] == "queued"


async def test_a_worker_waits_while_redis_cannot_write_and_goes_on(settings, aredis, full):
    added = await add_text(settings, TEXT)
    await full()
    worker = make_worker(settings, burst=True, handle_signals=False)
    running = asyncio.create_task(worker.main())
    try:
        await eventually(lambda: asyncio.sleep(0, worker.redis_lost_at),
                         lambda lost: lost is not None or running.done(),
                         "the worker to meet the refused writes", timeout=60)
        assert not running.done(), running.exception()  # it waits, it did not end
        await aredis.config_set("maxmemory", 0)
        await asyncio.wait_for(running, 120)
    finally:
        await worker.close()
    assert (await tasks.get_task(aredis, added.task_id)).state == "done"
