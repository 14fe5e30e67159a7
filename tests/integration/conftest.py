from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fastmcp import Client

from zapomni.services.mcp.front import Front
from zapomni.services.mcp.server import build_server
from zapomni.shared.settings import Settings


@pytest.fixture
async def front(settings: Settings) -> AsyncIterator[Front]:
    front = Front(settings)
    yield front
    await front.aclose()


@pytest.fixture
async def client(settings: Settings, query_service: str) -> AsyncIterator[Client]:
    """A real MCP client on the front, in process, with the query service running."""
    async with Client(build_server(settings)) as client:
        yield client
