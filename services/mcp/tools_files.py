"""The ingest_path tool: files and folders on the server's machine, for an agent on it.

Off unless ZAPOMNI_INGEST_ROOTS names the folders it may read. The front only checks the
path (resolved: neither '..' nor a symbolic link leads out of the roots) and enqueues one
files job; a worker walks, reads and adds each file (workers/files.py), and graph_status
shows files done of found and the skipped ones with their reasons.
"""

from __future__ import annotations

import time
from typing import Any

from fastmcp import FastMCP

from zapomni.services.mcp.calls import plain, tool_call
from zapomni.services.mcp.conventions import HOST_FILES, tool_spec
from zapomni.services.mcp.front import Front, queue_task
from zapomni.shared.protocol.api import IngestPath, TaskReceipt
from zapomni.shared.protocol.ids import new_task_id
from zapomni.shared.protocol.jobs import FilesJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import check_namespace, convert
from zapomni.shared.tasks.queue import FILES
from zapomni.shared.text.roots import allowed_roots, check_ingest_path


def decode_ingest_path(path: Any, namespace: Any, include: Any, exclude: Any) -> IngestPath:
    return convert({"path": path, "namespace": check_namespace(namespace),
                    "include": include or [], "exclude": exclude or []}, IngestPath)


async def queue_ingest_path(front: Front, request: IngestPath) -> TaskReceipt:
    resolved = check_ingest_path(request.path, allowed_roots(front.settings.ingest_roots))
    record = TaskRecord(task_id=new_task_id(), kind="files", namespace=request.namespace,
                        created_at=time.time(), message=f"waiting for a worker to walk "
                                                        f"{request.path}")
    job = FilesJob(task_id=record.task_id, namespace=request.namespace,
                   path=resolved.as_posix(), include=request.include,
                   exclude=request.exclude)
    return await queue_task(front, record, FILES, job)  # the first slice: the task's own id


def add_files_tools(mcp: FastMCP, live: dict[str, Front]) -> None:
    @mcp.tool(**tool_spec(HOST_FILES, TaskReceipt))
    async def ingest_path(path: str, namespace: str | None = None,
                          include: list[str] | None = None,
                          exclude: list[str] | None = None) -> dict[str, Any]:
        """Remember the files of a folder (or one file) on the server's machine: Markdown,
        text, reStructuredText, source code, PDF, DOCX, HTML. Only under the folders the
        server allows (ZAPOMNI_INGEST_ROOTS; off when unset); path: absolute. .gitignore
        files are honoured; include / exclude: globs (a name like "*.py", or a path with
        "/"), at most 50 each. Each file becomes a memory with metadata source (its path
        relative to path), type, language (code), title. A file stored already with the
        same bytes is left alone; a changed one replaces its memory. Returns a task_id at
        once; graph_status(task_id) shows files done of found, what was added, unchanged,
        replaced, and the skipped files with their reasons."""
        with tool_call("ingest_path"):
            request = decode_ingest_path(path, namespace, include, exclude)
            return plain(await queue_ingest_path(live["front"], request))
