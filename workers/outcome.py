"""What a job's failure means for its task: wait and retry, or fail and clean up.

Embedder or store outages are retried with backoff (the task says what it waits for); a
rejected embedding fails the task at once. A failed ingest leaves nothing half-written: its
chunks and memory node are removed and the text may be added again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.exceptions
from arq.worker import Retry

from shared import metrics, tasks
from shared.errors import EmbeddingRejected, ZapomniError
from workers.resources import Resources, resources
from workers.store import delete_memory_graph

log = logging.getLogger(__name__)


def deadline(job_timeout: int) -> float:
    """Our own deadline fires before arq's job_timeout, so a slow job retries (arq would
    fail it for good) and its task says why."""
    return job_timeout - min(5.0, job_timeout * 0.1)


class JobAbandoned(Exception):
    """Every try of this job so far ended with its worker gone (killed, or lost its lease)."""


@dataclass
class JobRun:
    """What became of one run of a job; counted in zapomni_jobs_total."""

    outcome: str = "done"  # done, cancelled, retry, failed


@asynccontextmanager
async def task_outcome(ctx: dict, job: str, task_id: str, namespace: str,
                       memory_id: str) -> AsyncIterator[JobRun]:
    res = resources(ctx)
    run = JobRun()
    started = time.perf_counter()
    try:
        async with asyncio.timeout(deadline(res.settings.job_timeout)):
            yield run
    except EmbeddingRejected as exc:
        run.outcome = "failed"
        await fail_task(res, task_id, namespace, memory_id, exc.message)
    except JobAbandoned as exc:
        run.outcome = "failed"
        await fail_task(res, task_id, namespace, memory_id, str(exc))
    except Exception as exc:
        run.outcome = "retry"
        await retry_or_fail(res, ctx, task_id, namespace, memory_id, transient_reason(exc))
        run.outcome = "failed"
    finally:
        metrics.JOBS.labels(job, run.outcome).inc()
        metrics.JOB_SECONDS.labels(job).observe(time.perf_counter() - started)


def transient_reason(exc: Exception) -> str:
    """What a retried task says it waits for."""
    if isinstance(exc, ZapomniError):
        return exc.message
    if isinstance(exc, TimeoutError):
        return "the job ran over its time limit"
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return "Redis is unreachable"
    log.error("unexpected error in a job", exc_info=exc)
    return "internal error (details in the worker's log)"


async def retry_or_fail(res: Resources, ctx: dict, task_id: str, namespace: str,
                        memory_id: str, reason: str) -> None:
    attempt = int(ctx.get("job_try", 1))
    if attempt >= res.settings.max_tries:
        await fail_task(res, task_id, namespace, memory_id,
                        f"{reason} (gave up after {attempt} attempts)")
        return
    delay = min(60, 2**attempt)
    log.warning("task %s attempt %d: %s; retrying in %ds", task_id, attempt, reason, delay)
    await _quietly(tasks.update_task(
        res.redis, task_id, namespace, heartbeat_at=time.time(),
        message=f"waiting: {reason}; attempt {attempt} of {res.settings.max_tries}, "
                f"retrying in {delay}s"))
    raise Retry(defer=delay)


async def fail_task(res: Resources, task_id: str, namespace: str, memory_id: str,
                    reason: str) -> None:
    record = await tasks.get_task(res.redis, task_id)
    if record is not None and record.state in ("done", "cancelled"):
        return  # a late re-run of a finished task must not undo it
    log.error("task %s failed: %s", task_id, reason)
    if record is not None and record.kind == "ingest":
        await delete_memory_graph(res.store.graph(namespace), memory_id)
        await tasks.release_memory(res.redis, namespace, memory_id, task_id)
    await tasks.update_task(res.redis, task_id, namespace, state="failed", error=reason,
                            finished_at=time.time(), message="failed")


async def _quietly(coro) -> None:
    try:
        await coro
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        log.warning("could not record task progress: Redis is unreachable")


async def start_task(res: Resources, ctx: dict, task_id: str, namespace: str) -> None:
    """Record that a job of this task runs here; give up on a job whose earlier tries all
    died with their worker (arq allows one try more than max_tries so that this runs)."""
    attempt = int(ctx.get("job_try", 1))
    if attempt > res.settings.max_tries:
        raise JobAbandoned(f"gave up after {attempt - 1} attempts: the worker running this "
                           "job stopped each time; see the workers' logs")
    now = time.time()
    record = await tasks.get_task(res.redis, task_id)
    fields: dict[str, object] = {"worker": res.worker_id, "heartbeat_at": now,
                                 "attempts": ctx.get("job_try", 1)}
    if record is None or record.state == "queued":
        fields.update(state="running", started_at=now)
    await tasks.update_task(res.redis, task_id, namespace, **fields)
