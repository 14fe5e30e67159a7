"""The MCP tools. Each one validates at the edge, calls the front, and shapes the answer.

Errors: arguments the signatures refuse are worded by services/mcp/arguments.py; a
ZapomniError becomes a ToolError with its short message (retryable ones say so); anything
else is masked by fastmcp (``mask_error_details``) and logged (services/mcp/calls.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastmcp import Context, FastMCP
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from zapomni.services.mcp import front as ops
from zapomni.services.mcp.arguments import ArgumentErrors, Refusals
from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import (
    ADD,
    DESTRUCTIVE,
    READ,
    batch_progress,
    batch_spec,
    tool_spec,
)
from zapomni.services.mcp.front import Front
from zapomni.services.mcp.prompts import add_prompts
from zapomni.services.mcp.resources import add_resources
from zapomni.services.mcp.scope import ScopeCheck, check_auth
from zapomni.services.mcp.task_status import shape_task
from zapomni.services.mcp.tools_context import add_context_tools
from zapomni.services.mcp.tools_files import add_files_tools
from zapomni.services.mcp.tools_lifecycle import add_lifecycle_tools
from zapomni.services.mcp.tools_moves import add_moves_tools
from zapomni.services.mcp.tools_update import add_update_tools
from zapomni.shared.protocol.answers import (
    EntityDetail,
    EntityList,
    MemoryRecord,
    Refused,
    SearchResponse,
    Stats,
)
from zapomni.shared.protocol.api import (
    AddReceipt,
    BuildGraph,
    DeleteReceipt,
    EntityRef,
    EntitySearch,
    MemoryRef,
    StatsRequest,
    TaskReceipt,
)
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.task_records import TaskStatus
from zapomni.shared.protocol.validation import (
    MAX_BATCH_ITEMS,
    MAX_TEXT_CHARS,
    check_id,
    check_namespace,
    check_task_id,
    convert,
    decode_add_memory,
    decode_search,
)
from zapomni.shared.settings import Settings
from zapomni.shared.text.entities import ENTITY_TYPES

INSTRUCTIONS = """Zapomni is a long-term memory. add_memory stores text (it is chunked, embedded
and indexed in the background: poll graph_status(task_id) until state is "done");
search_memory finds the passages that answer a question. Named things (people, places,
organisations...) are extracted into a knowledge graph: search_entities and get_entity read
it, build_graph (re)builds it. Namespaces keep memories apart."""


def build_server(settings: Settings, *, auth: bool = True) -> FastMCP:
    live: dict[str, Front] = {}  # the Front lives as long as the server's lifespan

    @contextlib.asynccontextmanager
    async def lifespan(server: FastMCP) -> AsyncIterator[dict]:
        live["front"] = Front(settings)
        try:
            yield {}
        finally:
            await live.pop("front").aclose()

    verifier = check_auth(settings) if auth else None
    # strict: "10" is no integer and "yes" no boolean; ArgumentErrors words the refusal.
    # ScopeCheck refuses what the caller's token does not cover, before anything runs
    mcp = FastMCP("zapomni", instructions=INSTRUCTIONS, lifespan=lifespan, auth=verifier,
                  mask_error_details=True, strict_input_validation=True,
                  middleware=[Refusals(), ScopeCheck(live, auth=verifier is not None),
                              ArgumentErrors()])
    add_tools(mcp, live)
    add_graph_tools(mcp, live)
    add_update_tools(mcp, live)
    add_lifecycle_tools(mcp, live)
    add_moves_tools(mcp, live)
    add_context_tools(mcp, live)
    add_files_tools(mcp, live)
    add_resources(mcp, live)
    add_prompts(mcp)
    add_routes(mcp, live)
    return mcp


def add_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(ADD, AddReceipt, Refused))
    async def add_memory(text: str, metadata: dict[str, Any] | None = None,
                         namespace: str | None = None) -> dict[str, Any]:
        """Remember a text (1 to 10,000,000 characters). Returns at once with memory_id and
        task_id; the text becomes searchable when graph_status(task_id) says "done" (a large
        text part by part before that: its results say status "ingesting").
        metadata: optional JSON object; "tags" (list of strings) and "source" (string) are
        filterable in search_memory; "thread" (string) marks the turns of one conversation,
        added in order: search then reads each turn with its neighbours. Adding the same
        text again is a no-op (duplicate=true). A namespace's write policy may refuse an
        add (a confidence below its minimum, too many adds to one thread): then the answer
        is {"stored": false, "reason"} and nothing is stored."""
        with tool_call("add_memory"):
            memory = decode_add_memory(text, metadata, namespace)
            return plain(await ops.add_memory(live["front"], memory))

    @mcp.tool(**batch_spec(ADD, "results", AddReceipt, Refused))
    async def add_memories(items: list[dict[str, Any]], namespace: str | None = None,
                           ctx: Context | None = None) -> dict[str, Any]:
        """Remember several texts in one call: items is a list of {"text", "metadata"?}
        (at most 1,000 items, 10,000,000 characters in all). All are validated before any
        is stored; each gets its own memory_id and task_id, or {"stored": false, "reason"}
        where the namespace's write policy refused that item. With a progressToken, sends
        progress notifications (validated, then queued so far)."""
        with tool_call("add_memories"):
            memories = decode_batch(items, namespace)
            report = batch_progress(ctx, len(memories)) if ctx else None
            if report:
                await report(0)
            return {"results": plain(await ops.add_memories(live["front"], memories, report))}

    @mcp.tool(**tool_spec(READ, TaskStatus))
    async def graph_status(task_id: str) -> dict[str, Any]:
        """State of any task (ingest, delete, update, graph, files, import or reembed): queued,
        running, done, failed or cancelled, with progress (ingest: parts; graph: chunks read;
        reembed: chunks re-embedded; import: batches written; files: files done of found,
        and "files": added, unchanged, replaced, skipped with reasons), timings, the
        worker and the error if it failed. Graph tasks add chunks/s, eta_seconds and the
        entities and relations created; ingest tasks name the graph_task_id that extracts
        their entities, say "chunking: N%" while a large text is chunked, and once its
        parts are out add chunks/s and eta_seconds from the parts written so far."""
        with tool_call("graph_status"):
            record = await ops.task_status(live["front"], check_task_id(task_id))
            return plain(shape_task(record))

    @mcp.tool(**tool_spec(READ, SearchResponse))
    async def search_memory(query: str, limit: int = 10, filters: dict[str, Any] | None = None,
                            namespace: str | None = None, mode: str = "hybrid",
                            min_score: float = 0.0, rank: str = "relevance",
                            as_of: str | float | None = None) -> dict[str, Any]:
        """Find the stored passages that answer query (1-2,000 characters). limit: 1-100.
        mode: "hybrid" (default: meaning and exact words, and named entities when the
        query names one or two rare ones, fused), "vector" (meaning), "keyword" (words) or
        "graph" (passages that mention an entity named in the query or a related one).
        score: hybrid 0-1 (0.5 = an average candidate, 0.84 = one standard deviation above),
        vector = cosine similarity, keyword = BM25, graph = the share of the query's entity
        weight the passage covers (0-1); min_score drops lower results. Each result says why
        it matched (each signal's rank and score; "context": the rank of the turn of the
        same thread next to it that lent it score; "graph": the named entities it mentions
        and, in via, each related entity it was found through with its named one), names
        the entities it mentions, and folds overlapping chunks of one memory into the best
        (also_matched). One memory holds at
        most 3 results (a setting): its further matches are listed under its best result
        (more: chunk_id, char_start, char_end, score). filters (all optional):
        {"tags": [..] (any), "tags_all": [..], "source": "..", "source_prefix": "src/app/"
        (every source that starts with it), "after": "2026-01-01", "before":
        "2026-02-01T12:00:00Z", "metadata": {"key": "value"} (equality)}. start_line and
        end_line: the lines of the text as added the passage spans (1-based, inclusive;
        blank lines before its first line count, so a file's own lines).
        rank: "relevance" (default: the best match first) or "memory": the best matches
        re-ordered by a blend, by default 0.4 relevance + 0.3 recency (halves every 30 days
        since the memory was added) + 0.2 frequency (how often search has returned it) +
        0.1 importance (metadata "importance" 0-1, else 0.5); score is then the blend (0-1)
        and rank_parts shows each part's value, weight and points. min_score applies to
        relevance. A result from a memory still being ingested (a large text is found part
        by part as its parts are written) says status: "ingesting" and parts: {done,
        total}; a complete memory's results have neither."""
        with tool_call("search_memory"):
            request = decode_search(query, limit, filters, namespace, mode, min_score, rank,
                                    as_of)
            return plain(await live["front"].query.call("/v1/search", request, SearchResponse))

    @mcp.tool(**tool_spec(READ, MemoryRecord))
    async def get_memory(memory_id: str, namespace: str | None = None) -> dict[str, Any]:
        """One memory: its full text, metadata, chunk count and status: ready, queued
        (added, waiting for a worker) or ingesting; while queued or ingesting it names its
        task_id (graph_status shows progress), and a large text ingesting in parts adds
        parts: {done, total}, the parts searchable so far."""
        with tool_call("get_memory"):
            ref = MemoryRef(memory_id=check_id(memory_id, "memory_id"),
                            namespace=check_namespace(namespace))
            return plain(await ops.get_memory(live["front"], ref))

    @mcp.tool(**tool_spec(DESTRUCTIVE, DeleteReceipt))
    async def delete_memory(memory_id: str, namespace: str | None = None) -> dict[str, Any]:
        """Delete a memory with its chunks. Returns a task_id; graph_status shows when it is
        done. Afterwards the same text can be added again. A memory not stored (deleted
        already) answers status "gone" with no task: nothing changes."""
        with tool_call("delete_memory"):
            ref = MemoryRef(memory_id=check_id(memory_id, "memory_id"),
                            namespace=check_namespace(namespace))
            return plain(await ops.delete_memory(live["front"], ref))

    @mcp.tool(**tool_spec(READ, Stats))
    async def get_stats(namespace: str | None = None) -> dict[str, Any]:
        """Counts for a namespace: memories (searchable and still ingesting), chunks,
        entities and relations, queue depth, workers alive, tasks by state, and the
        embedding model it was built with."""
        with tool_call("get_stats"):
            request = StatsRequest(namespace=check_namespace(namespace))
            return plain(await live["front"].query.call("/v1/stats", request, Stats))


def add_graph_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(ADD, TaskReceipt))
    async def build_graph(namespace: str | None = None, memory_ids: list[str] | None = None,
                          rebuild: bool = False) -> dict[str, Any]:
        """Extract entities (people, places, organisations, works...) and their relations
        into the knowledge graph, for the chunks not yet read (or all of them with
        rebuild=true), of the whole namespace or of up to 1,000 memory_ids. Returns a task_id
        at once; graph_status(task_id) shows progress, rate and ETA. New memories are read
        automatically after ingest; use this after turning that off, or to rebuild."""
        with tool_call("build_graph"):
            request = convert({"namespace": check_namespace(namespace),
                               "memory_ids": memory_ids, "rebuild": rebuild}, BuildGraph)
            return plain(await ops.build_graph(live["front"], request))

    @mcp.tool(**tool_spec(DESTRUCTIVE, TaskStatus))
    async def cancel_task(task_id: str) -> dict[str, Any]:
        """Stop a queued or running task. A graph task stops after its current batch (the
        graph stays consistent: whole batches only). An ingest task is undone (what was
        written is removed; the text can be added again). A delete cannot be cancelled.
        Returns the task's status; a finished task is returned unchanged."""
        with tool_call("cancel_task"):
            record = await ops.cancel_task(live["front"], check_task_id(task_id))
            return plain(shape_task(record))

    @mcp.tool(**tool_spec(READ, EntityList))
    async def search_entities(query: str, type: str | None = None, limit: int = 10,
                              namespace: str | None = None) -> dict[str, Any]:
        """Find entities of the knowledge graph by name (1-500 characters), best match first,
        with how many passages mention each; symbols of source code also by dotted name or
        the words of their name or docstring, with their file and lines. type (optional):
        one of """ + ", ".join(
            ENTITY_TYPES) + """. limit: 1-100."""
        with tool_call("search_entities"):
            request = convert({"query": query.strip() if isinstance(query, str) else query,
                               "type": type, "limit": limit,
                               "namespace": check_namespace(namespace)}, EntitySearch)
            return plain(await live["front"].query.call("/v1/entities", request, EntityList))

    @mcp.tool(**tool_spec(READ, EntityDetail))
    async def get_entity(name_or_id: str, depth: int = 1,
                         namespace: str | None = None) -> dict[str, Any]:
        """One entity (by name or entity_id): its related entities with weights (how many
        passages have both in one sentence; depth=2 adds their neighbours) and the passages
        that mention it. A symbol of source code (by dotted name or its last parts) also
        shows where it is defined, the passages that use it and its relations (defines,
        imports, inherits, calls, uses). Passages carry their source and lines (start_line,
        end_line) as search results do."""
        with tool_call("get_entity"):
            request = convert({"name_or_id": name_or_id.strip() if isinstance(
                name_or_id, str) else name_or_id, "depth": depth,
                "namespace": check_namespace(namespace)}, EntityRef)
            return plain(await live["front"].query.call("/v1/entity", request, EntityDetail))


def add_routes(mcp: FastMCP, live: dict[str, Front]) -> None:
    """The probes, and /metrics (with a token configured, services/mcp/http.TokenCheck asks
    for one on every path but the probes': custom routes are outside fastmcp's auth)."""
    @mcp.custom_route("/healthz", methods=["GET"])
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @mcp.custom_route("/readyz", methods=["GET"])
    async def readyz(request: Request) -> JSONResponse:
        if await ops.ready(live["front"]):
            return JSONResponse({"status": "ready"})
        return JSONResponse({"status": "Redis or the query service is not answering"}, 503)

    @mcp.custom_route("/metrics", methods=["GET"])
    async def metrics_route(request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def decode_batch(items: Any, namespace: Any) -> list:
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH_ITEMS:
        raise InvalidInput(f"items: expected a list of 1 to {MAX_BATCH_ITEMS} items")
    memories = []
    total = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) - {"text", "metadata"}:
            raise InvalidInput(f"items[{i}]: expected an object with 'text' and optional "
                               "'metadata'")
        memory = decode_add_memory(item.get("text"), item.get("metadata"), namespace,
                                   where=f"items[{i}].")
        total += len(memory.text)
        if total > MAX_TEXT_CHARS:
            raise InvalidInput(f"items: more than {MAX_TEXT_CHARS:,} characters in all; "
                               "send fewer items per call")
        memories.append(memory)
    return memories
