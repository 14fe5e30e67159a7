"""Everything Zapomni does with fastmcp's and the MCP SDK's private parts, in one place (both
are pinned exactly in pyproject.toml; tests/unit/test_library_internals.py fails, naming this
file, if an upgrade changes these shapes).

The MCP SDK refuses request bodies over 4 MiB (413), and fastmcp 4.1.2 has no setting for
it, so a text of 4 to 10 million characters (inside add_memory's documented limit) could not
be sent over HTTP. The limit lives on the SDK's ``RequestBodyLimitMiddleware``, which the
session manager creates as ``asgi_app`` and fastmcp creates when its lifespan starts: it is
raised there. tests/integration/test_fuzz.py sends a 10,000,000-character text to prove it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.applications import Starlette

WHERE = "services/mcp/fastmcp_internals.py"


class ShapeChanged(RuntimeError):
    """fastmcp or the MCP SDK no longer looks as this module expects."""


def mcp_endpoint(app: Starlette) -> Any:
    """fastmcp's handler of the /mcp route (with a token, fastmcp's auth middleware wraps it
    and holds it as ``.app``)."""
    route = next((r for r in app.routes if getattr(r, "path", "") == "/mcp"), None)
    if route is None:
        raise ShapeChanged(f"fastmcp's http_app() has no /mcp route any more ({WHERE})")
    endpoint = route.endpoint
    return getattr(endpoint, "app", endpoint)


def body_limiter(endpoint: Any) -> RequestBodyLimitMiddleware:
    """The SDK's body-size middleware of a started app (fastmcp's lifespan has run)."""
    limiter = getattr(getattr(endpoint, "session_manager", None), "asgi_app", None)
    if not isinstance(limiter, RequestBodyLimitMiddleware) or \
            not isinstance(getattr(limiter, "max_body_size", None), int):
        raise ShapeChanged(
            "fastmcp's /mcp endpoint no longer holds session_manager.asgi_app, an MCP SDK "
            f"RequestBodyLimitMiddleware with an int max_body_size ({WHERE}); found "
            f"{type(limiter).__name__}")
    return limiter


def set_max_body(app: Starlette, max_bytes: int) -> None:
    """Raise the MCP SDK's request body limit of this fastmcp app to ``max_bytes``, once its
    lifespan has created the session manager; the app refuses to start if that cannot be."""
    endpoint = mcp_endpoint(app)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(started: Starlette) -> AsyncIterator[Any]:
        async with inner(started) as state:
            body_limiter(endpoint).max_body_size = max_bytes
            yield state

    app.router.lifespan_context = lifespan
