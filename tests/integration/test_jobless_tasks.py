"""No task is left queued or running without a job, whatever ends its job (issue 51, item 1).

After arq's own 120 s limit ended `ingest_batch` jobs, 16 tasks stayed "running ... retrying
in 4s" for 55 minutes with an empty queue, and the same files added again were "unchanged".
Here jobs are ended every way arq ends one without our code: its time limit (arq's below
ours, as it was), tries spent (a worker SIGKILLed on its last try), a job expired; then one
sweep (the workers' periodic one) and every task record is checked against the queue."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile

import pytest
from arq.constants import job_key_prefix, retry_key_prefix

from tests.conftest import make_settings
from tests.support.graph import stored
from tests.support.servers import kill
from tests.support.waiting import eventually
from tests.support.workers import add_text, checkpoints, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import BuildGraph, MemoryRef
from zapomni.shared.tasks import capacity, tasks
from zapomni.shared.tasks.queue import connect_queue
from zapomni.workers import ingest, outcome, upkeep
from zapomni.workers.arq_internals import lease_key
from zapomni.workers.main import make_worker
from zapomni.workers.resources import close_resources, open_resources

TEXTS = {name: f"The {name} note: the ferry to the {name} island leaves at dawn."
         for name in ("timed", "killed", "expired", "deleted")}
DOCUMENT = " ".join(f"Entry {i}: the ferry schedule for pier {i} changes in winter."
                    for i in range(400))


async def one_worker(settings, *, arq_limit: float | None = None, hook=None) -> None:
    """A burst worker until the queue is empty; ``arq_limit``: arq's job_timeout below our
    own limit (the configuration of issue 51)."""
    worker = make_worker(settings, burst=True, handle_signals=False)
    if arq_limit is not None:
        worker.job_timeout_s = arq_limit
    try:
        with checkpoints(hook):
            await worker.main()
    finally:
        await worker.close()


async def periodic_sweep(settings) -> None:
    """The workers' sweep (an arq cron job every SWEEP_MINUTES), run once."""
    ctx = {"redis": connect_queue(settings)}
    try:
        await open_resources(ctx, settings)
        await upkeep.sweep_memories(ctx)
    finally:
        await close_resources(ctx)
        await ctx["redis"].aclose()


async def records(aredis) -> list[tasks.TaskRecord]:
    found = []
    async for key in aredis.scan_iter(match=tasks.TASK_KEY + "*", count=1000):
        found.append(await tasks.get_task(aredis, key.decode()[len(tasks.TASK_KEY):]))
    return found


async def held_by_no_job(aredis) -> list[tasks.TaskRecord]:
    """Every task record queued or running whose job arq no longer has (none of its job
    ids, nor its batch's, is in arq's queue)."""
    queued = {tasks.as_text(j) for j in await aredis.zrange(capacity.QUEUE_NAME, 0, -1)}
    holders = {j.split(":", 1)[0] for j in queued}
    for job_id in queued:
        holders.update(tasks.as_text(m) for m in await aredis.hkeys(capacity.BATCH_PREFIX +
                                                                      job_id))
    return [r for r in await records(aredis)
            if r.state in tasks.ACTIVE and r.task_id not in holders]


@pytest.mark.timeout(900)
async def test_no_task_is_left_waiting_when_its_job_is_gone(falkordb_url, fake_ollama, aredis,
                                                             query_service, monkeypatch):
    fake_ollama.latency = 0.25
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=16,
                             max_jobs=1, graph_auto=False,
                             query_url=f"http://127.0.0.1:{query_service.rsplit(':', 1)[1]}")
    front = Front(settings)
    try:
        # stored first, to be deleted below
        deleted = await add_text(settings, TEXTS["deleted"])
        await run_workers(settings)

        # 1. arq's time limit ends an ingest's job while it runs (ours is longer)
        timed = await add_text(settings, TEXTS["timed"])

        async def slow(point, job):
            if point == "owned" and getattr(job, "task_id", "") == timed.task_id:
                await asyncio.sleep(5)

        await one_worker(settings, arq_limit=1, hook=slow)
        assert (await tasks.get_task(aredis, timed.task_id)).state == "running"

        # 2. a delete, and a graph task, whose tries are spent (every worker that ran them
        # died), and a graph task whose job expired while it waited
        gone = await ops.delete_memory(front, MemoryRef(memory_id=deleted.memory_id))
        spent = await ops.build_graph(front, BuildGraph())
        await aredis.set(retry_key_prefix + gone.task_id, outcome.MAX_TRIES + 1)
        await aredis.set(retry_key_prefix + spent.task_id, outcome.MAX_TRIES + 1)
        expired = await ops.build_graph(front, BuildGraph(rebuild=True))
        await aredis.delete(job_key_prefix + expired.task_id)
        await one_worker(settings)

        # 3. a worker SIGKILLed mid-document, on its job's last try (the embedder does not
        # answer meanwhile: the job is surely mid-document, its memory node written)
        document = await add_text(settings, DOCUMENT)
        fake_ollama.latency = 60
        await kill_on_last_try(settings, aredis, document.task_id)
        fake_ollama.latency = 0.25
        await run_workers(settings, timeout=180)  # arq takes the job once its lease lapses

        left = {r.task_id for r in await held_by_no_job(aredis)}
        assert {timed.task_id, gone.task_id, spent.task_id, expired.task_id,
                document.task_id} <= left  # the problem, as it was

        # (the tasks' grace is 2 minutes; none here, and only for this sweep: one that a
        # burst worker runs meanwhile on the clock's minute must not see them early)
        monkeypatch.setattr(upkeep, "JOBLESS_GRACE", 0, raising=False)
        await periodic_sweep(settings)

        assert await held_by_no_job(aredis) == []
        assert await aredis.zcard(capacity.QUEUE_NAME) == 0
        for record in await records(aredis):
            assert record.state in tasks.TERMINAL, record
        for task_id, again in ((timed.task_id, "add the text again"),
                               (gone.task_id, "delete the memory again"),
                               (spent.task_id, "call build_graph again"),
                               (expired.task_id, "call build_graph again"),
                               (document.task_id, "add the text again")):
            record = await tasks.get_task(aredis, task_id)
            assert record.state == "failed" and record.error.endswith(again), record
        # nothing half-written, and what failed may be done again
        counts = await stored(settings)
        assert counts["memories"] == counts["ready"] == 1  # the memory not deleted yet
        assert counts["orphan_chunks"] == 0
        again = await add_text(settings, TEXTS["timed"])
        assert not again.duplicate
        redo = await ops.delete_memory(front, MemoryRef(memory_id=deleted.memory_id))
        await run_workers(settings)
        for task_id in (again.task_id, redo.task_id):
            assert (await tasks.get_task(aredis, task_id)).state == "done"
    finally:
        await front.aclose()


async def kill_on_last_try(settings, aredis, task_id: str) -> None:
    """A worker process takes the document's job; once it holds it, arq's count of its tries
    says every try is spent, and the worker is SIGKILLed."""
    env = {**os.environ, **settings.to_env(), "ZAPOMNI_WORKER_METRICS_PORT": "0"}
    with tempfile.TemporaryFile() as log:
        worker = subprocess.Popen([sys.executable, "-m", "zapomni.workers"], env=env,
                                  stdout=log, stderr=log)
        name = f"{socket.gethostname()}-{worker.pid}".encode()
        try:
            await eventually(lambda: aredis.get(lease_key(task_id)), lambda owner: owner == name,
                             "the worker to hold the document's job", timeout=180)
            await aredis.set(retry_key_prefix + task_id, outcome.MAX_TRIES + 1)
        finally:
            kill(worker)


async def test_a_job_that_makes_no_progress_is_retried_then_failed_saying_why(
        settings, aredis, monkeypatch):
    """Our own limit ends a hung job, never arq's: retried, then failed with the reason,
    its memory given up (issue 45 item 6: a job's limit follows its progress)."""
    monkeypatch.setattr(outcome, "STALL_SECONDS", 1)
    monkeypatch.setattr(outcome, "MAX_TRIES", 2)
    receipt = await add_text(settings, TEXTS["timed"])

    async def hang(point, job):
        if point == "owned":
            await asyncio.Event().wait()

    await run_workers(settings, checkpoint=hang)
    record = await tasks.get_task(aredis, receipt.task_id)
    assert (record.state, record.attempts, record.error) == (
        "failed", 2, "the job made no progress for 1 s (gave up after 2 attempts)")
    assert await tasks.owner_task(aredis, "default", receipt.memory_id) is None
    assert (await stored(settings))["memories"] == 0


async def test_a_slow_job_that_makes_progress_runs_to_its_end(falkordb_url, fake_ollama,
                                                              aredis, monkeypatch):
    """A batch whose whole work takes longer than the stall limit, each slice of it far less:
    it is never retried. (The margins are wide: a slice waits 4 s on the embedder, the limit
    is 20 s, so a loaded host's pauses between slices do not decide the outcome.)"""
    monkeypatch.setattr(outcome, "STALL_SECONDS", 20)
    monkeypatch.setattr(ingest, "EMBED_SLICE", 16)
    fake_ollama.latency = 4.0  # each slice of 16 texts: ~4 s; the batch's ~100 chunks: ~28 s
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=16,
                             graph_auto=False)
    receipts = [await add_text(settings, f"Note {i}: " + " ".join(
        f"the {i}th ferry calls at pier {j} on the way to the island." for j in range(5)))
        for i in range(20)]
    assert len({r.task_id for r in receipts}) == 20
    await run_workers(settings, timeout=300)
    records = [await tasks.get_task(aredis, receipt.task_id) for receipt in receipts]
    for record in records:
        assert (record.state, record.attempts) == ("done", 1)
    assert (await stored(settings))["chunks"] > 4 * 16
    # the whole took longer than the limit: the limit followed the progress, not the clock
    assert max(r.finished_at for r in records) - min(r.started_at for r in records) > 20
