"""``zapomni reembed --namespace NS``: start a reembed through the MCP front (its ``reembed``
tool; the front queues, workers embed) and follow the task with ``graph_status`` until it
ends, showing chunks done / total and the ETA."""

from __future__ import annotations

import asyncio
from typing import Any

from fastmcp import Client
from fastmcp.exceptions import ToolError
from mcp import MCPError

from zapomni.services.cli.ingest import front_refusal
from zapomni.services.cli.progress import Progress
from zapomni.shared.protocol.errors import InvalidInput, Unavailable, ZapomniError
from zapomni.shared.settings import Settings

POLL = 1.0  # seconds between graph_status calls
ENDED = ("done", "failed", "cancelled")


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    try:
        return (await client.call_tool(tool, arguments)).structured_content
    except ToolError as exc:
        raise InvalidInput(str(exc)) from None


async def reembed_namespace(settings: Settings, namespace: str, *, mcp_url: str = "",
                            wait: bool = True, show: bool = True, token: str = ""
                            ) -> dict[str, Any]:
    """Start the task; with ``wait``, follow it to its end. The task's last status.
    ``token``: the front's bearer token (default ZAPOMNI_MCP_TOKEN); a scoped one is
    checked as any caller's."""
    url = mcp_url or f"http://{settings.mcp_host}:{settings.mcp_port}/mcp"
    client = Client(url, auth=token or settings.mcp_token or None)
    try:
        async with client:
            receipt = await call(client, "reembed", namespace=namespace)
            status = await call(client, "graph_status", task_id=receipt["task_id"])
            if not wait:
                return status
            with Progress(f"reembed {namespace}", 0, ("chunk", "chunks"),
                          quiet=not show) as progress:
                while status["state"] not in ENDED:
                    await asyncio.sleep(POLL)
                    status = await call(client, "graph_status", task_id=receipt["task_id"])
                    eta = status.get("eta_seconds")
                    progress.update(status["progress"]["done"], status["progress"]["total"],
                                    note=f"ETA {eta:.0f} s" if eta else "")
            return status
    except MCPError as exc:
        raise ZapomniError(front_refusal(url, exc)) from None
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise Unavailable(f"cannot reach the MCP front at {url} ({type(exc).__name__}); "
                          "start it (`zapomni up`) or pass --mcp-url") from None
