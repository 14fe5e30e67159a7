"""A part of a document run twice (arq delivers at least once) whose first run ends after the
other parts have made the memory complete leaves the memory as it is (issue 45's faults
campaign: a worker SIGSTOPped mid-part resumed after its lease had lapsed and the part had
run again elsewhere; its run found the task done, took that for a cancel and undid the
whole memory: 'done', and not stored)."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec

from tests.support.graph import stored
from tests.support.waiting import eventually
from tests.support.workers import add_text, checkpoints, run_workers
from zapomni.shared.protocol.ids import part_job_id
from zapomni.shared.tasks import tasks
from zapomni.workers.arq_internals import lease_key
from zapomni.workers.main import make_worker

DOCUMENT = "\n\n".join(f"Chapter {i}. The pilot of Vesterby wrote down the tides of spring "
                       f"{1900 + i} and the ships that came in with them." for i in range(24))


async def test_a_part_that_ends_after_its_memory_is_done_leaves_it_whole(
        settings, aredis, part_chunks):
    part_chunks(4)
    settings = msgspec.structs.replace(settings, graph_auto=False)
    added = await add_text(settings, DOCUMENT)
    await run_workers(settings, max_jobs=1)  # the first job: part 1 written, the rest queued
    record = await tasks.get_task(aredis, added.task_id)
    assert record.total > 2 and record.state == "running"
    late: list[str] = []
    held, go_on = asyncio.Event(), asyncio.Event()

    async def stall(point, job):
        # this worker's first part stops as if SIGSTOPped: its lease lapses (renewals write
        # only a lease that exists) and it goes on once the memory is done
        if point == "owned" and not late:
            late.append(part_job_id(job.task_id, job.part))
            await aredis.delete(lease_key(late[0]))
            held.set()
            await go_on.wait()

    stalled = make_worker(settings, burst=True, handle_signals=False)
    stalled.max_burst_jobs = 1  # a stopped process takes no other job meanwhile
    with checkpoints(stall):  # the other workers' parts pass it: it stalls one part
        first = asyncio.create_task(stalled.main())
        try:
            await eventually(lambda: asyncio.sleep(0, held.is_set()), bool,
                             "the first run of a part to stall")
            await run_workers(settings)  # that part again, and the others: the memory is done
            assert (await tasks.get_task(aredis, added.task_id)).state == "done"
            go_on.set()
            assert await asyncio.wait_for(first, 120) is None
        finally:
            go_on.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(first, 120)
            await stalled.close()
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == 1
    assert counts["chunks"] == record.chunks and counts["orphan_chunks"] == 0
