"""A large memory is searchable as its parts land: what a search, build_context and
get_memory show while it is still being ingested, and what a new version, a cancel, a
delete and a failed part do to the parts already landed. Real Redis/FalkorDB, real workers
(paused at a named point of a part: tests/integration/test_races.Act), the query service
over HTTP."""

from __future__ import annotations

import msgspec
import pytest

from tests.integration.test_races import Act, cancel_now, delete_now, nothing_stored
from tests.integration.test_update import change, get, search
from tests.support.graph import stored
from tests.support.waiting import eventually
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.task_status import shape_task
from zapomni.services.query.hits import MAX_PER_MEMORY
from zapomni.shared.protocol.answers import Context, PartsDone
from zapomni.shared.protocol.errors import EmbeddingRejected
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.text.conversation import decode_context

# 40 paragraphs, about one chunk each: parts of PART_CHUNKS chunks land one by one
BOOK = "\n\n".join(
    f"Chapter {i}. The harbour master of Vesterby counted {100 + i} ships in the year "
    f"{1900 + i}, and the pilot Aino Lindqvist wrote down the tides of spring {i}."
    for i in range(40))
FIRST = "How many ships did the harbour master of Vesterby count in 1900?"
PART_CHUNKS = 4


@pytest.fixture(autouse=True)
def small_parts(part_chunks) -> None:
    part_chunks(PART_CHUNKS)


def fanned(settings, max_jobs: int = 1):
    """Parts of PART_CHUNKS chunks; one job at a time (``max_jobs``), so that the parts
    before the one a checkpoint pauses have landed and the ones after it have not."""
    return msgspec.structs.replace(settings, chunk_tokens=64, max_jobs=max_jobs)


def ours(hits, memory_id: str) -> list:
    return [h for h in hits if h.memory_id == memory_id]


async def test_parts_are_found_as_they_land_and_say_the_memory_is_ingesting(
        settings, front, query_service, aredis):
    receipt = await add_text(fanned(settings), BOOK, {"source": "logbook", "tags": ["sea"]})
    seen = {}

    async def look(job) -> None:  # parts 0 and 1 have landed, part 2 is about to be written
        seen["hits"] = ours(await search(front, FIRST), receipt.memory_id)
        seen["late"] = ours(await search(front, "the tides of spring 39 in the year 1939"),
                            receipt.memory_id)
        seen["filtered"] = await search(front, FIRST, {"source": "logbook", "tags": ["sea"]})
        seen["other"] = await search(front, FIRST, {"source": "diary"})
        seen["wide"] = ours(await search(front, "harbour master ships tides"),
                            receipt.memory_id)
        seen["memory"] = await get(front, receipt.memory_id)
        seen["context"] = await front.query.call("/v1/context", decode_context(
            FIRST, None, None, 2000, 0, 8), Context)
        seen["task"] = shape_task(await tasks.get_task(aredis, receipt.task_id))

    await run_workers(fanned(settings), checkpoint=Act("owned", look, part=2))
    total = seen["task"].progress.total
    assert total == 10
    hit = seen["hits"][0]
    assert "Chapter 0." in hit.text or "Chapter 1." in hit.text
    assert (hit.status, hit.parts) == ("ingesting", PartsDone(done=2, total=total))
    assert all(int(h.text.split(".")[0].split()[-1]) < 2 * PART_CHUNKS for h in seen["hits"])
    assert all("Chapter 39." not in h.text for h in seen["late"])  # not written yet
    assert ours(seen["filtered"], receipt.memory_id) and seen["other"] == []
    # the per-memory cap holds for a memory still ingesting
    assert len(seen["wide"]) == MAX_PER_MEMORY and seen["wide"][0].more
    memory = seen["memory"]
    assert (memory.status, memory.parts) == ("ingesting", PartsDone(done=2, total=total))
    assert memory.task_id == receipt.task_id
    [found] = [m for m in seen["context"].memories if m.memory_id == receipt.memory_id][:1]
    assert (found.status, found.parts) == ("ingesting", PartsDone(done=2, total=total))
    task = seen["task"]
    assert (task.state, task.progress.done) == ("running", 2)
    assert task.rate_chunks_per_s > 0 and task.eta_seconds is not None

    # complete: the same answers without the ingesting fields, the task done
    hit = ours(await search(front, FIRST), receipt.memory_id)[0]
    assert (hit.status, hit.parts) == (msgspec.UNSET, msgspec.UNSET)
    assert "status" not in msgspec.to_builtins(hit)
    memory = await get(front, receipt.memory_id)
    assert (memory.status, memory.parts) == ("ready", msgspec.UNSET)
    late = ours(await search(front, "the tides of spring 39 in the year 1939"),
                receipt.memory_id)
    assert any("Chapter 39." in h.text for h in late)
    done = shape_task(await tasks.get_task(aredis, receipt.task_id))
    assert (done.state, done.eta_seconds) == ("done", None) and done.rate_chunks_per_s > 0
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == 1
    assert counts["next"] == counts["chunks"] - 1  # linked in order at the end


async def test_a_new_version_is_not_found_until_it_is_complete(settings, front,
                                                               query_service, aredis):
    old = await add_text(settings, "The harbour master of Vesterby counted 7 ships in 1900.")
    await run_workers(settings)
    receipt = await change(front, old.memory_id, text=BOOK)
    seen = []

    async def look(job) -> None:  # two parts of the new version have landed
        seen.append({h.memory_id for h in await search(front, FIRST)})
        seen.append((await get(front, receipt.memory_id)).status)

    await run_workers(fanned(settings), checkpoint=Act("owned", look, part=2))
    assert seen == [{old.memory_id}, "ingesting"]
    assert {h.memory_id for h in await search(front, FIRST)} == {receipt.memory_id}
    assert (await get(front, old.memory_id)).superseded_by == receipt.memory_id


@pytest.mark.parametrize("how", ["cancel", "delete"])
async def test_a_cancel_or_delete_midway_takes_the_landed_parts_out_of_search(
        settings, front, query_service, aredis, how):
    keep = await add_text(settings, "The pilot Aino Lindqvist kept a logbook of the tides.")
    await run_workers(settings)
    receipt = await add_text(fanned(settings), BOOK)
    act = (cancel_now if how == "cancel" else delete_now)(fanned(settings), aredis)
    seen = []

    async def landed() -> int:
        return len(ours(await search(front, FIRST), receipt.memory_id))

    async def look_then_act(job) -> None:  # the worker runs the other parts meanwhile
        seen.append(await eventually(landed, bool, "the first part found"))
        await act(job)
        seen.append(await landed())

    await run_workers(fanned(settings, max_jobs=4),
                      checkpoint=Act("owned", look_then_act, part=2))
    assert seen[0] > 0 and seen[1] == 0
    assert ours(await search(front, FIRST), receipt.memory_id) == []
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    counts = await stored(settings)
    assert counts["memories"] == counts["ready"] == counts["chunks"] == 1  # the other one
    assert (await get(front, keep.memory_id)).status == "ready"


async def test_a_failed_part_takes_the_landed_parts_out_of_search(settings, front,
                                                                  query_service, aredis):
    receipt = await add_text(fanned(settings), BOOK)
    seen = []

    async def fail(job) -> None:
        seen.append(len(ours(await search(front, FIRST), receipt.memory_id)))
        raise EmbeddingRejected("the embedder refused the part")

    await run_workers(fanned(settings), checkpoint=Act("part_written", fail, part=2))
    assert seen[0] > 0
    record = await ops.task_status(front, receipt.task_id)
    assert (record.state, record.error) == ("failed", "the embedder refused the part")
    assert await search(front, FIRST) == []
    assert await stored(settings) == nothing_stored()


async def test_the_ingest_job_writes_the_first_part_before_it_queues_the_others(
        settings, front, query_service, aredis):
    receipt = await add_text(fanned(settings), BOOK)
    await run_workers(fanned(settings), max_jobs=1)  # the ingest job alone
    record = await tasks.get_task(aredis, receipt.task_id)
    assert (record.state, record.done, record.total) == ("running", 1, 10)
    assert await aredis.zcard(QUEUE_NAME) == 9
    hit = ours(await search(front, FIRST), receipt.memory_id)[0]
    assert (hit.status, hit.parts) == ("ingesting", PartsDone(done=1, total=10))
