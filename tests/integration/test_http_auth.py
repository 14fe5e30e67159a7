"""The front over streamable HTTP with a bearer token."""

from __future__ import annotations

import httpx
import msgspec
from fastmcp import Client

from services.mcp.http import http_app
from tests.support.servers import ThreadedServer

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream"}


async def test_a_token_is_required_when_configured(settings, query_service):
    token = "correct-horse-battery-staple"
    settings = msgspec.structs.replace(settings, mcp_token=token)
    with ThreadedServer(http_app(settings)) as server:
        url = f"{server.url}/mcp"
        async with httpx.AsyncClient() as http:
            anonymous = await http.post(url, json=INITIALIZE, headers=HEADERS)
            wrong = await http.post(url, json=INITIALIZE,
                                    headers={**HEADERS, "authorization": "Bearer wrong"})
            health = await http.get(f"{server.url}/healthz")
        assert anonymous.status_code == wrong.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert health.status_code == 200  # liveness stays public
        async with Client(url, auth=token) as client:
            stats = (await client.call_tool("get_stats", {})).data
        assert stats["memories"] == 0
