"""The conversation tools: get_history (a thread's turns, paged) and build_context (the
context for the next answer within a token budget). Arguments are checked here
(shared/text/conversation.py); the query service reads (services/query/context.py)."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP

from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import READ, tool_spec
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.answers import Context, History
from zapomni.shared.text.conversation import decode_context, decode_history


def add_context_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(READ, History))
    async def get_history(thread: str, namespace: str | None = None, limit: int = 16,
                          before: str | None = None) -> dict[str, Any]:
        """The turns of a conversation: the memories added with metadata "thread" equal to
        thread (1-512 characters, exactly as added), oldest first and newest last. Returns
        {namespace, thread, turns: [{memory_id, text, metadata, created_at, memory_type,
        importance, truncated}], next_before}. limit: 1-100 (default 16), the newest turns
        before the cursor before; next_before (null when there are no older turns) is the
        cursor for the page before this one. A turn's text is cut after 10,000 characters
        (truncated: true; get_memory has it all). Turns still being ingested, expired ones
        and replaced versions are not shown."""
        with tool_call("get_history"):
            request = decode_history(thread, namespace, limit, before)
            return plain(await live["front"].query.call("/v1/history", request, History))

    @mcp.tool(**tool_spec(READ, Context))
    async def build_context(query: str, thread: str | None = None,
                            namespace: str | None = None, token_budget: int = 2000,
                            history_turns: int = 16, memories: int = 8,
                            filters: dict[str, Any] | None = None,
                            as_of: str | float | None = None,
                            show_ids: bool = False) -> dict[str, Any]:
        """The context for answering query (the current message, 1-2,000 characters), ready
        to paste into a prompt: the last history_turns (0-100, default 16) turns of thread,
        and the memories (0-50, default 8) that best match the query, leaving out turns
        already in the history. It all fits in token_budget (100-100,000, default 2,000)
        tokens of all-MiniLM-L6-v2's tokenizer (bert-base-uncased WordPiece; named in
        metadata.tokenizer). The query is always kept; over the budget the oldest turns
        are left out first, then the lowest-ranked memories (truncated: true); a query
        longer than the budget is refused. Returns {history: [turns, oldest first],
        memories: [{memory_id, text (the passage that matched), score, why, metadata,
        created_at, memory_type, and while it is still ingesting status and parts, as in
        search_memory}], latest_message, metadata: {history_count, memory_count,
        total_tokens, truncated, tokenizer, token_budget}, prompt}. prompt has a section of
        relevant memories (each labelled with the day it happened, its memory_type if it has
        one and "outdated" when a newer statement of the same thing was found; show_ids: true
        adds each memory's id and the newer one's, ~30 tokens each), one of the recent
        conversation and the current message; total_tokens counts it as returned. A memory
        too long for what is left of the budget is passed over for the next that fits.
        filters: as search_memory's, for the memories (the history is the thread's)."""
        with tool_call("build_context"):
            request = decode_context(query, thread, namespace, token_budget, history_turns,
                                     memories, filters, as_of, show_ids)
            return plain(await live["front"].query.call("/v1/context", request, Context))
