"""The reembed tool: a namespace moved onto the workers' embedding model, as a task
(workers/reembed.py). ``zapomni reembed`` calls it and follows the task with graph_status."""

from __future__ import annotations

import time
from typing import Any

from fastmcp import FastMCP

from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import ADD, tool_spec
from zapomni.services.mcp.front import Front, queue_task
from zapomni.shared.protocol.api import TaskReceipt
from zapomni.shared.protocol.ids import new_task_id
from zapomni.shared.protocol.jobs import ReembedJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import check_namespace
from zapomni.shared.tasks.queue import REEMBED


async def start_reembed(front: Front, namespace: str) -> TaskReceipt:
    """Create a reembed task and queue its first step; the worker reads the namespace."""
    record = TaskRecord(task_id=new_task_id(), kind="reembed", namespace=namespace,
                        created_at=time.time(), message="waiting for a worker")
    job = ReembedJob(task_id=record.task_id, namespace=namespace)
    return await queue_task(front, record, REEMBED, job)


def add_moves_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(ADD, TaskReceipt))  # the texts stay; only their vectors are replaced
    async def reembed(namespace: str | None = None) -> dict[str, Any]:
        """Re-embed every chunk of a namespace with the embedding model the workers run now
        (after changing the embedder: a namespace keeps the model it was built with and
        refuses another). Returns a task_id at once; graph_status(task_id) shows chunks
        done/total and eta_seconds; cancel_task stops it (the namespace keeps its old
        model). Search answers from the old vectors until every chunk has a new one, then
        switches to the new model in one step."""
        with tool_call("reembed"):
            return plain(await start_reembed(live["front"], check_namespace(namespace)))
