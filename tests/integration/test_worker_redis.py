"""A worker outlives what a restarting Redis does to arq (issue 45's faults campaign: both
workers ended on a WatchError when the queue's Redis restarted). A connection that breaks
while arq watches a job's claim raises WatchError ("A ConnectionError occurred on while
watching", redis-py's words) out of arq's start_jobs, which also kept the job slot it had
taken: after max_jobs such outages a worker polled for ever and started nothing."""

from __future__ import annotations

import asyncio

import redis.asyncio.client
import redis.exceptions
from arq.constants import in_progress_key_prefix

from tests.support.workers import add_text
from zapomni.shared.tasks import tasks
from zapomni.workers.main import make_worker


async def test_a_worker_outlives_connections_broken_while_arq_watches(settings, aredis,
                                                                      monkeypatch):
    added = await add_text(settings, "The ferry's timetable changes on the first of May.")
    original = redis.asyncio.client.Pipeline.immediate_execute_command
    broken: list[str] = []

    async def watch(self, *args, **options):
        # the WATCH of a job's claim, on a connection that breaks, more times than a
        # worker has job slots
        if args[0] == "WATCH" and str(args[1]).startswith(in_progress_key_prefix) and \
                len(broken) < settings.max_jobs + 2:
            broken.append(args[1])
            self.watching = True
            raise redis.exceptions.WatchError(
                "A ConnectionError occurred on while watching one or more keys")
        return await original(self, *args, **options)

    monkeypatch.setattr(redis.asyncio.client.Pipeline, "immediate_execute_command", watch)
    worker = make_worker(settings, burst=True, handle_signals=False)
    try:
        await asyncio.wait_for(worker.main(), 120)
    finally:
        await worker.close()
    assert len(broken) == settings.max_jobs + 2
    assert (await tasks.get_task(aredis, added.task_id)).state == "done"
