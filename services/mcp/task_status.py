"""A task record as graph_status and cancel_task answer it: ISO times, progress in percent,
for graph tasks the rate, the time left and what they created, and for files tasks the counts
of what was done with the files."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import msgspec

from zapomni.shared.protocol.jobs import FileCounts
from zapomni.shared.protocol.task_records import TaskProgress, TaskRecord, TaskStatus


def iso(ts: float) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds") if ts else None


def shape_task(record: TaskRecord) -> TaskStatus:
    end = record.finished_at or (record.heartbeat_at if record.state == "running" else 0)
    done = min(record.done, record.total) if record.total else record.done
    percent = round(100 * done / record.total, 1) if record.total else 0.0
    return TaskStatus(
        task_id=record.task_id, kind=record.kind, namespace=record.namespace,
        state=record.state, memory_id=record.memory_id or None,
        progress=TaskProgress(done=done, total=record.total, percent=percent),
        created_at=iso(record.created_at), started_at=iso(record.started_at),
        finished_at=iso(record.finished_at),
        seconds=round(end - record.started_at, 3) if record.started_at and end else None,
        worker=record.worker or None, attempts=record.attempts,
        message=record.message or None, error=record.error or None, **graph_fields(record))


def ingest_rate(record: TaskRecord) -> dict[str, Any]:
    """A document that fanned out into parts: chunks/s from its parts written since they were
    queued, and the seconds left at that rate while it runs (graph tasks' shape). Nothing for
    a memory of one part, or before its parts are queued."""
    if record.total < 2 or not record.parts_at:
        return {}
    elapsed = (record.finished_at or record.heartbeat_at or time.time()) - record.parts_at
    chunks = record.chunks * min(record.done, record.total) / record.total
    return rate_and_eta(record, chunks, record.chunks - chunks, elapsed)


def rate_and_eta(record: TaskRecord, done: float, left: float, elapsed: float
                 ) -> dict[str, Any]:
    """Chunks/s over ``elapsed`` seconds, and the seconds ``left`` chunks take at that rate
    while the task runs."""
    rate = done / elapsed if elapsed > 0 and done else 0.0
    eta = round(left / rate, 1) if rate and record.state == "running" else None
    return {"rate_chunks_per_s": round(rate, 1), "eta_seconds": eta}


def graph_fields(record: TaskRecord) -> dict[str, Any]:
    """Graph tasks: chunks/s, seconds left and what they created; ingest tasks: the entity
    extraction that follows them; files tasks: what they did with the files so far."""
    if record.kind == "ingest":
        return {"graph_task_id": record.graph_task_id or None, **ingest_rate(record)}
    if record.kind == "files":
        return {"files": msgspec.json.decode(record.files, type=FileCounts) if record.files
                else FileCounts()}
    if record.kind not in ("graph", "reembed"):
        return {}
    elapsed = (record.heartbeat_at or time.time()) - record.started_at \
        if record.started_at else 0.0
    speed = rate_and_eta(record, record.done, max(0, record.total - record.done), elapsed)
    if record.kind == "reembed":
        return speed
    return {**speed, "entities_created": record.entities, "relations_created": record.relations}
