"""The keyword postings (shared/store/postings.py) count a chunk only while the graph holds it:
a delete that lands while an ingest's text is being embedded leaves nothing counted once the
ingest finds its memory gone (it writes no chunk: its numbers are forgotten), whichever path
wrote it (a batch of small memories, a document's parts); the numbers a writer that died
left unsettled are resolved against the graph by the workers' upkeep (workers/upkeep.py)."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio

from tests.support import postings as support
from tests.support.graph import stored
from tests.support.workers import add_text, run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.store import cypher_moves, postings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import connect_queue
from zapomni.workers import store as worker_store
from zapomni.workers.main import make_worker
from zapomni.workers.resources import close_resources, open_resources
from zapomni.workers.upkeep import COMPACT, compact_postings

SHORT = "The ferry to the north island leaves at seven; the harbour master logs its cargo."
LONG = "\n\n".join(f"Paragraph {i}: the kestrel survey of the estuary, transect {i}, counted "
                   f"{i + 3} birds over the salt marsh at low tide in year {1990 + i}."
                   for i in range(12))


async def postings_state(settings) -> dict[str, object]:
    """What the postings count: document frequencies, chunks numbered, words."""
    store = GraphStore(settings)
    try:
        graph = store.graph("default")
        keys = postings.prefix(graph.key)
        return {"df": await graph.raw.hgetall(keys + "df"),
                "numbered": await graph.raw.hlen(keys + "seqof"),
                "words": int(await graph.raw.get(keys + "words") or 0)}
    finally:
        await store.aclose()


@pytest.mark.parametrize("text", [SHORT, LONG], ids=["batch", "parts"])
async def test_a_delete_while_the_text_is_embedded_leaves_nothing_counted(
        settings, fake_ollama, aredis, part_chunks, text):
    part_chunks(4)  # the long text fans out: its first part is written by the ingest itself
    settings = msgspec.structs.replace(settings, ollama_url=fake_ollama.url)
    receipt = await add_text(settings, text)
    deleted: list[str] = []

    async def delete_while_embedding(texts: list[str]) -> None:
        """In the fake server's loop, while the worker waits for these vectors: delete the
        memory through the front and wait until the worker has run the delete."""
        if deleted:
            return
        front = Front(settings)
        client = redis.asyncio.Redis.from_url(settings.redis_url)
        try:
            delete = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
            deleted.append(delete.task_id)
            await wait_tasks(client, [delete.task_id], timeout=60)
        finally:
            await client.aclose()
            await front.aclose()

    fake_ollama.before_answer = delete_while_embedding
    await run_workers(settings)
    assert deleted, "the worker never asked for the text's vectors"
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    assert (await stored(settings))["memories"] == (await stored(settings))["chunks"] == 0
    assert await postings_state(settings) == {"df": {}, "numbered": 0, "words": 0}


async def upkeep_once(settings) -> str:
    """One run of the workers' postings upkeep (the arq cron function), as a worker runs it."""
    ctx = {"redis": connect_queue(settings)}
    await open_resources(ctx, settings)
    try:
        return await compact_postings(ctx)
    finally:
        await close_resources(ctx)
        await ctx["redis"].aclose()


async def test_claims_a_dead_writer_left_are_resolved_against_the_graph(settings):
    """A writer that numbered its chunks and died before settling: the upkeep keeps the
    number of a chunk the graph holds, forgets one whose chunk and memory are gone (deleted
    meanwhile), and leaves one whose memory is there but not its chunk (a writer at work),
    which that writer's next run takes over."""
    store = GraphStore(settings)
    graph = store.graph("default")
    keys = postings.prefix(graph.key)
    try:
        await support.prepare(graph)
        before = await support.recount(graph)
        written, gone, working = (support.job_of("default", text) for text in (
            "The heron nests by the weir.", "The otter swims past the mill.",
            "The kestrel hovers over the verge."))
        for job in (written, gone, working):
            await worker_store.write_memory(graph, job, 1)
            await postings.write_postings(graph, postings.counts_of([(f"{job.memory_id}:0",
                                                                     job.text)]))
        rows, _ = worker_store.chunk_rows(written.memory_id, support.spans_of(written.text),
                                          support.vectors(1))
        await run(graph, cypher_moves.MERGE_CHUNKS["embedding"],
                  {"memory_id": written.memory_id, "rows": rows})
        await worker_store.mark_ready(graph, written.memory_id, written.task_id)
        await support.delete(graph, gone.memory_id)
        assert await graph.raw.hlen(keys + "pend") == 3
        assert "1 unsettled claims forgotten" in await upkeep_once(settings)
        assert [int(n) for n in await graph.raw.hkeys(keys + "pend")] == [
            int(await graph.raw.hget(keys + "seqof", f"{working.memory_id}:0"))]
        assert await graph.raw.hexists(keys + "seqof", f"{written.memory_id}:0")
        assert not await graph.raw.hexists(keys + "seqof", f"{gone.memory_id}:0")
        await support.add_one(graph, working)  # its job ran again
        assert await graph.raw.hlen(keys + "pend") == 0
        after = await support.recount(graph)
        assert after.chunks == before.chunks + 2
        assert await support.counted(graph) == after
        await support.pool_is_bm25(graph, "heron otter kestrel", 5)
    finally:
        await store.aclose()


async def test_the_workers_run_the_upkeep_on_a_timer(settings):
    worker = make_worker(settings, burst=True, handle_signals=False)
    try:
        names = {job.name for job in worker.cron_jobs}
        assert COMPACT in names, names
    finally:
        await worker.close()
