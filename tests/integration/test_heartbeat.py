"""Live workers are counted from one sorted set (shared/tasks/heartbeat.py), never by scanning the
keyspace: a real worker process is counted while it lives, a silent one drops out, and a
stopped one leaves at once."""

from __future__ import annotations

import asyncio

from tests.support.workers import worker_processes
from zapomni.shared.tasks import heartbeat
from zapomni.workers.main import alive_here


async def scans(aredis) -> int:
    return int((await aredis.info("commandstats")).get("cmdstat_scan", {}).get("calls", 0))


async def until(check, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.1)


async def test_workers_are_counted_without_a_scan(settings, aredis):
    seconds, _ = await aredis.time()
    # a worker killed a minute ago: it never said goodbye
    await aredis.zadd(heartbeat.WORKERS_KEY, {"gone-host-1": seconds - 60})
    before = await scans(aredis)
    with worker_processes(settings, 1) as (process,):
        async def counted() -> bool:
            return await heartbeat.count_alive(aredis) == 1

        await until(counted)
        assert await alive_here(settings)
        # the live worker's next beat trims the one that died
        await until(lambda: _gone(aredis, "gone-host-1"), timeout=heartbeat.WORKER_TTL * 2)
        assert await heartbeat.count_alive(aredis) == 1
        process.terminate()
        process.wait(30)
        assert await heartbeat.count_alive(aredis) == 0  # a worker that stops says so
        assert not await alive_here(settings)
    assert await scans(aredis) == before


async def _gone(aredis, worker_id: str) -> bool:
    return await aredis.zscore(heartbeat.WORKERS_KEY, worker_id) is None
