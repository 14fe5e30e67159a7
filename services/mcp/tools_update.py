"""The update_memory tool (services/mcp/update.py does the work)."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP

from zapomni.services.mcp import update
from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import DESTRUCTIVE, tool_spec
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import UpdateReceipt
from zapomni.shared.protocol.validation import decode_update


def add_update_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(DESTRUCTIVE, UpdateReceipt))
    async def update_memory(memory_id: str, text: str | None = None,
                            metadata: dict[str, Any] | None = None,
                            namespace: str | None = None) -> dict[str, Any]:
        """Change a stored memory; give text, metadata or both.
        metadata only: queued, then changed in place by a worker after the jobs queued
        before it (the memory keeps its id); each key given replaces
        that key, a key set to null removes it, tags and source included; the result is
        checked as add_memory checks metadata (64 KB as JSON, 16 levels, 100 tags); the
        thread cannot change. A new text (1 to 10,000,000 characters): stored as a new
        version with the old metadata (patched by metadata), a new memory_id; the old
        version stays searchable until the new one is, then search leaves it out
        (filters include_superseded: true shows it) and get_memory lists the versions. In a
        thread the new version is the newest turn. Returns {memory_id, task_id, status,
        supersedes (a new text: the old id)}; graph_status(task_id) says when it is done.
        status "unchanged" (task_id null): nothing differed. duplicate: true: the new text
        is stored already as that memory_id; no version was made. Refused, retryable, while
        another task writes, updates or deletes the memory, or writes a new version of
        it (then update that version once it is done)."""
        with tool_call("update_memory"):
            request = decode_update(memory_id, text, metadata, namespace)
            return plain(await update.update_memory(live["front"], request))
