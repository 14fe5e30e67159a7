"""``zapomni import``: an export file back into a namespace, through the queue and workers.

This command is the front of an import: it reads the whole file once and checks every line
(the header, each memory, each chunk's span and vector) before anything is queued, so a bad
file stores nothing and the message names its line. Then it creates an "import" task and
queues the memories in batches (``import_batch`` jobs, counted against the queue's limits:
a full queue is waited for, not refused), and shows the task's progress until it ends. A
file that carries the graph (version 2) has its entities and their relationships queued as
further parts of the same task once every memory is written (they refer to the memories'
chunks). Workers write, as for every other change; they reuse the file's vectors when its
model is theirs and embed again otherwise, and make the import searchable at once at its end
(workers/moves.py).
"""

from __future__ import annotations

import asyncio
import gzip
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import redis.exceptions as redis_errors
import tenacity
from redis.asyncio import Redis

from zapomni.services.cli.progress import MEMORIES, Progress
from zapomni.shared.protocol.errors import InvalidInput, Overloaded, Unavailable
from zapomni.shared.protocol.export import (
    READS,
    ExportedEntity,
    ExportedLine,
    ExportedMemory,
    ExportedRelation,
    ExportHeader,
)
from zapomni.shared.protocol.ids import new_task_id, part_job_id
from zapomni.shared.protocol.jobs import ImportJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import describe
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import IMPORT, connect_queue, enqueue

QUEUE_WAIT = 2.0  # seconds between tries while the queue is full
POLL = 0.5  # seconds between looks at the task's progress
REDIS_PATIENCE = 120.0  # seconds without an answer from Redis before following stops
# memories per import_batch job: 100 memories of a few chunks each are seconds of work
IMPORT_BATCH = 100
GRAPH_BATCH = 1000  # entities or relationships per import_batch job: one statement each
SLOW = (redis_errors.ConnectionError, redis_errors.TimeoutError)

_header = msgspec.json.Decoder(ExportHeader)
_memory = msgspec.json.Decoder(ExportedMemory)  # version 1: memories only
_line = msgspec.json.Decoder(ExportedLine)  # version 2: "kind" says which record
GraphLine = ExportedEntity | ExportedRelation


@dataclass(frozen=True)
class Checked:
    header: ExportHeader
    memories: int
    chunks: int
    graph: int = 0  # entities and relationships between them


@dataclass(frozen=True)
class Plan:
    """An import queued: its task, and its parts (memories first, then the graph)."""

    task_id: str
    namespace: str
    memories: int
    memory_parts: int
    graph_parts: int


def bad(path: Path, line: int, what: str) -> InvalidInput:
    return InvalidInput(f"{path.name} line {line}: {what}; nothing was imported. Use a file "
                        "written by `zapomni export`")


def decode_line(path: Path, number: int, raw: bytes, header: ExportHeader
                ) -> ExportedMemory | GraphLine:
    try:
        line = (_memory if header.version == 1 else _line).decode(raw)
    except msgspec.ValidationError as exc:
        what = describe(exc)
        if what.startswith("kind:"):  # which record the line is
            what = "kind: one of 'memory', 'entity' or 'relation' (a version-2 line says which)"
        raise bad(path, number, what) from None
    except msgspec.DecodeError:
        raise bad(path, number, "not a JSON object (the line is cut or corrupted)") from None
    if isinstance(line, ExportedMemory):
        check_chunks(path, number, line, header)
    return line


def check_chunks(path: Path, number: int, memory: ExportedMemory, header: ExportHeader
                 ) -> None:
    for chunk in memory.chunks:
        if not chunk.char_start < chunk.char_end <= len(memory.text):
            raise bad(path, number, f"chunk {chunk.idx} spans characters {chunk.char_start}-"
                                    f"{chunk.char_end} of a text of {len(memory.text)}")
        if header.vectors and len(chunk.vector or b"") != header.dim * 4:
            raise bad(path, number, f"chunk {chunk.idx} has no vector of {header.dim} "
                                    "float32 values, which the header promises")


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a gzip file; bad compression becomes one clear error."""
    number = 0
    try:
        with gzip.open(path, "rb") as lines:
            for number, raw in enumerate(lines, start=1):  # noqa: B007 - read after the loop
                yield number, raw
    except gzip.BadGzipFile:
        raise InvalidInput(f"{path.name}: not a gzip file; `zapomni export` writes "
                           "gzip-compressed JSON lines; nothing was imported") from None
    except EOFError:
        raise InvalidInput(f"{path.name}: the file ends after line {number} in the middle "
                           "of its compressed data (cut short?); nothing was imported") from None
    except zlib.error:
        raise InvalidInput(f"{path.name}: the compressed data is corrupted after line "
                           f"{number}; nothing was imported") from None


def read_header(path: Path, number: int, raw: bytes) -> ExportHeader:
    try:
        header = _header.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        what = describe(exc) if isinstance(exc, msgspec.ValidationError) else "not JSON"
        raise bad(path, number, f"not an export header ({what})") from None
    if header.version not in READS:
        raise bad(path, number, f"format version {header.version}; this Zapomni reads "
                                f"versions {' and '.join(map(str, READS))}")
    return header


def memories(path: Path) -> Iterator[tuple[ExportHeader, ExportedMemory | GraphLine | None]]:
    """The file's header (with None), then every line of the file, checked."""
    header: ExportHeader | None = None
    for number, raw in read_lines(path):
        if header is None:
            header = read_header(path, number, raw)
            yield header, None
        elif raw.strip():
            yield header, decode_line(path, number, raw, header)
    if header is None:
        raise InvalidInput(f"{path.name}: the file is empty; nothing was imported")


def check_file(path: Path) -> Checked:
    """Read the whole file once: its header and counts, or the first problem."""
    found: ExportHeader | None = None
    count = chunks = graph = 0
    for header, line in memories(path):
        found = header
        if isinstance(line, ExportedMemory):
            count += 1
            chunks += len(line.chunks)
        elif line is not None:
            graph += 1
    assert found is not None  # memories() raised otherwise
    return Checked(found, count, chunks, graph)


def batches(path: Path, size: int, kind: type | tuple[type, ...] = ExportedMemory
            ) -> Iterator[tuple[ExportHeader, list]]:
    """The file's lines of ``kind`` (memories, or the graph's), ``size`` at a time."""
    batch: list = []
    last: ExportHeader | None = None
    for header, line in memories(path):
        last = header
        if line is not None and isinstance(line, kind):
            batch.append(line)
        if len(batch) >= size:
            yield header, batch
            batch = []
    if batch and last is not None:
        yield last, batch


async def enqueue_waiting(redis: Redis, settings: Settings, job: ImportJob,
                          progress: Progress) -> None:
    """Enqueue a batch, waiting while the queue is full (an import is not in a hurry)."""
    waiting = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(Overloaded), wait=tenacity.wait_fixed(QUEUE_WAIT),
        before_sleep=lambda _: progress.update(progress.done, note="the queue is full; waiting"))
    await waiting(enqueue, redis, settings, IMPORT, job, part_job_id(job.task_id, job.part),
                  bounded=True)


async def import_file(settings: Settings, path: Path, namespace: str | None = None, *,
                      show: bool = True) -> TaskRecord:
    """Check the file, queue its memories in batches into ``namespace`` (default: the one
    it was exported from), and wait until the import task ends; its last record."""
    redis = connect_queue(settings)
    try:
        with Progress(f"import {path.name}", 0, MEMORIES, quiet=not show) as progress:
            plan = await queue_import(settings, redis, path, namespace, progress)
            if plan.graph_parts:
                record = await follow(redis, plan, progress, until=plan.memory_parts)
                if record.state in tasks.TERMINAL:
                    return record
                await queue_graph(settings, redis, path, plan, progress)
            return await follow(redis, plan, progress)
    finally:
        await redis.aclose()


async def queue_import(settings: Settings, redis: Redis, path: Path, namespace: str | None,
                       progress: Progress) -> Plan:
    """Check the whole file, then create the import task and queue its memories' batches
    (its graph's wait for them: queue_graph). Nothing is queued when the file has a
    problem."""
    checked = await asyncio.to_thread(check_file, path)
    target = namespace or checked.header.namespace
    memory_parts = max(1, -(-checked.memories // IMPORT_BATCH))
    graph_parts = -(-checked.graph // GRAPH_BATCH) if checked.memories else 0
    parts = memory_parts + graph_parts
    ttl = tasks.TASK_TTL
    record = TaskRecord(task_id=new_task_id(), kind="import", namespace=target, total=parts,
                        created_at=time.time(), message=f"{checked.memories} memories from "
                                                        f"{path.name} in {parts} batch(es)")
    await tasks.create_task(redis, record, ttl)
    progress.update(0, checked.memories, note="queueing")
    if not checked.memories:
        await tasks.move(redis, record.task_id, "done", ttl=ttl, finished_at=time.time(),
                         message="imported: the file holds no memories")
    for part, (header, batch) in enumerate(batches(path, IMPORT_BATCH)):
        await enqueue_waiting(redis, settings, ImportJob(
            task_id=record.task_id, namespace=target, part=part, parts=parts,
            model=header.model, dim=header.dim, memories=batch, graph=header.graph), progress)
    return Plan(record.task_id, target, checked.memories, memory_parts, graph_parts)


async def queue_graph(settings: Settings, redis: Redis, path: Path, plan: Plan,
                      progress: Progress) -> None:
    """Queue the file's entities and relationships, once every memory is written."""
    progress.update(progress.done, note="queueing the graph")
    graph = batches(path, GRAPH_BATCH, (ExportedEntity, ExportedRelation))
    for part, (header, batch) in enumerate(graph, start=plan.memory_parts):
        await enqueue_waiting(redis, settings, ImportJob(
            task_id=plan.task_id, namespace=plan.namespace, part=part,
            parts=plan.memory_parts + plan.graph_parts, model=header.model, dim=header.dim,
            memories=[], graph=True,
            entities=[e for e in batch if isinstance(e, ExportedEntity)],
            relations=[r for r in batch if isinstance(r, ExportedRelation)]), progress)


async def follow(redis: Redis, plan: Plan, progress: Progress, until: int = 0) -> TaskRecord:
    """Poll the task until it ends (or ``until`` parts are done), showing memories written
    (batches times their size). A busy server may not answer a read in time; the import
    goes on meanwhile, so a read is tried again for ``REDIS_PATIENCE`` seconds."""
    reading = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception_type(SLOW), reraise=True, wait=tenacity.wait_fixed(POLL),
        stop=tenacity.stop_after_delay(REDIS_PATIENCE),
        before_sleep=lambda _: progress.update(progress.done,
                                               note="Redis is slow to answer; waiting"))
    task_id = plan.task_id
    while True:
        try:
            record = await reading(tasks.get_task, redis, task_id)
        except SLOW:
            if until:  # the graph's parts are not queued: this import cannot end
                raise Unavailable(f"Redis has not answered for {REDIS_PATIENCE:.0f} s, before "
                                  "the graph was queued; nothing is searchable yet: import "
                                  "the file again (what is written is taken over)") from None
            raise Unavailable(f"Redis has not answered for {REDIS_PATIENCE:.0f} s; the "
                              f"import goes on: follow it with graph_status({task_id!r})"
                              ) from None
        if record is None:
            raise InvalidInput(f"task {task_id} is gone from the registry (expired?)")
        progress.update(min(plan.memories, record.done * IMPORT_BATCH), note=record.message)
        if record.state in tasks.TERMINAL or (until and record.done >= until):
            return record
        await asyncio.sleep(POLL)
