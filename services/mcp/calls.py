"""What every tool does around its work: the call counted and timed, a ZapomniError turned
into a ToolError with its short message (retryable ones say so; anything else is masked by
fastmcp and logged with its type by services/mcp/arguments.Refusals), and the answer turned
into builtins. The tool modules import it; it imports none of them."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import msgspec
from fastmcp.exceptions import ToolError

from zapomni.shared import metrics
from zapomni.shared.protocol.errors import (
    InvalidInput,
    NotFound,
    Overloaded,
    Unavailable,
    ZapomniError,
)

OUTCOMES = ((Overloaded, "overloaded"), (Unavailable, "unavailable"),
            (InvalidInput, "invalid"), (NotFound, "not_found"), (ZapomniError, "error"))
REFUSAL_LOG = {"invalid": logging.INFO, "not_found": logging.INFO}  # else a warning


@contextlib.contextmanager
def tool_call(tool: str) -> Iterator[None]:
    """Count and time one tool call; ZapomniErrors become ToolErrors with their message."""
    started = time.perf_counter()
    outcome = "ok"
    try:
        yield
    except ZapomniError as exc:
        outcome = next(name for kind, name in OUTCOMES if isinstance(exc, kind))
        if outcome in ("overloaded", "unavailable"):
            if tool.startswith("add_"):
                metrics.REFUSALS.labels(outcome).inc()
            raise ToolError(f"temporarily unavailable: {exc.message}",
                            log_level=logging.WARNING) from None
        raise ToolError(exc.message, log_level=REFUSAL_LOG.get(outcome, logging.WARNING)
                        ) from None
    except Exception:
        outcome = "internal"  # logged with its type by Refusals (services/mcp/arguments.py)
        raise
    finally:
        metrics.TOOL_CALLS.labels(tool, outcome).inc()
        metrics.TOOL_SECONDS.labels(tool).observe(time.perf_counter() - started)


def plain(value: Any) -> Any:
    return msgspec.to_builtins(value)
