"""A worker SIGKILLed in the middle of a document; another worker finishes it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile

import pytest
from arq.constants import retry_key_prefix

from tests.conftest import make_settings
from tests.support.graph import stored
from tests.support.servers import kill
from tests.support.waiting import eventually
from tests.support.workers import add_text, run_workers
from zapomni.shared.tasks import tasks
from zapomni.workers.arq_internals import JOB_LEASE, lease_key
from zapomni.workers.outcome import MAX_TRIES

# chunks of 16 tokens: 439 chunks, 14 parts of PART_CHUNKS (32) for the worker to be killed in
DOCUMENT = " ".join(f"Entry {i}: the ferry schedule for pier {i} changes in winter."
                    for i in range(400))


@pytest.mark.timeout(600)  # 14 s measured; a worker's start and the killed job's lease wait
async def test_killed_worker_mid_document_loses_and_doubles_nothing(falkordb_url, fake_ollama,
                                                                   aredis):
    fake_ollama.latency = 0.25
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=16,
                             max_jobs=1)
    receipt = await add_text(settings, DOCUMENT)

    env = {**os.environ, **settings.to_env()}
    with tempfile.TemporaryFile() as log:
        worker = subprocess.Popen([sys.executable, "-m", "zapomni.workers"], env=env, stdout=log,
                                  stderr=log)
        name = f"{socket.gethostname()}-{worker.pid}".encode()
        async def mid_document():
            record = await tasks.get_task(aredis, receipt.task_id)
            return record, name in await held_by(aredis)

        try:
            # kill it mid-document while it holds a part (between two parts it holds none),
            # once its lease names it: arq's claim holds "1" until on_job_start renews it
            record, _ = await eventually(
                mid_document, lambda seen: seen[0] is not None and seen[0].total > 1
                and seen[0].done >= 3 and seen[1], "the worker to hold a part of the document "
                "after 3 parts", timeout=180)
        finally:
            kill(worker)
        assert record.total > 10 and 3 <= record.done < record.total, record

    # what it held of the document is leased in its name and comes free within one lease,
    # not arq's job_timeout (a cron job it ran, fold_access each minute, keeps arq's claim for a
    # minute after it ends so that no other worker runs it again: not the document's)
    held = [key async for key in aredis.scan_iter(match=lease_key(receipt.task_id + "*"))]
    assert held
    for key in held:
        assert await aredis.get(key) == name
        assert 0 < await aredis.pttl(key) <= JOB_LEASE * 1000

    await run_workers(settings, timeout=180)  # waits out the killed job's in-progress key

    record = await tasks.get_task(aredis, receipt.task_id)
    counts = await stored(settings)
    assert (record.state, record.done) == ("done", record.total)
    assert counts["memories"] == counts["ready"] == 1
    assert counts["chunks"] == counts["has_chunk"] == counts["next"] + 1
    assert counts["orphan_chunks"] == 0
    from zapomni.shared.text.chunking import Chunker

    assert counts["chunks"] == len(Chunker(16, 2).split(DOCUMENT))


async def held_by(aredis) -> list[bytes]:
    """Whose name each job claim holds."""
    return [await aredis.get(key) async for key in aredis.scan_iter(match=lease_key("*"))]


async def test_a_job_whose_worker_died_on_every_try_fails_its_task(settings, aredis):
    text = "A note whose worker kept dying."
    receipt = await add_text(settings, text)
    await aredis.set(retry_key_prefix + receipt.task_id, MAX_TRIES)  # tries spent

    await run_workers(settings)

    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.state == "failed"
    assert f"gave up after {MAX_TRIES} attempts" in record.error
    assert (await stored(settings))["memories"] == 0
    assert not (await add_text(settings, text)).duplicate  # the text can be added again


async def test_a_job_whose_lease_lapsed_is_not_started_twice_by_its_own_worker(settings,
                                                                              aredis):
    # Redis too slow to renew a lease: the job's claim expires while the job still runs, and
    # the worker's own poll finds it free again. Before, it started a second run beside the
    # first, and arq failed the job with a KeyError when the runs ended (its table of
    # running jobs holds one per id).
    receipt = await add_text(settings, "A note written while Redis was slow.")
    runs = []

    async def checkpoint(point: str, job) -> None:
        if point != "owned":
            return
        runs.append(job.task_id)
        if len(runs) == 1:
            await aredis.delete(lease_key(job.task_id))  # the lease lapses
            await eventually(lambda: aredis.exists(lease_key(job.task_id)), bool,
                             "the worker's poll to claim the job again", timeout=30)

    await run_workers(settings, checkpoint=checkpoint)

    assert runs == [receipt.task_id]
    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.state == "done"
    assert (await stored(settings))["ready"] == 1
