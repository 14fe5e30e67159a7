"""Where the front checks each call against the caller's token (shared/protocol/scopes.py): who the
caller is (``Verifier``: the shared token, the scoped tokens, JWTs) and what it may touch
(``ScopeCheck``: one middleware before every tool, resource and prompt runs).

A call's namespace is its ``namespace`` argument (the default namespace when left out), a
resource's the first part of its URI (``memory://{namespace}/...``), and for the tools that
take a task id (graph_status, cancel_task) the namespace of the task's record: a task outside
the scope is answered exactly as an unknown one. A tool that writes (its ``readOnlyHint`` is
not true) needs a token that may write. A tool that has neither a namespace nor a task id is
refused to a scoped token, so a new tool is closed until it is placed here.

Without auth (loopback, stdio) every call is in scope: one user, the machine's.
"""

from __future__ import annotations

import logging
from typing import Any

from fastmcp.exceptions import PromptError, ResourceError, ToolError
from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.server.dependencies import get_access_token
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from zapomni.services.mcp.front import Front, redis_call, unknown_task
from zapomni.shared import metrics
from zapomni.shared.protocol.errors import InvalidInput, ZapomniError
from zapomni.shared.protocol.scopes import (
    EVERYTHING,
    NOTHING,
    Scope,
    claims_of,
    entries_of,
    parse_tokens,
    read_only,
    refusal,
    scope_of,
    token_key,
)
from zapomni.shared.protocol.validation import check_namespace, check_task_id
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks

TASK_TOOLS = {"graph_status", "cancel_task"}  # the task record's namespace decides
RESOURCE_SCHEME = "memory://"


class Verifier(TokenVerifier):
    """The shared token (every namespace, writes), the scoped tokens, then JWTs, in that
    order; each token's scope travels as claims (``zapomni_namespaces``, ``zapomni_write``)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.scopes = parse_tokens(settings.mcp_tokens)
        if settings.mcp_token:
            self.scopes[token_key(settings.mcp_token)] = EVERYTHING
        self.jwt = JWTVerifier(public_key=settings.mcp_jwt_public_key or None,
                               jwks_uri=settings.mcp_jwt_jwks_uri or None,
                               issuer=settings.mcp_jwt_issuer,
                               audience=settings.mcp_jwt_audience) if settings.mcp_jwt else None

    async def verify_token(self, token: str) -> AccessToken | None:
        scope = self.scopes.get(token_key(token))
        if scope is not None:
            return AccessToken(token=token, client_id="zapomni", scopes=[],
                               claims=claims_of(entries_of(scope), scope.write))
        return await self.jwt.verify_token(token) if self.jwt is not None else None


def check_auth(settings: Settings) -> TokenVerifier | None:
    """The front's verifier, or None when it needs none (loopback only: ``check_mcp_bind``
    refuses any other address without a token, and JWTs without issuer and audience)."""
    settings.check_mcp_bind()
    if settings.mcp_jwt or settings.mcp_token or settings.mcp_tokens:
        return Verifier(settings)
    return None


class ScopeCheck(Middleware):
    """Refuses, before it runs, every call its token does not cover. ``auth``: whether the
    server checks tokens at all (without, every call is in scope)."""

    def __init__(self, live: dict[str, Front], *, auth: bool) -> None:
        self.live = live
        self.auth = auth

    def scope(self) -> Scope:
        if not self.auth:
            return EVERYTHING
        token = get_access_token()
        return scope_of(token.claims) if token is not None else NOTHING

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> ToolResult:
        scope = self.scope()
        if not scope.everything:
            try:
                await self.check_tool(scope, context)
            except ZapomniError as exc:
                metrics.TOOL_CALLS.labels(context.message.name, "refused").inc()
                raise ToolError(exc.message, log_level=logging.INFO) from None
        return await call_next(context)

    async def check_tool(self, scope: Scope, context: MiddlewareContext) -> None:
        name = context.message.name
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        tool = await server.get_tool(name) if server is not None else None
        if tool is None:
            return  # fastmcp answers an unknown tool
        arguments = context.message.arguments or {}
        writes = not (tool.annotations is not None and tool.annotations.read_only_hint)
        if "namespace" in tool.parameters.get("properties", {}):
            if writes and not scope.write:
                raise InvalidInput(read_only("namespace", name))
            namespace = arguments.get("namespace")
            if namespace is None or isinstance(namespace, str):  # else: its type is refused
                covered(scope, check_namespace(namespace))
        elif name in TASK_TOOLS:
            if writes and not scope.write:
                raise InvalidInput(read_only("task_id", name))
            await self.check_task(scope, arguments.get("task_id"))
        else:
            raise InvalidInput(f"{name}: not open to a token scoped to namespaces; use the "
                               "shared token (ZAPOMNI_MCP_TOKEN)")

    async def check_task(self, scope: Scope, task_id: Any) -> None:
        """A task outside the scope is an unknown task (a malformed id is left to the tool,
        which refuses it)."""
        try:
            task_id = check_task_id(task_id)
        except InvalidInput:
            return
        front = self.live["front"]
        record = await redis_call(front, tasks.get_task(front.redis, task_id))
        if record is not None and not scope.covers(record.namespace):
            raise unknown_task(front, task_id)

    async def check_resource_access(self, context: MiddlewareContext) -> None:
        scope = self.scope()
        if scope.everything:
            return
        uri = str(context.message.uri)
        namespace = uri.removeprefix(RESOURCE_SCHEME).split("/", 1)[0]
        try:
            if not uri.startswith(RESOURCE_SCHEME):
                raise InvalidInput("uri: not a memory:// resource")
            covered(scope, check_namespace(namespace))
        except InvalidInput as exc:
            raise ResourceError(exc.message, log_level=logging.INFO) from None

    async def on_list_resources(self, context: MiddlewareContext, call_next: CallNext):
        """The listed resources (the default namespace's) only where the token covers it."""
        listed = await call_next(context)
        scope = self.scope()
        return [r for r in listed if scope.covers(
            str(r.uri).removeprefix(RESOURCE_SCHEME).split("/", 1)[0])]

    async def on_get_prompt(self, context: MiddlewareContext, call_next: CallNext):
        scope = self.scope()
        namespace = (context.message.arguments or {}).get("namespace")
        if not scope.everything and (namespace is None or isinstance(namespace, str)):
            try:
                covered(scope, check_namespace(namespace))
            except InvalidInput as exc:
                raise PromptError(exc.message, log_level=logging.INFO) from None
        return await call_next(context)


def covered(scope: Scope, namespace: str) -> None:
    if not scope.covers(namespace):
        raise InvalidInput(refusal(namespace))
