"""The errors Zapomni raises, one small tree.

    ZapomniError
      InvalidInput            bad tool/API input; the message names the field and the limit.
                              Nothing is enqueued or stored.
      NotFound                an unknown memory or task id.
      Overloaded              the queue is full; retryable, the message says when.
      Unavailable             Redis, FalkorDB or the query service cannot be reached; retryable.
      EmbeddingError
        EmbeddingUnavailable  connect error / timeout / 5xx from the embedder: jobs retry.
        EmbeddingRejected     4xx, missing model, wrong dimension: the task fails and says why.
      StoreError              FalkorDB refused a query or holds data we cannot use.

Library exceptions are translated where the library is called (``raise X(...) from exc``).
Messages are written for the person reading them: short, no paths, no stack traces, and where
there is something to do, they say it.
"""

from __future__ import annotations

import json
import re
from typing import Any

PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# the JSON-RPC error code of the front's HTTP 401 (services/mcp/http.py): a token missing or
# not accepted, told apart by clients (the CLI says which flag to pass) from other errors
UNAUTHORIZED_CODE = -32003


class ZapomniError(Exception):
    """Base of every error Zapomni raises on purpose."""

    kind = "error"

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.kind


class InvalidInput(ZapomniError):
    kind = "invalid_input"


class NotFound(ZapomniError):
    kind = "not_found"


class Overloaded(ZapomniError):
    kind = "overloaded"


class Unavailable(ZapomniError):
    kind = "unavailable"


class EmbeddingError(ZapomniError):
    kind = "embedding_error"


class EmbeddingUnavailable(EmbeddingError):
    kind = "embedding_unavailable"


class EmbeddingRejected(EmbeddingError):
    kind = "embedding_rejected"


class StoreError(ZapomniError):
    kind = "store_error"


ERROR_KINDS: dict[str, type[ZapomniError]] = {
    cls.kind: cls for cls in (ZapomniError, InvalidInput, NotFound, Overloaded, Unavailable,
                              EmbeddingError, EmbeddingUnavailable, EmbeddingRejected, StoreError)
}


def shown(name: Any) -> str:
    """A caller's key for an error message: plain words as they are, anything else quoted
    with escapes (one line, at most 40 characters of it)."""
    name = str(name)
    if PLAIN_NAME.fullmatch(name):
        return name
    return json.dumps(name[:40]) + ("..." if len(name) > 40 else "")
