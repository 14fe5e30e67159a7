"""What a job's failure means for its task: wait and retry, or fail and clean up.

Embedder or store outages are retried with backoff (the task says what it waits for); a
rejected embedding fails the task at once. A failed ingest leaves nothing half-written: its
chunks and memory node are removed and the text may be added again.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import redis.exceptions
from arq.worker import Retry

from zapomni.shared import metrics
from zapomni.shared.protocol.base import JOB_VERSION, TASK_ID_PATTERN
from zapomni.shared.protocol.errors import EmbeddingRejected, ZapomniError
from zapomni.shared.protocol.ids import graph_task_id
from zapomni.shared.protocol.jobs import GraphJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import describe
from zapomni.shared.store.graphstore import refuses_writes
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import BUILD_GRAPH, queue_task
from zapomni.workers.resources import Resources, resources
from zapomni.workers.store import undo_memory

J = TypeVar("J")
T = TypeVar("T")  # a job of one task: its task_id, namespace (and memory_id, if any)

log = logging.getLogger(__name__)


# A job's limit follows its work, not the clock: it is retried when it has made no progress
# for STALL_SECONDS (``progressed``: a memory chunked, a slice of texts embedded, a write, a
# batch read), however long the whole takes. A fixed 120 s ran over on a busy host (issue 45:
# at load 40, workers at nice 10 got a few percent of a core and a batch of 32 KiB timed out
# while chunking, 130 times in 40 min, each retry from the start). Only a hung call stalls:
# every call out (Redis, FalkorDB, Ollama) has a timeout of its own, a unit of work is at most
# seconds idle and a few minutes starved, and a SIGSTOPped worker (3 min in the faults
# campaign) is not a stall.
STALL_SECONDS = 600
# a job's whole life, at most: arq's job_timeout; ours fires first (``deadline``), so arq never
# ends a job whose task it leaves running (issue 51: arq's 120 s timeout did that to 16 tasks)
JOB_CEILING = 6 * 3600
# seconds a walking job (a graph part, a files slice, a re-embed step) reads before it hands
# the rest to a continuation job: what it did is kept, and its lease is short to take over
SLICE_SECONDS = 60
# attempts per job (with backoff 2, 4, ... 60 s: about three minutes of an outage ridden out);
# a job whose worker died on every try fails its task
MAX_TRIES = 8


def deadline(job_timeout: int) -> float:
    """Our own deadline fires before arq's job_timeout, so a slow job retries (arq would
    fail it for good) and its task says why."""
    return job_timeout - min(5.0, job_timeout * 0.1)


_RUN: contextvars.ContextVar[JobRun | None] = contextvars.ContextVar("zapomni_job", default=None)


def progressed() -> None:
    """The job running here finished a unit of work: its stall limit starts again. Called in
    the job's task or in a thread it started (asyncio.to_thread carries the context)."""
    run = _RUN.get()
    if run is not None:
        run.progress_at = time.monotonic()


async def _watch(run: JobRun, limit: asyncio.Timeout) -> None:
    """Fire ``limit`` (in the job's own task) once the job has made no progress for
    STALL_SECONDS."""
    loop = asyncio.get_running_loop()
    while True:
        idle = time.monotonic() - run.progress_at
        if idle >= STALL_SECONDS:
            run.stalled = True
            limit.reschedule(loop.time())
            return
        await asyncio.sleep(min(STALL_SECONDS - idle + 0.01, STALL_SECONDS / 4))


class JobAbandoned(Exception):
    """Every try of this job so far ended with its worker gone (killed, or lost its lease)."""


@dataclass
class JobRun:
    """What became of one run of a job; counted in zapomni_jobs_total."""

    outcome: str = "done"  # done, cancelled, retry, failed
    started: float = field(default_factory=time.monotonic)  # a job's time share counts from here
    progress_at: float = field(default_factory=time.monotonic)  # its last unit of work
    stalled: bool = False  # its stall limit fired


Owner = tuple[str, str, str]  # a task a job runs: its id, namespace and memory ('' if none)


@asynccontextmanager
async def tasks_outcome(ctx: dict, job: str, owners: list[Owner]) -> AsyncIterator[JobRun]:
    """What a failure of the job means for the tasks it runs (several: a batch of memories,
    workers/ingest.py): every one still active fails, or waits while the job is retried."""
    res = resources(ctx)
    run = JobRun()
    started = time.perf_counter()
    token = _RUN.set(run)
    try:
        async with asyncio.timeout(deadline(JOB_CEILING)) as limit:
            watch = asyncio.create_task(_watch(run, limit), name="zapomni-job-watch")
            try:
                yield run
            finally:
                watch.cancel()
    except (EmbeddingRejected, JobAbandoned) as exc:
        run.outcome = "failed"
        for owner in owners:
            await fail_task(res, *owner, exc.message if isinstance(exc, ZapomniError)
                            else str(exc))
    except Exception as exc:
        run.outcome = "retry"
        await retry_or_fail(res, ctx, owners, transient_reason(exc, run))
        run.outcome = "failed"
    finally:
        _RUN.reset(token)
        metrics.JOBS.labels(job, run.outcome).inc()
        metrics.JOB_SECONDS.labels(job).observe(time.perf_counter() - started)
        if run.stalled:
            metrics.JOB_STALLS.labels(job).inc()


def transient_reason(exc: Exception, run: JobRun | None = None) -> str:
    """What a retried task says it waits for."""
    if isinstance(exc, ZapomniError):
        return exc.message
    if isinstance(exc, TimeoutError) and run is not None and run.stalled:
        return f"the job made no progress for {STALL_SECONDS} s"
    if isinstance(exc, TimeoutError):
        return "the job ran over its time limit"
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return "Redis is unreachable"
    if refuses_writes(exc):
        return "Redis cannot write (its disk is full or its memory limit is reached)"
    log.error("unexpected error in a job", exc_info=exc)
    return "internal error (details in the worker's log)"


async def retry_or_fail(res: Resources, ctx: dict, owners: list[Owner], reason: str) -> None:
    attempt = int(ctx.get("job_try", 1))
    if attempt >= MAX_TRIES:
        for owner in owners:
            await fail_task(res, *owner, f"{reason} (gave up after {attempt} attempts)")
        return
    delay = min(60, 2**attempt)
    log.warning("task %s attempt %d: %s; retrying in %ds", owners[0][0], attempt, reason,
                delay)
    for task_id, _, _ in owners:
        await _quietly(tasks.move(
            res.redis, task_id, ttl=res.task_ttl, heartbeat_at=time.time(),
            message=f"waiting: {reason}; attempt {attempt} of {MAX_TRIES}, "
                    f"retrying in {delay}s"))
    raise Retry(defer=delay)


Work = Callable[[Resources, JobRun, T], Awaitable[str]]
Ended = Callable[[Resources, T, str], Awaitable[None]]


def task_job(name: str, kind: type[T], *, owning: bool = False, ended: Ended | None = None,
             restores: str = "") -> Callable[[Work], Callable[[dict, Any], Awaitable[str]]]:
    """The arq job function of ``work(res, run, job)``: the payload read as a ``kind`` (one
    this worker cannot read fails its task), then ``run_task``."""
    def wrap(work: Work) -> Callable[[dict, Any], Awaitable[str]]:
        async def job_function(ctx: dict, payload: Any) -> str:
            job = await read_job(resources(ctx), payload, kind)
            if job is None:
                return "unreadable"
            return await run_task(ctx, name, job, work, owning=owning, ended=ended,
                                  restores=restores)
        job_function.__name__ = job_function.__qualname__ = work.__name__
        return job_function
    return wrap


async def run_task(ctx: dict, name: str, job: T, work: Work, *, owning: bool = False,
                   ended: Ended | None = None, restores: str = "") -> str:
    """The prologue every job of a task shares: what a failure means for its task
    (tasks_outcome), the task started (or resumed), ``work`` run. A task that has ended
    (``owning``: or lost its memory) does not start again: the job only calls ``ended(res,
    job, the state its start found)``. A job that carries all it needs (``restores``: its
    task's kind) writes its record again if it is gone while the job holds its memory."""
    res = resources(ctx)
    async with tasks_outcome(ctx, name, [(job.task_id, job.namespace,
                                          getattr(job, "memory_id", ""))]) as run:
        moved = await start_task(res, ctx, job.task_id, owning=owning)
        if not moved.ok and not moved.before and restores:
            moved = await restore(res, ctx, job, restores)
        if not moved.ok:
            if ended is not None:
                await ended(res, job, moved.before)
            run.outcome = "done" if moved.before == "done" else "cancelled"
            return run.outcome
        return await work(res, run, job)
    return run.outcome


async def restore(res: Resources, ctx: dict, job: Any, kind: str) -> tasks.Moved:
    """The record of ``job``'s task written again from the job, running, if the job still
    holds its memory (tasks.restore_task)."""
    now = time.time()
    record = TaskRecord(task_id=job.task_id, kind=kind, namespace=job.namespace,
                        memory_id=job.memory_id, total=1, created_at=now, started_at=now,
                        heartbeat_at=now, worker=res.worker_id,
                        attempts=this_attempt(res, ctx),
                        message="its record was lost; written again from its job")
    if await tasks.restore_task(res.redis, record, res.task_ttl):
        log.warning("task %s: its record was gone; written again from its job", job.task_id)
        return tasks.Moved(True, "running")
    return tasks.Moved(False, "")


async def fail_task(res: Resources, task_id: str, namespace: str, memory_id: str,
                    reason: str) -> None:
    """Fail an active task for good (a finished one stays as it is). A failed ingest
    leaves nothing half-written and gives its memory up, so the text may be added again;
    a failed delete gives it up too (what it removed stays removed)."""
    moved = await tasks.end_and_release(res.redis, task_id, "failed", ttl=res.task_ttl,
                                        error=reason, finished_at=time.time(),
                                        message="failed")
    if not moved.ok:
        return  # ended already: a late re-run of a finished task must not undo it
    log.error("task %s failed: %s", task_id, reason)
    if memory_id:
        record = await tasks.get_task(res.redis, task_id)
        if record is not None and record.kind == "ingest":
            await undo_memory(res.store.graph(namespace), memory_id, task_id)


async def _quietly(coro) -> None:
    try:
        await coro
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        log.warning("could not record task progress: Redis is unreachable")
    except redis.exceptions.ResponseError as exc:
        if not refuses_writes(exc):
            raise
        log.warning("could not record task progress: Redis cannot write (a full disk?)")


async def start_task(res: Resources, ctx: dict, task_id: str, *,
                     owning: bool = False) -> tasks.Moved:
    """Record that a job of this task runs here (queued or running -> running); refused once
    the task has ended or, ``owning``, lost its memory; JobAbandoned past the last try (arq
    allows one try more than max_tries so that this runs)."""
    attempt = this_attempt(res, ctx)
    return await tasks.move(res.redis, task_id, "running", ttl=res.task_ttl, owning=owning,
                            worker=res.worker_id, heartbeat_at=time.time(), attempts=attempt)


def this_attempt(res: Resources, ctx: dict) -> int:
    """Which try of its job this is; JobAbandoned past the last."""
    attempt = int(ctx.get("job_try", 1))
    if attempt > MAX_TRIES:
        raise JobAbandoned(f"gave up after {attempt - 1} attempts: the worker running this "
                           "job stopped each time; see the workers' logs")
    return attempt


async def read_job(res: Resources, payload: Any, kind: type[J]) -> J | None:
    """Decode a job leniently (fields it does not know are ignored). A job this worker
    cannot read at all fails its task, with a message that says why, instead of being
    retried until it expires."""
    try:
        return msgspec.convert(payload, kind)
    except msgspec.ValidationError as exc:
        problem = describe(exc)
    version = payload.get("version", "?") if isinstance(payload, dict) else "?"
    task_id = payload.get("task_id") if isinstance(payload, dict) else None
    reason = (f"this worker cannot read the job ({problem}; job version {version}, the "
              f"worker reads version {JOB_VERSION}): run workers of the same Zapomni "
              "version as the front")
    log.error("unreadable %s: %s", kind.__name__, reason)
    if isinstance(task_id, str) and re.fullmatch(TASK_ID_PATTERN, task_id):
        await tasks.end_and_release(res.redis, task_id, "failed", ttl=res.task_ttl,
                                    error=reason, finished_at=time.time(), message="failed")
    return None


async def follow_with_graph(res: Resources, write_task_id: str, namespace: str,
                            memory_ids: list[str] | None, memory_id: str = "") -> str:
    """A graph task after a write task (``memory_ids`` None: every chunk of the namespace
    not yet read for entities), unless the namespace has automatic extraction turned off.
    Idempotent (the id is derived from the write task's). Returns its id, or ''."""
    if not res.settings.graph_on(namespace):
        return ""
    task_id = graph_task_id(write_task_id)
    await queue_task(res.redis, res.settings, TaskRecord(
        task_id=task_id, kind="graph", namespace=namespace, memory_id=memory_id,
        created_at=time.time(), message="waiting for a worker"), BUILD_GRAPH,
        GraphJob(task_id=task_id, namespace=namespace, memory_ids=memory_ids), bounded=False)
    return task_id
