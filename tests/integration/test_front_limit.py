"""The front serves a bounded number of MCP requests at once (issue 33, defect 8): past its
limit a request is refused at once with the retryable error, before its body is read, and
health checks still answer."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from fastmcp import Client

from tests.support.servers import ThreadedServer
from tests.support.waiting import eventually
from zapomni.services.mcp.http import http_app


async def test_requests_past_the_limit_are_refused_with_the_retry_error(settings,
                                                                        query_service):
    app = http_app(settings, max_in_flight=2)
    release = asyncio.Event()
    started: list[int] = []

    async def body():  # a request whose body is still arriving: in flight until released
        started.append(1)
        yield b'{"jsonrpc": "2.0", '
        await release.wait()
        yield b'"id": 1}'

    with ThreadedServer(app) as server:
        async with Client(f"{server.url}/mcp") as client, \
                httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
            await client.call_tool("get_stats", {})  # a session, opened while there is room
            held = [asyncio.create_task(http.post(
                "/mcp", content=body(), headers={"content-type": "application/json",
                                                 "accept": "application/json"}))
                    for _ in range(2)]
            await eventually(lambda: asyncio.sleep(0, len(started)), lambda n: n == 2,
                             "two requests in flight")
            with pytest.raises(Exception) as refused:
                await client.call_tool("get_stats", {})
            raw = await http.post("/mcp", content=b"{}",
                                  headers={"content-type": "application/json"})
            health = await http.get("/healthz")
            release.set()
            await asyncio.gather(*held)
            after = await client.call_tool("get_stats", {})
    assert str(refused.value).startswith(
        "temporarily unavailable: the server is answering 2 requests at once, its limit; "
        "nothing was done. Retry in 1 second")
    assert (raw.status_code, raw.headers["retry-after"]) == (503, "1")
    assert raw.json()["error"]["message"] == str(refused.value)
    assert health.status_code == 200
    assert not after.is_error
