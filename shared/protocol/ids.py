"""Ids. A memory's id is derived from its namespace and content, so adding the same text twice
names the same memory; a task's id is random and is also its arq job id (a batch of adds is
the job of its first memory's task: shared/tasks/adds.py)."""

from __future__ import annotations

import hashlib
import uuid


def memory_id(namespace: str, content_hash: str) -> str:
    digest = hashlib.sha256(f"{namespace}\x00{content_hash}".encode()).hexdigest()
    return f"mem_{digest[:32]}"


def new_task_id() -> str:
    return f"task_{uuid.uuid4().hex}"


def chunk_id(memory_id: str, idx: int) -> str:
    return f"{memory_id}:{idx}"


def part_job_id(task_id: str, part: int) -> str:
    return f"{task_id}:part:{part}"


def graph_task_id(ingest_task_id: str) -> str:
    """The entity-extraction task that follows an ingest task: derived, so a re-run of the
    ingest's last step names the same graph task."""
    return "task_" + hashlib.sha256(f"graph\x00{ingest_task_id}".encode()).hexdigest()[:32]
