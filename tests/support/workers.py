"""Real arq workers, run in-process in burst mode (they stop when the queue is empty)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from services.mcp import front as ops
from services.mcp.front import Front
from shared import tasks
from shared.messages import AddReceipt
from shared.settings import Settings
from shared.validation import decode_add_memory
from workers.main import make_worker


async def run_workers(settings: Settings, count: int = 1, timeout: float = 120.0) -> None:
    workers = [make_worker(settings, burst=True, handle_signals=False) for _ in range(count)]
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(w.main() for w in workers))
    finally:
        for worker in workers:
            await worker.close()


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
    """Poll task records until each is in one of the ``until`` states."""
    pending = set(task_ids)
    async with asyncio.timeout(timeout):
        while pending:
            for task_id in list(pending):
                if (await tasks.get_task(redis, task_id)).state in until:
                    pending.discard(task_id)
            if pending:
                await asyncio.sleep(0.1)


@contextmanager
def worker_processes(settings: Settings, count: int, *, metrics_ports: list[int] | None = None,
                     log_path: Path | None = None,
                     **env: str) -> Iterator[list[subprocess.Popen]]:
    """``count`` real ``python -m workers`` processes with these settings (metrics off unless
    ports are given), their output in ``log_path`` or a temporary file; ended on exit."""
    base = {**os.environ, **settings.to_env(), "ZAPOMNI_WORKER_METRICS_PORT": "0", **env}
    with (log_path.open("ab") if log_path else tempfile.TemporaryFile()) as out:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "workers"], stdout=out, stderr=out,
            env={**base, **({"ZAPOMNI_WORKER_METRICS_PORT": str(metrics_ports[i])}
                            if metrics_ports else {})})
            for i in range(count)]
        try:
            yield procs
        finally:
            for proc in procs:
                proc.terminate()
            try:
                for proc in procs:
                    proc.wait(30)
            finally:  # never leave a worker behind to take the next test's jobs
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
