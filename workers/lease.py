"""Job leases: how soon another worker takes over the jobs of a worker that died.

arq claims a running job with the key ``arq:in-progress:{job_id}``; no other worker runs the
job while that key lives. arq lets it expire after the longest job timeout + 10 s (130 s by
default), so the job of a SIGKILLed worker would wait that long. Here the claim is a lease:
it expires after ``JOB_LEASE`` seconds, holds the id of the worker running the job (so an
operator, or the chaos benchmark, can tell whose it is), and a live worker renews it four times
per lease. A dead worker renews nothing: its jobs are free again within one lease. A worker
whose loop stalls past the lease may see its job run twice, which is safe: jobs are idempotent.
"""

from __future__ import annotations

import asyncio
import logging

from arq.constants import in_progress_key_prefix

from zapomni.workers.resources import Resources, resources

log = logging.getLogger(__name__)

# seconds before another worker takes the job of a worker that died, instead of arq's 130 s
# (docs/reliability.md); a live worker renews it four times per lease
JOB_LEASE = 10


def lease_key(job_id: str) -> str:
    return in_progress_key_prefix + job_id


async def job_started(ctx: dict) -> None:
    """arq's on_job_start: the claim arq just made becomes this worker's lease."""
    res = resources(ctx)
    res.running.add(ctx["job_id"])
    await renew(res, [ctx["job_id"]])


def release(res: Resources, job_id: str) -> None:
    """The job has ended here (arq removed the claim, or could not): stop renewing it."""
    res.running.discard(job_id)


async def renew(res: Resources, job_ids: list[str]) -> None:
    """Extend the leases that still exist (XX: a finished job's claim is never re-created)."""
    if not job_ids:
        return
    lease_ms = JOB_LEASE * 1000
    async with res.redis.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.set(lease_key(job_id), res.worker_id, px=lease_ms, xx=True)
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
