"""The front's HTTP app: fastmcp's streamable HTTP app, with a request body limit that fits
the largest memory add_memory accepts (the MCP SDK's 4 MiB is raised: why and how in
services/mcp/fastmcp_internals.py), a limit on the MCP requests it serves at once, and, with
a token configured, every request without one the server accepts refused in one line that
says what to send."""

from __future__ import annotations

import json
import logging

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from zapomni.services.mcp.fastmcp_internals import set_max_body
from zapomni.services.mcp.server import build_server
from zapomni.shared import metrics
from zapomni.shared.protocol.errors import UNAUTHORIZED_CODE
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
log = logging.getLogger(__name__)
# answered without a token: liveness and readiness (probes), and OAuth discovery, which
# finds none here (a client that looks for it must read "not found", not a challenge)
PUBLIC_PATHS = ("/healthz", "/readyz", "/.well-known/")


def http_app(settings: Settings, max_in_flight: int = MAX_IN_FLIGHT) -> Starlette:
    server = build_server(settings)
    limits = [Middleware(InFlightLimit, limit=max_in_flight)]
    if server.auth is not None:
        limits.insert(0, Middleware(TokenCheck, accepted=accepted_tokens(settings)))
    app = server.http_app(middleware=limits)
    set_max_body(app, MAX_REQUEST_BYTES)
    return app


def accepted_tokens(settings: Settings) -> str:
    """The tokens this front takes, by the setting that holds each (never their values)."""
    kinds = [name for name, on in (
        ("the shared token (ZAPOMNI_MCP_TOKEN)", settings.mcp_token),
        ("a scoped token (ZAPOMNI_MCP_TOKENS)", settings.mcp_tokens),
        ("an unexpired JWT of the identity provider (ZAPOMNI_MCP_JWT_ISSUER) for this "
         "server's audience (ZAPOMNI_MCP_JWT_AUDIENCE)", settings.mcp_jwt)) if on]
    return " or ".join(kinds)


class TokenCheck:
    """With auth on, every request outside PUBLIC_PATHS needs a bearer token the verifier
    accepted. fastmcp's authentication middleware, outside this one, has already checked it
    (``scope["user"]``); a request it did not authenticate is refused here with HTTP 401, a
    WWW-Authenticate challenge (RFC 6750: an ``error`` only when a bearer token was sent)
    and, as the body, a JSON-RPC error, which MCP clients show as the error itself: one
    line saying what was wrong and which token to send. (fastmcp's own refusal has an
    empty body for a missing token, which clients show as "Server returned an error
    response", and for a wrong one advice to re-register an OAuth client, which a token of
    ours has none of.) Without a ``user`` in the scope (the middleware order changed),
    every request is refused."""

    def __init__(self, app: ASGIApp, accepted: str) -> None:
        self.app = app
        self.accepted = accepted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if scope["type"] != "http" or scope["path"].startswith(PUBLIC_PATHS) or \
                getattr(user, "is_authenticated", False):
            await self.app(scope, receive, send)
            return
        sent = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if not sent:
            error, reason = "", "needs a bearer token"
        elif sent[:7].lower() != "bearer ":
            error, reason = "", "found no bearer token in the Authorization header"
        else:
            error, reason = "invalid_token", "does not accept the bearer token sent"
        log.info("%s %s refused: the server %s", scope["method"], scope["path"], reason)
        await unauthorized(send, error, reason, self.accepted)


async def unauthorized(send: Send, error: str, reason: str, accepted: str) -> None:
    """HTTP 401: the challenge (with ``error`` when a bearer token was sent) and one line
    as a JSON-RPC error, whose data says the same in parts for a client to word its own
    way (the CLI names its --token)."""
    message = (f"unauthorized: this server {reason}; send the header 'Authorization: Bearer "
               f"TOKEN' with {accepted}")
    challenge = 'Bearer realm="zapomni"' + (
        f', error="{error}", error_description="{message}"' if error else "")
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": UNAUTHORIZED_CODE, "message": message,
        "data": {"reason": reason, "accepted": accepted}}}).encode()
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"www-authenticate", challenge.encode()),
        (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


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
