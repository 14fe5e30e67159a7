"""Tool arguments the tool's signature refuses (and prompt arguments missing), told in our
words.

fastmcp checks a call's arguments against the tool's signature with pydantic before the tool
runs (strict: ``"10"`` is not an integer, ``"yes"`` not a boolean) and raises its own
``ValidationError`` carrying pydantic's. Left alone, the client reads pydantic's multi-line
text with its URL and version. ``ArgumentErrors`` catches that one exception in one place and
answers ``field: what is wrong; what to do`` instead. This is the only module that knows how
fastmcp and pydantic report bad arguments; tests/integration/test_fuzz.py fails if they change.
"""

from __future__ import annotations

import logging
from typing import Any

from fastmcp.exceptions import (
    DisabledError,
    FastMCPError,
    NotFoundError,
    PromptError,
    ToolError,
    ValidationError,
)
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from pydantic import ValidationError as PydanticError

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import shown
from zapomni.shared.protocol.validation import json_kind

log = logging.getLogger(__name__)

# pydantic's error types -> what the argument should have been
EXPECTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
            "bool_type": "true or false", "dict_type": "a JSON object", "list_type": "a list",
            "none_required": "null"}
SCHEMA_TYPES = {"string": "a string", "integer": "an integer", "number": "a number",
                "boolean": "true or false", "object": "a JSON object", "array": "a list",
                "null": "null"}


class Refusals(Middleware):
    """One log line per call that did not succeed, with the tool (or prompt) and the reason
    the caller read: a refusal at info, an internal error at error with its type (fastmcp's
    own report of it, without the reason, is dropped: shared/logs.py). A tool or prompt
    this server does not have is the caller's mistake: answered in our words and logged as
    a warning, without a traceback. Outermost, so that it sees the answer as worded."""

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        return await logged("tool", context, call_next)

    async def on_get_prompt(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        return await logged("prompt", context, call_next)


UNKNOWN = {"tool": ToolError, "prompt": PromptError}


async def logged(what: str, context: MiddlewareContext, call_next: CallNext) -> Any:
    try:
        return await call_next(context)
    except (NotFoundError, DisabledError):  # fastmcp found no such tool or prompt
        name = shown(context.message.name)
        log.warning("%s %s refused: no such %s", what, name, what)
        raise UNKNOWN[what](f"{what} {name}: this server has no such {what}; list the "
                            f"{what}s ({what}s/list) for their names") from None
    except FastMCPError as exc:
        cause = exc.__cause__  # fastmcp masks an exception of ours as "Error calling tool"
        if cause is not None and not isinstance(cause, FastMCPError):
            failed(what, context.message.name, cause)
        else:
            log.log(min(exc.log_level, logging.WARNING), "%s %s refused: %s", what,
                    context.message.name, exc)
        raise
    except Exception as exc:
        failed(what, context.message.name, exc)
        raise


def failed(what: str, name: str, exc: BaseException) -> None:
    log.error("%s %s failed: %s", what, name, type(exc).__name__, exc_info=exc)


class ArgumentErrors(Middleware):
    """Rewrites fastmcp's argument ValidationError into one short line (a ToolError)."""

    async def on_call_tool(self, context: MiddlewareContext, call_next: CallNext) -> ToolResult:
        try:
            return await call_next(context)
        except ValidationError as exc:
            tool = context.message.name
            schema = await tool_schema(context, tool)
            metrics.TOOL_CALLS.labels(tool, "invalid").inc()
            cause = exc.__cause__
            errors = cause.errors(include_url=False) if isinstance(cause, PydanticError) else []
            raise ToolError(describe_errors(errors, tool, schema), log_level=logging.INFO) from None

    async def on_get_prompt(self, context: MiddlewareContext, call_next: CallNext) -> Any:
        """A prompt's required argument missing: named here (fastmcp answers only "Error
        rendering prompt")."""
        server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
        prompt = await server.get_prompt(context.message.name) if server else None
        given = context.message.arguments or {}
        for argument in (prompt.arguments or []) if prompt else []:
            if argument.required and argument.name not in given:
                # the argument's description, before fastmcp's note on JSON values
                what = (argument.description or prompt.description or "").split("\n")[0]
                raise PromptError(f"{shown(argument.name)}: required but missing; send it as "
                                  f"a string ({what})",
                                  log_level=logging.INFO)
        return await call_next(context)


async def tool_schema(context: MiddlewareContext, tool: str) -> dict[str, Any]:
    """The tool's JSON schema for its arguments ({} if it cannot be found)."""
    server = context.fastmcp_context.fastmcp if context.fastmcp_context else None
    found = await server.get_tool(tool) if server else None
    return found.parameters if found else {}


# pydantic's tag for each member of a union argument (as_of: str | float) in an error's loc
UNION_MEMBERS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def union_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An argument of several types that is none of them fails once per type: one error
    for the argument, worded from its schema ("expected a string or a number")."""
    out, seen = [], set()
    for error in errors:
        loc = tuple(error.get("loc", ()))
        if len(loc) == 2 and loc[1] in UNION_MEMBERS:
            if loc[0] in seen:
                continue
            seen.add(loc[0])
            error = {**error, "loc": loc[:1], "type": "union"}
        out.append(error)
    return out


def describe_errors(errors: list[dict[str, Any]], tool: str, schema: dict[str, Any]) -> str:
    """The first problem as ``field: what is wrong; what to do``, and how many more."""
    errors = union_errors(errors)
    if not errors:
        return f"arguments: not valid for {tool}; see the tool's input schema"
    first = describe_one(errors[0], tool, schema)
    more = len(errors) - 1
    return first + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def describe_one(error: dict[str, Any], tool: str, schema: dict[str, Any]) -> str:
    loc = error.get("loc", ())
    field = path(loc)
    kind = error.get("type", "")
    properties = schema.get("properties", {})
    if kind == "unexpected_keyword_argument":
        return f"{field}: unknown argument; {tool} takes {', '.join(properties) or 'none'}"
    if kind in ("missing_argument", "missing"):
        wanted = expected_by_schema(properties.get(loc[0], {})) if loc else ""
        return f"{field}: required but missing; send {wanted or 'a value'}"
    wanted = EXPECTED.get(kind) or (expected_by_schema(properties.get(loc[0], {}))
                                    if len(loc) == 1 else "")
    got = json_kind(error.get("input"))
    if wanted:
        return f"{field}: expected {wanted}, got {got}"
    return f"{field}: not a valid value ({got}); see the tool's input schema"


def path(loc: tuple | list) -> str:
    """('memory_ids', 0) -> memory_ids[0]; names that are not plain words are quoted."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + shown(part)
    return text or "arguments"


def expected_by_schema(prop: dict[str, Any]) -> str:
    """'a string', 'an integer or null'... from a property of a JSON schema."""
    options = prop.get("anyOf") or [prop]
    kinds = [SCHEMA_TYPES[o["type"]] for o in options if o.get("type") in SCHEMA_TYPES]
    return " or ".join(kinds)
