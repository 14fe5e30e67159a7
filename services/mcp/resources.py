"""The memory as MCP resources, for clients that let their user attach context by URI:

    memory://{namespace}/stats        what get_stats answers
    memory://{namespace}/recent       the newest memories, one page of list_memories
    memory://{namespace}/{memory_id}  one memory, as get_memory answers

Templates for any namespace; the default namespace's stats and recent page are also listed
as plain resources. Each read is checked as the tools check their arguments
(shared/protocol/validation.py), forwarded to the query service, and answered as JSON. A bad
namespace or id is one line, as from a tool.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import msgspec
from fastmcp import FastMCP
from fastmcp.exceptions import ResourceError

from zapomni.services.mcp.front import Front, get_memory
from zapomni.shared.protocol.answers import MemoryPage, Stats
from zapomni.shared.protocol.api import ListRequest, MemoryRef, StatsRequest
from zapomni.shared.protocol.base import DEFAULT_NAMESPACE
from zapomni.shared.protocol.errors import Overloaded, Unavailable, ZapomniError
from zapomni.shared.protocol.validation import check_id, check_namespace

RECENT_PAGE = 20  # memories in memory://{namespace}/recent
JSON = "application/json"
_encode = msgspec.json.Encoder().encode


@contextlib.contextmanager
def resource_read() -> Iterator[None]:
    """A ZapomniError becomes a ResourceError with its short message (fastmcp passes it on
    and logs it at its level, no traceback for a client's mistake; anything else it
    masks)."""
    try:
        yield
    except (Overloaded, Unavailable) as exc:
        raise ResourceError(f"temporarily unavailable: {exc.message}",
                            log_level=logging.WARNING) from None
    except ZapomniError as exc:
        raise ResourceError(exc.message, log_level=logging.INFO) from None


async def read_stats(front: Front, namespace: str) -> str:
    with resource_read():
        request = StatsRequest(namespace=check_namespace(namespace))
        return _encode(await front.query.call("/v1/stats", request, Stats)).decode()


async def read_recent(front: Front, namespace: str) -> str:
    with resource_read():
        request = ListRequest(namespace=check_namespace(namespace), limit=RECENT_PAGE)
        return _encode(await front.query.call("/v1/list", request, MemoryPage)).decode()


async def read_memory(front: Front, namespace: str, memory_id: str) -> str:
    with resource_read():
        ref = MemoryRef(memory_id=check_id(memory_id, "memory_id"),
                        namespace=check_namespace(namespace))
        return _encode(await get_memory(front, ref)).decode()


PARTS = {"stats": read_stats, "recent": read_recent}


def add_resources(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.resource("memory://{namespace}/stats", name="namespace_stats", mime_type=JSON)
    async def namespace_stats(namespace: str) -> str:
        """Counts for a namespace: memories, chunks, entities, relations, queue and tasks."""
        return await read_stats(live["front"], namespace)

    @mcp.resource("memory://{namespace}/recent", name="recent_memories", mime_type=JSON)
    async def recent_memories(namespace: str) -> str:
        """The namespace's newest memories (one page of list_memories, newest first)."""
        return await read_recent(live["front"], namespace)

    @mcp.resource("memory://{namespace}/{memory_id}", name="memory", mime_type=JSON)
    async def memory(namespace: str, memory_id: str) -> str:
        """One memory: its full text, metadata, chunk count and status."""
        # memory://x/stats matches this template too: answer it as its own
        part = PARTS.get(memory_id)
        if part is not None:
            return await part(live["front"], namespace)
        return await read_memory(live["front"], namespace, memory_id)

    @mcp.resource(f"memory://{DEFAULT_NAMESPACE}/stats", name="default_stats",
                  mime_type=JSON)
    async def default_stats() -> str:
        """Counts for the default namespace."""
        return await read_stats(live["front"], DEFAULT_NAMESPACE)

    @mcp.resource(f"memory://{DEFAULT_NAMESPACE}/recent", name="default_recent",
                  mime_type=JSON)
    async def default_recent() -> str:
        """The default namespace's newest memories."""
        return await read_recent(live["front"], DEFAULT_NAMESPACE)
