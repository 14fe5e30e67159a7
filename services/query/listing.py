"""list_memories: a namespace's memories a page at a time, newest (or oldest) first.
Read-only.

Pages are cut by keyset, not offset: the cursor names the last memory of the page before
(its creation time in microseconds and its id), and the next page starts after it. A memory
added meanwhile is created later, so newest-first pages after the first never shift; a
memory deleted meanwhile leaves no gap and no repeat. The cursor is opaque to callers:
base64 of the order and that position.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec

from services.query.search import filter_params, iso_time
from shared import cypher
from shared.errors import InvalidInput
from shared.graphstore import GraphStore, namespace_exists, run
from shared.messages import MEMORY_ID_PATTERN, ListedMemory, ListRequest, MemoryPage

FIRST_LINE_CHARS = 200  # a listed memory's first line, at most (cut with an ellipsis)
HEAD_CHARS = 256  # text read per listed memory: more than a first line can show
BOUND_SLACK_US = 2  # the index bound around the cursor's time, in microseconds
BAD_CURSOR = ("cursor: not a cursor list_memories returned for this order; pass next_cursor "
              "as it came, or leave cursor out to start from the first page")
_decode_json = msgspec.json.Decoder().decode
_Position = tuple[str, int, str]  # order's initial, microseconds, memory id


def write_cursor(order: str, micros: int, memory_id: str) -> str:
    raw = msgspec.json.encode([order[0], micros, memory_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_cursor(cursor: str, order: str) -> tuple[int, str]:
    """(microseconds, memory id) of a cursor from ``write_cursor`` in the same order;
    InvalidInput for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        initial, micros, memory_id = msgspec.json.decode(raw, type=_Position)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidInput(BAD_CURSOR) from None
    if initial != order[0] or not re.fullmatch(MEMORY_ID_PATTERN, memory_id) \
            or not 0 <= micros < 2**53:
        raise InvalidInput(BAD_CURSOR)
    return micros, memory_id


def first_line(head: str) -> str:
    line = head.partition("\n")[0].rstrip("\r")
    return line if len(line) <= FIRST_LINE_CHARS else line[:FIRST_LINE_CHARS - 1] + "…"


async def list_memories(store: GraphStore, request: ListRequest) -> MemoryPage:
    position = read_cursor(request.cursor, request.order) if request.cursor else None
    empty = MemoryPage(namespace=request.namespace, memories=[])
    if not await namespace_exists(store, request.namespace):
        return empty
    # filter_params reads only the request's filters
    params: dict[str, Any] = {**filter_params(request), "limit": request.limit + 1,
                              "head": HEAD_CHARS}
    newest = request.order == "newest"
    if position is None:
        query = cypher.LIST_NEWEST if newest else cypher.LIST_OLDEST
    else:
        query = cypher.LIST_NEWEST_FROM if newest else cypher.LIST_OLDEST_FROM
        micros, memory_id = position
        slack = BOUND_SLACK_US if newest else -BOUND_SLACK_US
        params |= {"us": micros, "id": memory_id, "bound": (micros + slack) / 1_000_000}
    rows = await run(store.graph(request.namespace), query, params, read_only=True)
    page = rows[:request.limit]
    more = len(rows) > request.limit
    return msgspec.structs.replace(
        empty, memories=[shape(row) for row in page],
        next_cursor=write_cursor(request.order, int(page[-1][1]), page[-1][0]) if more
        else None)


def shape(row: list[Any]) -> ListedMemory:
    memory_id, _, head, tags, source, metadata, created, chunks, ready, task_id = row
    return ListedMemory(
        memory_id=memory_id, first_line=first_line(head or ""), tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created), chunk_count=int(chunks or 0),
        state="ready" if ready else "ingesting",
        task_id=None if ready or not task_id else task_id)
