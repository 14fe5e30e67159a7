"""The front's HTTP app: fastmcp's streamable HTTP app, with a request body limit that fits
the largest memory add_memory accepts.

The MCP SDK refuses request bodies over 4 MiB (413), and fastmcp 4.1.2 has no setting for
it, so a text of 4 to 10 million characters (inside add_memory's documented limit) could not
be sent over HTTP. The limit is raised on the session manager once fastmcp's lifespan has
created it; tests/integration/test_fuzz.py sends a 10,000,000-character text to prove it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from services.mcp.server import build_server
from shared.settings import Settings
from shared.validation import MAX_TEXT_CHARS

# 4 bytes per character is the most UTF-8 needs; 1 MiB more for metadata and the envelope
MAX_REQUEST_BYTES = 4 * MAX_TEXT_CHARS + 2**20


def http_app(settings: Settings) -> Starlette:
    app = build_server(settings).http_app()
    mcp_route = next(route for route in app.routes if getattr(route, "path", "") == "/mcp")
    endpoint = mcp_route.endpoint  # with a token, fastmcp's auth middleware wraps it
    endpoint = getattr(endpoint, "app", endpoint)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(started: Starlette) -> AsyncIterator[None]:
        async with inner(started) as state:
            endpoint.session_manager.asgi_app.max_body_size = MAX_REQUEST_BYTES
            yield state

    app.router.lifespan_context = lifespan
    return app
