"""A task's record (a Redis hash) and the status a client reads of it."""

from __future__ import annotations

import msgspec

from zapomni.shared.protocol.base import Lenient
from zapomni.shared.protocol.jobs import FileCounts


class TaskRecord(Lenient):
    task_id: str
    kind: str
    namespace: str
    state: str = "queued"
    memory_id: str = ""
    done: int = 0
    total: int = 0
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    heartbeat_at: float = 0.0
    worker: str = ""
    attempts: int = 0
    message: str = ""  # what is happening now, e.g. "waiting: embedder unreachable"
    error: str = ""
    entities: int = 0  # graph tasks: Entity nodes and RELATED edges this task created
    relations: int = 0
    graph_task_id: str = ""  # ingest and import tasks: the entity extraction that followed
    after: str = ""  # ingest tasks in a thread: the memory added to it just before
    gen: int = 0  # ingest tasks: the claim's generation (shared/tasks/tasks.py)
    # ingest and update tasks: shared/validation.metadata_digest of the metadata they write,
    # so that the same text added again can say whether its metadata differs
    meta_hash: str = ""
    previous: str = ""  # update tasks: the task that owned the memory before, given it back
    files: str = ""  # files tasks: a FileCounts as JSON
    embedded: int = 0  # import and reembed tasks: chunks embedded (not reused from a file)
    chunks: int = 0  # ingest tasks: the memory's chunks, once it is chunked
    parts_at: float = 0.0  # ingest tasks: when its parts were queued (their rate: the ETA)
    batch: str = ""  # ingest tasks: the arq job that holds it as added (shared/tasks/adds.py)


class TaskProgress(Lenient):
    done: int
    total: int
    percent: float  # 0-100


class TaskStatus(Lenient):
    """A task as graph_status and cancel_task answer it (services/mcp/task_status.py)."""

    task_id: str
    kind: str
    namespace: str
    state: str
    memory_id: str | None
    progress: TaskProgress
    created_at: str | None  # ISO-8601, UTC
    started_at: str | None
    finished_at: str | None
    seconds: float | None
    worker: str | None
    attempts: int
    message: str | None
    error: str | None
    # ingest tasks: the graph task that extracts their entities
    graph_task_id: str | None | msgspec.UnsetType = msgspec.UNSET
    # graph tasks: chunks/s, seconds left while running, what they created
    rate_chunks_per_s: float | msgspec.UnsetType = msgspec.UNSET
    eta_seconds: float | None | msgspec.UnsetType = msgspec.UNSET
    entities_created: int | msgspec.UnsetType = msgspec.UNSET
    relations_created: int | msgspec.UnsetType = msgspec.UNSET
    # files tasks (ingest_path): what was done with the files so far
    files: FileCounts | msgspec.UnsetType = msgspec.UNSET
