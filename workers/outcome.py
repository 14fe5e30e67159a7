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

import redis.exceptions
from arq.worker import Retry

from shared import tasks
from shared.errors import EmbeddingRejected, ZapomniError
from workers.resources import Resources, resources
from workers.store import delete_memory_graph

log = logging.getLogger(__name__)


def deadline(job_timeout: int) -> float:
    """Our own deadline fires before arq's job_timeout, so a slow job retries (arq would
    fail it for good) and its task says why."""
    return job_timeout - min(5.0, job_timeout * 0.1)


@asynccontextmanager
async def task_outcome(ctx: dict, task_id: str, namespace: str,
                       memory_id: str) -> AsyncIterator[None]:
    res = resources(ctx)
    try:
        async with asyncio.timeout(deadline(res.settings.job_timeout)):
            yield
    except EmbeddingRejected as exc:
        await fail_task(res, task_id, namespace, memory_id, exc.message)
    except ZapomniError as exc:
        await retry_or_fail(res, ctx, task_id, namespace, memory_id, exc.message)
    except TimeoutError:
        await retry_or_fail(res, ctx, task_id, namespace, memory_id,
                            f"the job ran over {res.settings.job_timeout}s")
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        await retry_or_fail(res, ctx, task_id, namespace, memory_id, "Redis is unreachable")
    except Exception:
        log.exception("task %s: unexpected error", task_id)
        await retry_or_fail(res, ctx, task_id, namespace, memory_id,
                            "internal error (details in the worker's log)")


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
