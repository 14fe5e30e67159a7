"""The queue's capacity in bytes (shared/tasks/capacity.py): the front refuses past the limit with
the retry error, fan-out parts are counted, every reservation ends with its job, and one left
by a dead process does not hold the queue for ever."""

from __future__ import annotations

import time

import msgspec
import pytest
from fastmcp import Client

from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server
from zapomni.shared.protocol.errors import Overloaded
from zapomni.shared.protocol.ids import part_job_id
from zapomni.shared.protocol.jobs import DeleteJob, GraphJob
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.queue import (
    BUILD_GRAPH,
    DELETE,
    connect_queue,
    enqueue,
    payload_size,
    queue_job_of,
    queue_task,
)
from zapomni.workers.main import make_worker

CAP = 300_000  # bytes: two texts of 100 KB fit, a third does not


def text(tag: str, size: int = 100_000) -> str:
    sentence = f"Sentence {{}} of {tag} is about queues, bytes and back pressure. "
    out, i = [], 0
    while sum(map(len, out)) < size:
        out.append(sentence.format(i))
        i += 1
    return "".join(out)[:size]


@pytest.fixture
def capped(settings: Settings, part_chunks) -> Settings:
    part_chunks(16)
    return msgspec.structs.replace(settings, max_queue_bytes=CAP, graph_auto=False)


async def held(aredis) -> tuple[dict[str, int], int]:
    """The reservations (job id -> bytes) and the total the front checks."""
    raw = await aredis.hgetall(capacity.BYTES_KEY)
    entries = {k.decode(): int(v.split(b":")[0]) for k, v in raw.items()}
    return entries, int(await aredis.get(capacity.TOTAL_KEY) or 0)


async def run_one_job(settings: Settings) -> None:
    """A real worker that runs the oldest job in the queue and stops."""
    worker = make_worker(settings, burst=True, handle_signals=False)
    worker.max_burst_jobs = 1
    try:
        await worker.main()
    finally:
        await worker.close()


async def test_bytes_past_the_limit_are_refused_until_jobs_end(capped, query_service, aredis):
    async with Client(build_server(capped)) as client:
        a = await call(client, "add_memory", text=text("alpha"))
        b = await call(client, "add_memory", text=text("beta"))
        refused = await error(client, "add_memory", text=text("gamma"))
        entries, total = await held(aredis)
        assert refused == ("temporarily unavailable: the ingest queue is full (0.2 MB waiting, "
                           "limit 0.3 MB); nothing was stored. Retry in ~30 seconds")
        # what was refused left nothing: no task, no claim of the text, no job
        assert set(entries) == {a["task_id"], b["task_id"]}
        assert total == sum(entries.values()) > 200_000
        assert len(await aredis.keys("zapomni:task:*")) == 2
        assert len(await aredis.keys("zapomni:mem:*")) == 2
        assert await aredis.zcard(QUEUE_NAME) == 2

        await run_one_job(capped)  # a's ingest job: it writes part 0, queues the rest
        entries, total = await held(aredis)
        parts = set(entries) - {b["task_id"]}
        assert parts and parts == {part_job_id(a["task_id"], i)
                                   for i in range(1, len(parts) + 1)}
        assert total == sum(entries.values()) > 200_000  # a's bytes, now held by its parts
        assert (await error(client, "add_memory", text=text("gamma"))).startswith(
            "temporarily unavailable: the ingest queue is full")

        await call(client, "cancel_task", task_id=b["task_id"])
        await run_workers(capped)
        assert await held(aredis) == ({}, 0)
        assert (await call(client, "graph_status", task_id=a["task_id"]))["state"] == "done"
        assert (await call(client, "graph_status", task_id=b["task_id"]))["state"] == \
            "cancelled"
        c = await call(client, "add_memory", text=text("gamma"))
        await run_workers(capped)
        assert (await call(client, "graph_status", task_id=c["task_id"]))["state"] == "done"
        assert await held(aredis) == ({}, 0)


async def test_a_reservation_counts_once_and_ends_with_its_job(capped, aredis):
    redis = connect_queue(capped)
    try:
        job = DeleteJob(task_id="task_" + "a" * 32, memory_id="mem_" + "b" * 32,
                        namespace="default")
        size = payload_size(job)
        assert await enqueue(redis, capped, DELETE, job, job.task_id, bounded=True)
        # enqueued again (at least once): arq keeps one job, and its bytes count once
        assert not await enqueue(redis, capped, DELETE, job, job.task_id, bounded=True)
        await capacity.reserve(redis, capped, job.task_id, size, check=True)
        assert await held(aredis) == ({job.task_id: size}, size)
        assert await capacity.release(redis, job.task_id) == 0  # arq still holds the job
        assert await capacity.reconcile(redis) == 0
        await aredis.delete(f"arq:job:{job.task_id}")  # what arq does when a job ends
        assert await capacity.release(redis, job.task_id) == size
        assert await capacity.release(redis, job.task_id) == 0
        assert await held(aredis) == ({}, 0)
    finally:
        await redis.aclose()


async def test_a_reservation_left_by_a_dead_process_does_not_hold_the_queue(
        capped, query_service, aredis):
    # a worker killed between its job's end and the release, long ago
    await aredis.hset(capacity.BYTES_KEY, "task_gone:part:0", "250000:1000")
    await aredis.set(capacity.TOTAL_KEY, 250_000)
    # a front between reserving and enqueueing, just now: kept (its job may still come)
    redis = connect_queue(capped)
    try:
        await capacity.reserve(redis, capped, "task_coming", 20_000, check=True)
    finally:
        await redis.aclose()
    async with Client(build_server(capped)) as client:
        a = await call(client, "add_memory", text=text("alpha"))
    entries, total = await held(aredis)
    assert set(entries) == {"task_coming", a["task_id"]}
    assert total == sum(entries.values())


async def test_a_task_and_its_job_are_one_step_refused_whole(capped, aredis):
    """queue_task (task_job.lua) alone: past the limits nothing is written, not the record,
    not the job, not its bytes; again with the same record (a job that runs twice) it
    writes nothing more; the job of a task taken over is queued only while it is queued."""
    redis = connect_queue(capped)
    try:
        record = TaskRecord(task_id="task_" + "c" * 32, kind="graph", namespace="default",
                            created_at=time.time(), message="waiting for a worker")
        job = GraphJob(task_id=record.task_id, namespace="default")
        await aredis.set(capacity.TOTAL_KEY, CAP)  # the queue's bytes are full
        with pytest.raises(Overloaded):
            await queue_task(redis, capped, record, BUILD_GRAPH, job, bounded=True)
        assert await aredis.exists(tasks.task_key(record.task_id)) == 0
        assert await aredis.zcard(QUEUE_NAME) == 0
        assert await aredis.hlen(capacity.BYTES_KEY) == 0
        # counted, never refused (a worker's follow-up task)
        assert await queue_task(redis, capped, record, BUILD_GRAPH, job, bounded=False)
        assert not await queue_task(redis, capped, record, BUILD_GRAPH, job, bounded=False)
        assert await aredis.zcard(QUEUE_NAME) == 1
        assert (await held(aredis))[0] == {record.task_id: payload_size(job)}
        assert (await tasks.get_task(aredis, record.task_id)).state == "queued"
        await aredis.set(capacity.TOTAL_KEY, 0)
        # the job of a task whose record is written already: only while it is queued
        other = msgspec.structs.replace(record, task_id="task_" + "d" * 32)
        await tasks.create_task(aredis, other, tasks.TASK_TTL)
        await tasks.move(aredis, other.task_id, "cancelled", ttl=tasks.TASK_TTL)
        assert not await queue_job_of(redis, capped, other.task_id, BUILD_GRAPH,
                                      msgspec.structs.replace(job, task_id=other.task_id),
                                      bounded=True, message="never")
        assert await aredis.zcard(QUEUE_NAME) == 1
        assert (await tasks.get_task(aredis, other.task_id)).message == "waiting for a worker"
    finally:
        await redis.aclose()
