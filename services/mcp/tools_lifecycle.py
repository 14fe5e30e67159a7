"""The lifecycle tools: list_memories (what is stored, a page at a time). Expiry and the
write policy need no tool of their own: workers/expiry.py sweeps, services/mcp/front.py
applies the policy to every add."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP

from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import READ, tool_spec
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.answers import MemoryPage
from zapomni.shared.protocol.api import LIST_ORDERS, ListRequest
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.validation import check_namespace, convert, decode_filters


def decode_listing(namespace: Any, filters: Any, limit: Any, cursor: Any,
                   order: Any) -> ListRequest:
    if order not in LIST_ORDERS:
        raise InvalidInput("order: expected newest or oldest")
    request = convert({"namespace": check_namespace(namespace), "limit": limit,
                       "cursor": cursor, "order": order}, ListRequest)
    return ListRequest(namespace=request.namespace, filters=decode_filters(filters),
                       limit=request.limit, cursor=request.cursor, order=request.order)


def add_lifecycle_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(READ, MemoryPage))
    async def list_memories(namespace: str | None = None,
                            filters: dict[str, Any] | None = None, limit: int = 50,
                            cursor: str | None = None, order: str = "newest") -> dict[str, Any]:
        """The memories stored in a namespace, a page at a time: newest first (order
        "oldest": oldest first). Each has memory_id, first_line (at most 200 characters),
        tags, source, metadata, created_at, chunk_count and state ("ready", or "ingesting"
        with the task_id to follow). limit: 1-200 per page. next_cursor: pass it as cursor
        for the next page (null on the last); pages stay stable while memories are added.
        Expired memories and older versions of updated ones are left out, as in search.
        filters: as search_memory's ({"tags", "tags_all", "source", "source_prefix",
        "after", "before", "metadata", "include_superseded"})."""
        with tool_call("list_memories"):
            request = decode_listing(namespace, filters, limit, cursor, order)
            return plain(await live["front"].query.call("/v1/list", request, MemoryPage))
