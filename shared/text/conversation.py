"""Conversations: a thread's turns page by page (get_history) and the context for the next
answer within a token budget (build_context). Here: their tool arguments decoded and checked
at the front (nothing invalid reaches the query service), the history cursor, and the
tokenizer a context is counted with.

The tokenizer is the one the in-process model ships with (shared/embedding/models/minilm): the
WordPiece of all-MiniLM-L6-v2, bert-base-uncased's vocabulary. Other models count somewhat
differently (roughly 1.0-1.3 of these tokens per word of English prose); the budget is kept in
these tokens, and the answer names them.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from zapomni.shared.protocol.api import ContextRequest, HistoryRequest
from zapomni.shared.protocol.base import MemoryId
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.times import point_in_time
from zapomni.shared.protocol.validation import (
    check_namespace,
    convert,
    decode_filters,
    json_kind,
    utf8,
)

MAX_CURSOR_CHARS = 200
_encode = msgspec.json.Encoder().encode
_decode_cursor = msgspec.json.Decoder(tuple[int, int, MemoryId]).decode


def encode_cursor(occurred_us: int, created_us: int, memory_id: str) -> str:
    """get_history's ``next_before``: where the page ended (the oldest turn it holds: its
    occurred_at and created_at in whole microseconds, and its id)."""
    return base64.urlsafe_b64encode(_encode([occurred_us, created_us, memory_id])).decode() \
        .rstrip("=")


def decode_cursor(value: Any, field: str = "before") -> tuple[int, int, str]:
    """A cursor from encode_cursor -> (occurred_us, created_us, memory id); anything else is
    refused."""
    wrong = InvalidInput(f"{field}: not a cursor from get_history; pass the next_before of an "
                         "earlier answer as it is, or leave it out for the newest turns")
    if not isinstance(value, str) or not 0 < len(value) <= MAX_CURSOR_CHARS:
        raise wrong
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        return _decode_cursor(raw)
    except (ValueError, msgspec.DecodeError):  # binascii.Error and bad text are ValueErrors
        raise wrong from None


def check_thread(thread: Any, field: str = "thread") -> str:
    """A thread as add_memory's metadata names it: the exact string, 1-512 characters."""
    if not isinstance(thread, str) or not 0 < len(thread) <= 512:
        shown = f"{len(thread):,} characters" if isinstance(thread, str) else json_kind(thread)
        raise InvalidInput(f"{field}: expected a string of 1-512 characters (the metadata "
                           f"\"thread\" the turns were added with), got {shown}")
    utf8(thread, field)
    return thread

def decode_history(thread: Any, namespace: Any, limit: Any, before: Any) -> HistoryRequest:
    """get_history's arguments -> HistoryRequest."""
    at, added, memory_id = (None, 0, "") if before is None else decode_cursor(before)
    return convert({"thread": check_thread(thread), "namespace": check_namespace(namespace),
                    "limit": 16 if limit is None else limit, "before_us": at,
                    "before_cu": added, "before_id": memory_id}, HistoryRequest)


def decode_context(query: Any, thread: Any, namespace: Any, token_budget: Any,
                   history_turns: Any, memories: Any, filters: Any = None,
                   as_of: Any = None, show_ids: Any = None) -> ContextRequest:
    """build_context's arguments -> ContextRequest (the query stripped, as search's is)."""
    if isinstance(query, str):
        query = query.strip()
        if not query:
            raise InvalidInput("query: must not be empty or only whitespace")
        utf8(query, "query")  # its length (1-2,000) is the Struct's to check
    data = {"query": query, "namespace": check_namespace(namespace),
            "thread": None if thread is None else check_thread(thread),
            "as_of": None if as_of is None else point_in_time(as_of, "as_of")}
    for name, value in (("token_budget", token_budget), ("history_turns", history_turns),
                        ("memories", memories), ("show_ids", show_ids)):
        if value is not None:
            data[name] = value
    return msgspec.structs.replace(convert(data, ContextRequest),
                                   filters=decode_filters(filters))
