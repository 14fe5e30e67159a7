"""What every tool tells a client before it is called: its behaviour hints and the JSON schema
of its answer. A tool is registered with ``@mcp.tool(**tool_spec(READ, SearchResponse))``:
one of the hint sets below, and the Struct(s) its answer is the ``msgspec.to_builtins``
of (several: the answer is one of them). tests/integration/test_mcp_conventions.py fails for
a tool registered without both, and validates every tool's real answers against its schema.

The hints (MCP ``ToolAnnotations``) are hints, chosen for what the memory does: it is a
closed world (``openWorldHint`` false: no tool reaches outside Zapomni's own stores) except
ingest_path, which reads the files of the server's machine (``HOST_FILES``). Reads change
nothing a client can see (search's access counts, which rank="memory" reads, are
bookkeeping). Adding a text again is a no-op, so the writes are idempotent;
deleting, cancelling an ingest (it is undone) and updating (keys replaced, a text
superseded) destroy what was there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from fastmcp import Context
from mcp.types import ToolAnnotations


def hints(*, read_only: bool, destructive: bool, idempotent: bool,
          open_world: bool = False) -> ToolAnnotations:
    return ToolAnnotations(readOnlyHint=read_only, destructiveHint=destructive,
                           idempotentHint=idempotent, openWorldHint=open_world)


# reads: get_*, search_*, list_*, graph_status, build_context
READ = hints(read_only=True, destructive=False, idempotent=True)
# adds and build_graph: the same call again leaves the memory (or the graph) as it was
ADD = hints(read_only=False, destructive=False, idempotent=True)
# delete_memory, update_memory, cancel_task: what was stored before is gone; again: no-op
DESTRUCTIVE = hints(read_only=False, destructive=True, idempotent=True)
# ingest_path: reads the host's files (an open world); a changed file replaces its memory
HOST_FILES = hints(read_only=False, destructive=True, idempotent=True, open_world=True)


def answer_schema(*kinds: Any) -> dict[str, Any]:
    """The JSON schema of an answer that is one of ``kinds`` (Structs) turned into builtins:
    an object schema (MCP asks for one), its parts under ``$defs``."""
    refs, defs = msgspec.json.schema_components(kinds, ref_template="#/$defs/{name}")
    if len(refs) == 1:
        return {**defs[refs[0]["$ref"].removeprefix("#/$defs/")], "$defs": defs}
    return {"type": "object", "anyOf": list(refs), "$defs": defs}


def list_schema(field: str, *kinds: Any) -> dict[str, Any]:
    """An answer ``{field: [one of kinds, ...]}`` (add_memories' results)."""
    refs, defs = msgspec.json.schema_components(kinds, ref_template="#/$defs/{name}")
    items = refs[0] if len(refs) == 1 else {"anyOf": list(refs)}
    return {"type": "object", "properties": {field: {"type": "array", "items": items}},
            "required": [field], "$defs": defs}


def tool_spec(annotations: ToolAnnotations, *answers: Any) -> dict[str, Any]:
    """The keyword arguments of ``mcp.tool`` for a tool with these hints and answers."""
    return {"annotations": annotations, "output_schema": answer_schema(*answers)}


def batch_spec(annotations: ToolAnnotations, field: str, *answers: Any) -> dict[str, Any]:
    """``tool_spec`` of a tool answering ``{field: [answers...]}``."""
    return {"annotations": annotations, "output_schema": list_schema(field, *answers)}


PROGRESS_STEPS = 20  # notifications a batch sends at most, besides the first and the last


def batch_progress(ctx: Context, total: int, verb: str = "queued"
                   ) -> Callable[[int], Awaitable[None]]:
    """MCP progress notifications for a batch of ``total`` items (only when the client sent
    a progressToken; fastmcp sends nothing otherwise): ``report(0)`` once they are all
    validated, then ``report(n)`` as items are done, bounded to about PROGRESS_STEPS."""
    step = max(1, total // PROGRESS_STEPS)

    async def report(done: int) -> None:
        if done == 0:
            await ctx.report_progress(0, total, f"{total} validated; none {verb} yet")
        elif done == total or done % step == 0:
            await ctx.report_progress(done, total, f"{done} of {total} {verb}")

    return report
