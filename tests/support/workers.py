"""Real arq workers, run in-process in burst mode (they stop when the queue is empty)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

import msgspec
from redis.asyncio import Redis

from zapomni.services.cli.progress import Progress
from zapomni.services.cli.restore import queue_graph, queue_import
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import AddReceipt
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import connect_queue
from zapomni.workers import edits, graph, ingest, upkeep
from zapomni.workers.main import make_worker

ENDED = tasks.TERMINAL  # a task in one of these states changes no more


Checkpoint = Callable[[str, Any], Awaitable[None]]
# every chunk embedded, as the benchmarks that measure embedding ran: no vector cache
# (worker_processes(constants=...); tests/support/patched_worker.py)
UNCACHED = {"zapomni.workers.resources.CachedEmbedder": {
    "object": "tests.support.patched_worker:uncached"}}


def before(point: str | None, jobs_of: Callable[..., list]):
    """A step wrapped to await the checkpoint with (point, job) for each of its jobs first
    (``point`` None: the step's last argument names the point: keep_owned's write)."""
    def wrap(step, checkpoint: Checkpoint):
        async def wrapped(*args):
            for job in jobs_of(*args):
                await checkpoint(point or args[-1], job)
            return await step(*args)
        return wrapped
    return wrap


def after(point: str, job_of: Callable[..., Any]):
    """A step wrapped to await the checkpoint with (point, what ``job_of(result, *args)``
    says) once it returned (None: no point reached)."""
    def wrap(step, checkpoint: Checkpoint):
        async def wrapped(*args):
            result = await step(*args)
            job = job_of(result, *args)
            if job is not None:
                await checkpoint(point, job)
            return result
        return wrapped
    return wrap


# The named points a checkpoint sees, each the product step it comes before or after: a test
# forces a race at its exact moment (a delete between two writes, a crash after a batch)
STEPS = [
    # "owned": the job's task started and holds its memory; nothing is written yet
    (ingest, "chunk_text", before("owned", lambda res, job: [job])),
    (ingest, "chunk_all", before("owned", lambda res, jobs: jobs)),
    (ingest, "write_part", before("owned", lambda res, run, job, since: [job])),
    # "memory_written", "part_written": a write done, before the ownership is checked again
    (ingest, "keep_owned", before(None, lambda res, jobs, step: jobs)),
    (ingest, "make_searchable", before("finishing", lambda res, jobs: jobs)),
    (edits, "write_metadata", before("update_owned", lambda graph, job: [job])),
    (edits, "write_metadata", after("updated", lambda done, graph, job: job)),
    (edits, "delete_memory_graph",
     after("deleted", lambda done, graph, memory_id: SimpleNamespace(memory_id=memory_id))),
    # the job, with the last chunk id its batch read
    (graph, "read_batch", after("graph_batch", lambda last, res, g, job, rows:
                                msgspec.structs.replace(job, after=last))),
    (edits, "reembed_batch", after("reembed_batch", lambda going, res, job, prop, rows:
                                     job if going else None)),
    (upkeep, "fold_events", after("access_folded", lambda n, res, entries: entries)),
]


@contextmanager
def checkpoints(checkpoint: Checkpoint | None) -> Iterator[None]:
    """The workers of this process await ``checkpoint(point, job)`` at the named points of
    their jobs (STEPS) while this lasts."""
    if checkpoint is None:
        yield
        return
    replaced = []
    for module, name, wrap in STEPS:
        replaced.append((module, name, getattr(module, name)))
        setattr(module, name, wrap(getattr(module, name), checkpoint))
    try:
        yield
    finally:
        for module, name, step in reversed(replaced):
            setattr(module, name, step)


async def run_workers(settings: Settings, count: int = 1, timeout: float = 120.0,
                      max_jobs: int = -1, checkpoint: Checkpoint | None = None) -> None:
    """``count`` burst workers until the queue is empty (or, with ``max_jobs`` >= 0, until
    each has started that many jobs); fail after ``timeout`` seconds. ``checkpoint``:
    awaited at the named points of each job (STEPS), to act at an exact moment."""
    workers = [make_worker(settings, burst=True, handle_signals=False) for _ in range(count)]
    for worker in workers:
        worker.max_burst_jobs = max_jobs  # arq's own stop after N jobs in burst mode
    deadline = asyncio.timeout(timeout)
    try:
        with checkpoints(checkpoint):
            async with deadline:
                await asyncio.gather(*(w.main() for w in workers))
    except TimeoutError:
        if not deadline.expired():
            raise
        raise AssertionError(f"{count} burst worker(s) did not empty the queue within "
                             f"{timeout:.0f} s") from None
    finally:
        for worker in workers:
            await worker.close()


def on_graph_batch(act: Callable[[Any, str], Awaitable[None]]
                   ) -> Callable[[str, Any], Awaitable[None]]:
    """A checkpoint for run_workers that awaits ``act(job, last chunk id read)`` after each
    batch a graph part writes (workers/graph.py)."""
    async def checkpoint(point: str, job: Any) -> None:
        if point == "graph_batch":
            await act(job, job.after)
    return checkpoint


async def add_text(settings: Settings, text: str, metadata: dict[str, Any] | None = None,
                   namespace: str | None = None) -> AddReceipt:
    """add_memory through the front's code path, with a front of these settings."""
    front = Front(settings)
    try:
        return await ops.add_memory(front, decode_add_memory(text, metadata, namespace))
    finally:
        await front.aclose()


async def wait_tasks(redis: Redis, task_ids: list[str], timeout: float = 600,
                     until: tuple[str, ...] = ("done",)) -> None:
    """Poll task records until each is in one of the ``until`` states; fail at once when one
    ends otherwise, and after ``timeout`` seconds. Oldest first, and only up to the first one
    still pending: workers take tasks about in order, so each poll reads a record or two, not
    all (polling hundreds every 0.1 s took ~7% of the CPU an ingest benchmark measures)."""
    pending = list(dict.fromkeys(task_ids))
    deadline = time.monotonic() + timeout
    while pending:
        record = await tasks.get_task(redis, pending[0])
        if record is not None and record.state in until:
            pending.pop(0)
            continue
        if record is not None and record.state in ENDED:
            raise AssertionError(f"task {record.task_id} ({record.kind}) ended "
                                 f"{record.state!r}, not {'/'.join(until)}: "
                                 f"{record.error or record.message}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(pending)} task(s) not {'/'.join(until)} after "
                                 f"{timeout:.0f} s; the first: {record!r}")
        await asyncio.sleep(0.1)


class WorkerPool:
    """Real ``python -m zapomni.workers`` processes with these settings (metrics off unless a
    port is given), their output in one file; processes can be started, killed and replaced.
    ``constants``: module constants set in each (tests/support/patched_worker.py)."""

    def __init__(self, settings: Settings, out: IO[bytes], *,
                 constants: dict[str, object] | None = None, **env: str) -> None:
        self.env = {**os.environ, **settings.to_env(), "ZAPOMNI_WORKER_METRICS_PORT": "0", **env}
        self.command = ["-m", "zapomni.workers"] if not constants else [
            "-m", "tests.support.patched_worker", json.dumps(constants)]
        self.out = out
        self.procs: list[subprocess.Popen] = []

    def start(self, metrics_port: int | None = None) -> subprocess.Popen:
        env = self.env if metrics_port is None else {
            **self.env, "ZAPOMNI_WORKER_METRICS_PORT": str(metrics_port)}
        proc = subprocess.Popen([sys.executable, *self.command], stdout=self.out,
                                stderr=self.out, env=env)
        self.procs.append(proc)
        return proc

    def live(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def close(self) -> None:
        """SIGTERM all, then kill any that did not stop within 30 s: a worker left behind
        would take the next test's jobs."""
        for proc in self.live():
            proc.terminate()
        try:
            for proc in self.procs:
                proc.wait(30)
        finally:
            for proc in self.live():
                proc.kill()
                proc.wait()


@contextmanager
def worker_processes(settings: Settings, count: int, *, metrics_ports: list[int] | None = None,
                     log_path: Path | None = None, constants: dict[str, object] | None = None,
                     **env: str) -> Iterator[list[subprocess.Popen]]:
    """``count`` worker processes (a WorkerPool), their output in ``log_path`` or a temporary
    file; ended on exit."""
    with (log_path.open("ab") if log_path else tempfile.TemporaryFile()) as out:
        pool = WorkerPool(settings, out, constants=constants, **env)
        try:
            yield [pool.start(metrics_ports[i] if metrics_ports else None)
                   for i in range(count)]
        finally:
            pool.close()


async def run_import(settings: Settings, path: Path, namespace: str) -> dict[str, Any]:
    """``zapomni import`` of an export file into ``namespace``, run by a worker to the end
    (its memories, then its graph's parts, as import_file queues them); the import task's
    record."""
    redis = connect_queue(settings)
    progress = Progress("t", 0, ("", ""), quiet=True)
    try:
        plan = await queue_import(settings, redis, path, namespace, progress)
        await run_workers(settings)
        if plan.graph_parts:
            await queue_graph(settings, redis, path, plan, progress)
            await run_workers(settings)
        await wait_tasks(redis, [plan.task_id])
        return await tasks.get_task(redis, plan.task_id)
    finally:
        await redis.aclose()
