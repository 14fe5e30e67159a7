"""Everything Zapomni does with arq's private parts, in one place (arq is pinned exactly in
pyproject.toml; tests/unit/test_library_internals.py fails, naming this file, if an upgrade
changes any of these shapes).

1. ``Worker._poll_iteration``, ``Worker.start_jobs`` and ``Worker.run_job`` are overridden so
   that a worker outlives a Redis outage. arq 0.28 lets a Redis connection error (or a
   refused write, or a WATCH whose connection broke) out of its poll loop, and out of a job
   whose end it could not record; either ended the worker process (measured: all three
   workers of the chaos benchmark exited when the queue's Redis restarted; both workers of
   the faults campaign when it restarted, and when its disk filled). Here the poll waits
   and tries again, and a job whose end could not be recorded is left to run again when
   its lease expires (jobs are idempotent). A job whose lease lapsed while it runs (Redis
   too slow for the renewals) is not started a second time by its own worker: arq 0.28
   keeps one entry per job id in its table of running jobs, and the second run to end
   failed the job with a KeyError. A poll cut short while arq starts a job gives back the
   job slot arq took for it (arq 0.28 keeps it: a worker stopped starting jobs after
   ``max_jobs`` outages).
2. ``Worker.in_progress_timeout_s``, the life of arq's claim on a running job, is set to a
   lease, renewed while the job runs. arq claims a running job with the key
   ``arq:in-progress:{job_id}``; no other worker runs the job while it lives. arq lets it
   expire after the longest job timeout + 10 s (130 s by default), so the job of a
   SIGKILLed worker waited that long; a lease of ``JOB_LEASE`` seconds, holding the id of
   the worker running the job (an operator, or the chaos benchmark, can tell whose it is)
   and renewed four times per lease by a live worker, frees it within one lease. A worker
   whose loop stalls past the lease may see its job run twice, which is safe: jobs are
   idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.exceptions
from arq.constants import in_progress_key_prefix
from arq.worker import Worker

from zapomni.shared.store.graphstore import refuses_writes
from zapomni.workers.resources import Resources, resources

log = logging.getLogger(__name__)

# seconds before another worker takes the job of a worker that died, instead of arq's 130 s
# (docs/reliability.md); a live worker renews it four times per lease
JOB_LEASE = 10

# Redis down; a WATCH whose connection broke (redis-py raises WatchError "A ConnectionError
# occurred on while watching", which arq's start_jobs lets out: both workers of the faults
# campaign ended on it when the queue's Redis restarted)
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
              redis.exceptions.WatchError)


def redis_away(exc: BaseException) -> bool:
    """Redis down, or refusing writes for now (a full disk: shared/tasks/queue.py)."""
    return isinstance(exc, REDIS_DOWN) or refuses_writes(exc)


class ZapomniWorker(Worker):
    redis_lost_at: float | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.running_here: dict[str, asyncio.Task] = {}  # the jobs this process runs now

    async def _poll_iteration(self) -> None:
        try:
            await super()._poll_iteration()
        except Exception as exc:
            if not redis_away(exc):
                raise
            if self.redis_lost_at is None:
                self.redis_lost_at = time.monotonic()
                log.warning("the queue's Redis is unreachable or cannot write (%s); waiting "
                            "for it", type(exc).__name__)
            await asyncio.sleep(1.0)
            return
        if self.redis_lost_at is not None:
            log.info("the queue's Redis is back after %.1f s",
                     time.monotonic() - self.redis_lost_at)
            self.redis_lost_at = None

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        try:
            await super().start_jobs(job_ids)
        except Exception:
            # arq took a slot (its semaphore and job_counter) for the job it was starting
            # when this came (a WATCH on a connection that broke) and keeps it: after
            # max_jobs such outages the worker would poll for ever and start nothing
            self.job_counter -= 1
            self.sem.release()
            raise

    async def run_job(self, job_id: str, score: int) -> None:
        running = self.running_here.get(job_id)
        if running is not None:
            # its lease lapsed (renewals failed) while it runs here; arq's claim just made
            # is the lease again, the run under way keeps renewing it, and arq's table of
            # tasks points at that run again, not at this one
            log.warning("job %s is still running in this worker; its lease lapsed and is "
                        "taken again, the job is not started twice", job_id)
            self.tasks[job_id] = running
            return
        self.running_here[job_id] = asyncio.current_task()
        try:
            await super().run_job(job_id, score)
        except Exception as exc:
            if not redis_away(exc):
                raise
            log.warning("job %s: Redis went away (or could not write) before its end was "
                        "recorded; it runs again when its lease expires", job_id)
        finally:
            del self.running_here[job_id]
            if "res" in self.ctx:  # the job has ended here: its lease is renewed no more
                self.ctx["res"].running.discard(job_id)


def set_claim_seconds(worker: Worker, seconds: float) -> None:
    """How long arq's claim on a job it starts (``arq:in-progress:{job_id}``) lives."""
    worker.in_progress_timeout_s = seconds


def lease_key(job_id: str) -> str:
    return in_progress_key_prefix + job_id


async def job_started(ctx: dict) -> None:
    """arq's on_job_start: the claim arq just made becomes this worker's lease."""
    res = resources(ctx)
    res.running.add(ctx["job_id"])
    await renew(res, [ctx["job_id"]])


async def renew(res: Resources, job_ids: list[str]) -> None:
    """Extend the leases that still exist (XX: a finished job's claim is never re-created)."""
    if not job_ids:
        return
    async with res.redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.set(lease_key(job_id), res.worker_id, px=JOB_LEASE * 1000, xx=True)
        await pipe.execute()


def start_leases(res: Resources) -> None:
    res.leases = asyncio.create_task(keep_leases(res), name="zapomni-worker-leases")


async def keep_leases(res: Resources) -> None:
    """Renew this worker's leases every quarter lease while it lives."""
    while True:
        await asyncio.sleep(JOB_LEASE / 4)
        try:
            await renew(res, list(res.running))
        except Exception as exc:  # Redis away: the jobs retry anyway; keep trying
            log.warning("could not renew job leases: %s", type(exc).__name__)
