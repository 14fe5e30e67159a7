"""Real arq workers, run in-process in burst mode (they stop when the queue is empty)."""

from __future__ import annotations

import asyncio
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
