"""The front's HTTP app: fastmcp's streamable HTTP app, with a request body limit that fits
the largest memory add_memory accepts (the MCP SDK's 4 MiB is raised: why and how in
services/mcp/fastmcp_internals.py), and a limit on the MCP requests it serves at once."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from zapomni.services.mcp.fastmcp_internals import set_max_body
from zapomni.services.mcp.server import build_server
from zapomni.shared import metrics
from zapomni.shared.protocol.validation import MAX_TEXT_CHARS
from zapomni.shared.settings import Settings

# 4 bytes per character is the most UTF-8 needs; 1 MiB more for metadata and the envelope
MAX_REQUEST_BYTES = 4 * MAX_TEXT_CHARS + 2**20
# MCP requests served at once; past it a request is refused at once, retryable, before its
# body is read. Measured (docs/benchmarks.md, "Front and query embedding"): the front
# answers ~30 searches/s on 2 cores whatever the clients, so 64 in flight already wait ~2 s
# each (p95 2.1 s at 50 clients) and more only wait longer, toward the 10 s after which
# the front gives up on the query service itself; and every one may hold a body of up to
# MAX_REQUEST_BYTES
MAX_IN_FLIGHT = 64
RETRY_AFTER_S = 1


def http_app(settings: Settings, max_in_flight: int = MAX_IN_FLIGHT) -> Starlette:
    app = build_server(settings).http_app(
        middleware=[Middleware(InFlightLimit, limit=max_in_flight)])
    set_max_body(app, MAX_REQUEST_BYTES)
    return app


class InFlightLimit:
    """At most ``limit`` MCP requests (POSTs) at once. Past it the answer is HTTP 503 with
    Retry-After and a JSON-RPC error, which MCP clients show as the call's error: "temporarily
    unavailable: ..." like every retryable refusal. The event stream (GET), health checks
    and /metrics are never refused."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            metrics.REFUSALS.labels("busy").inc()
            await refuse(send, self.limit)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def refuse(send: Send, limit: int) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": (
        f"temporarily unavailable: the server is answering {limit} requests at once, its "
        f"limit; nothing was done. Retry in {RETRY_AFTER_S} second")}}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"retry-after", str(RETRY_AFTER_S).encode()),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
