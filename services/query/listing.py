"""list_memories: a namespace's memories a page at a time, newest (or oldest) first by
event time (occurred_at: when what it says happened; ties by when it was added). Read-only.

Pages are cut by keyset, not offset: the cursor names the last memory of the page before
(its event time and creation time in microseconds and its id), and the next page starts
after it. A memory deleted meanwhile leaves no gap and no repeat; one added meanwhile shows
on a later page if its event time falls there. The cursor is opaque to callers: base64 of
the order and that position.

FalkorDB sorts every memory a query matches, so a page is read from a window of event times
next to where it starts (the occurred_at index), a minute wide and eight times wider each
time it holds less than a page; past ~30 years (nine tries), or with filters (which may
match few), the whole namespace is read. Either way FalkorDB returns one page.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from typing import Any

import msgspec
from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.search import filter_params
from zapomni.shared.protocol.answers import ListedMemory, MemoryPage
from zapomni.shared.protocol.api import ListRequest
from zapomni.shared.protocol.base import MEMORY_ID_PATTERN
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.times import iso_time
from zapomni.shared.store import cypher_lists
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run

FIRST_LINE_CHARS = 200  # a listed memory's first line, at most (cut with an ellipsis)
HEAD_CHARS = 256  # text read per listed memory: more than a first line can show
FIRST_WINDOW = 60.0  # seconds of creation times the first try reads
WIDEN = 8  # each further try reads a window this many times wider
MAX_WINDOW = 2e9  # seconds: a window this wide is every memory; read them all instead
SLACK_US = 2  # a window's edge at the cursor, widened by this many microseconds
PAST_ALL = 2**62  # the first page's key: past every memory (microseconds; |years 1-9999| < it)
NO_END = 1e300  # a window open at one end
BAD_CURSOR = ("cursor: not a cursor list_memories returned for this order; pass next_cursor "
              "as it came, or leave cursor out to start from the first page")
_decode_json = msgspec.json.Decoder().decode
# order's initial, event time and creation time in microseconds, memory id
_Position = tuple[str, int, int, str]


def write_cursor(order: str, micros: int, added: int, memory_id: str) -> str:
    raw = msgspec.json.encode([order[0], micros, added, memory_id])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_cursor(cursor: str, order: str) -> tuple[int, int, str]:
    """(event microseconds, creation microseconds, memory id) of a cursor from
    ``write_cursor`` in the same order; InvalidInput for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        initial, micros, added, memory_id = msgspec.json.decode(raw, type=_Position)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidInput(BAD_CURSOR) from None
    if initial != order[0] or not re.fullmatch(MEMORY_ID_PATTERN, memory_id) \
            or not -PAST_ALL < micros < PAST_ALL or not 0 <= added < 2**53:
        raise InvalidInput(BAD_CURSOR)
    return micros, added, memory_id


def first_line(head: str) -> str:
    line = head.partition("\n")[0].rstrip("\r")
    return line if len(line) <= FIRST_LINE_CHARS else line[:FIRST_LINE_CHARS - 1] + "…"


async def list_memories(store: GraphStore, request: ListRequest) -> MemoryPage:
    position = read_cursor(request.cursor, request.order) if request.cursor else None
    empty = MemoryPage(namespace=request.namespace, memories=[])
    if not await namespace_exists(store, request.namespace):
        return empty
    newest = request.order == "newest"
    micros, added, memory_id = position or ((PAST_ALL, PAST_ALL, "") if newest
                                            else (-PAST_ALL, -1, ""))
    # filter_params reads only the request's filters
    params: dict[str, Any] = {**filter_params(request), "limit": request.limit + 1,
                              "head": HEAD_CHARS, "us": micros, "cu": added, "id": memory_id}
    rows = await read_rows(store.graph(request.namespace), request, params)
    page = rows[:request.limit]
    more = len(rows) > request.limit
    return msgspec.structs.replace(
        empty, memories=[shape(row) for row in page],
        next_cursor=write_cursor(request.order, int(page[-1][1]), int(page[-1][2]),
                                 page[-1][0]) if more else None)


async def read_rows(graph: AsyncGraph, request: ListRequest,
                    params: dict[str, Any]) -> list[list[Any]]:
    """A page and one row more (when there is one): from windows of creation times next to
    where the page starts, widened until one holds it, else from every memory."""
    newest = request.order == "newest"
    whole = cypher_lists.LIST_NEWEST_ALL if newest else cypher_lists.LIST_OLDEST_ALL
    if request.filters.active or (not newest and request.cursor is None):
        return await run(graph, whole, params, read_only=True)  # no place to start from
    start = time.time() if request.cursor is None else params["us"] / 1e6
    edge = NO_END if request.cursor is None else (params["us"] + SLACK_US) / 1e6
    width = FIRST_WINDOW
    while width < MAX_WINDOW:
        if newest:
            lo, hi, query = start - width, edge, cypher_lists.LIST_NEWEST_IN
        else:
            lo, hi = (params["us"] - SLACK_US) / 1e6, start + width
            query = cypher_lists.LIST_OLDEST_IN
        rows = await run(graph, query, {**params, "lo": lo, "hi": hi}, read_only=True)
        if len(rows) == params["limit"] and inside(int(rows[-2][1]), lo, hi, newest):
            return rows
        width *= WIDEN
    return await run(graph, whole, params, read_only=True)


def inside(micros: int, lo: float, hi: float, newest: bool) -> bool:
    """Whether a page's last row is clear of the window's far edge: every memory beyond it
    then comes after the whole page (a microsecond of slack for the float's rounding)."""
    return micros > int(lo * 1e6) + 1 if newest else micros < int(hi * 1e6) - 1


def shape(row: list[Any]) -> ListedMemory:
    memory_id, _, _, head, tags, source, metadata, created, chunks, ready, task_id, \
        occurred = row
    return ListedMemory(
        memory_id=memory_id, first_line=first_line(head or ""), tags=list(tags or []),
        source=source or "", metadata=_decode_json(metadata or "{}"),
        created_at=iso_time(created), occurred_at=iso_time(occurred),
        chunk_count=int(chunks or 0),
        state="ready" if ready else "ingesting",
        task_id=None if ready or not task_id else task_id)
