"""Real arq workers, run in-process in burst mode (they stop when the queue is empty)."""

from __future__ import annotations

import asyncio

from shared.settings import Settings
from workers.main import make_worker


async def run_workers(settings: Settings, count: int = 1, timeout: float = 120.0) -> None:
    workers = [make_worker(settings, burst=True, handle_signals=False) for _ in range(count)]
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(w.main() for w in workers))
    finally:
        for worker in workers:
            await worker.close()
