"""The write path against real FalkorDB/Redis and real arq workers."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import make_settings
from tests.support.graph import query, stored
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.jobs import BatchJob, IngestJob, PartJob
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.adds import members_key
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.queue import EMBED_PART, INGEST_BATCH, serialize

ARTICLE = " ".join(
    f"Paragraph {i} is about the history of lighthouse number {i} on the northern coast, "
    f"its keeper, the storms of year {1800 + i} and the ships it guided home safely."
    for i in range(60)
)


async def add(front, text, metadata=None, namespace=None):
    return await ops.add_memory(front, decode_add_memory(text, metadata, namespace))


async def search(settings, text, limit=5, filters=None, namespace=None):
    store = GraphStore(settings)
    redis = Redis.from_url(settings.redis_url)
    try:
        return (await search_memory(store, OnnxEmbedder(), redis, settings, decode_search(
            text, limit, filters, namespace, "vector"))).results
    finally:
        await store.aclose()
        await redis.aclose()


async def test_small_memory_becomes_one_searchable_chunk(settings, front, aredis):
    receipt = await add(front, "  The capital of Australia is Canberra, not Sydney.  ",
                        {"tags": ["geo"], "source": "atlas", "page": 12})
    assert (receipt.status, receipt.duplicate) == ("queued", False)
    queued = await tasks.get_task(aredis, receipt.task_id)
    assert (queued.state, queued.kind, queued.memory_id) == ("queued", "ingest",
                                                             receipt.memory_id)

    await run_workers(settings)

    record = await tasks.get_task(aredis, receipt.task_id)
    assert (record.state, record.done, record.total) == ("done", 1, 1)
    assert record.started_at >= record.created_at and record.finished_at >= record.started_at
    assert await stored(settings) == {"memories": 1, "ready": 1, "chunks": 1, "has_chunk": 1,
                                      "next": 0, "orphan_chunks": 0}
    rows = await query(settings, "MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) RETURN m.text, "
                       "m.tags, m.source, m.metadata, c.text, c.char_start, c.char_end, "
                       "c.embedding")
    text, tags, source, metadata, chunk, start, end, vector = rows[0]
    assert text == chunk == "The capital of Australia is Canberra, not Sydney."
    assert (tags, source, msgspec.json.decode(metadata)) == (["geo"], "atlas", {"page": 12})
    assert (start, end, len(vector)) == (0, len(text), 384)
    # what the model gives for the chunk, to float32 precision (sent rounded to 7 decimals)
    expected = OnnxEmbedder().embed_sync([chunk])[0]
    assert np.max(np.abs(np.array(vector) - expected)) < 1e-6

    hits = await search(settings, "Which city is Australia's capital?")
    assert hits[0].memory_id == receipt.memory_id and hits[0].score > 0.5
    assert hits[0].metadata == {"page": 12} and hits[0].tags == ["geo"]


async def test_large_document_fans_out_into_parts(falkordb_url, aredis, part_chunks):
    part_chunks(4)
    settings = make_settings(falkordb_url, chunk_tokens=64)
    receipt = await add_text(settings, ARTICLE)
    await run_workers(settings, count=2)

    record = await tasks.get_task(aredis, receipt.task_id)
    counts = await stored(settings)
    assert record.state == "done" and record.total > 3 and record.done == record.total
    assert counts["memories"] == counts["ready"] == 1
    assert counts["chunks"] == counts["has_chunk"] > 12
    assert counts["next"] == counts["chunks"] - 1 and counts["orphan_chunks"] == 0
    (chunk_count,), = await query(settings, "MATCH (m:Memory) RETURN m.chunk_count")
    assert chunk_count == counts["chunks"]
    assert record.message == f"searchable: {counts['chunks']} chunks"
    spans = await query(settings, "MATCH (c:Chunk) RETURN c.char_start, c.char_end, c.text "
                        "ORDER BY c.idx")
    assert all(ARTICLE[s:e] == t for s, e, t in spans)
    assert spans[0][0] == 0 and spans[-1][1] == len(ARTICLE)

    hits = await search(settings, "storms of year 1842 and lighthouse 42")
    assert hits[0].memory_id == receipt.memory_id and "1842" in hits[0].text


async def test_a_memory_is_found_from_its_first_part_as_still_ingesting(falkordb_url, aredis,
                                                                       part_chunks):
    from zapomni.workers.main import make_worker

    part_chunks(4)
    settings = make_settings(falkordb_url, chunk_tokens=64)
    receipt = await add_text(settings, ARTICLE)
    for _ in range(2):  # the ingest job (it writes part 1 and fans out), then a part
        worker = make_worker(settings, burst=True, handle_signals=False)
        worker.max_burst_jobs = 1
        await worker.main()
        await worker.close()

    record = await tasks.get_task(aredis, receipt.task_id)
    counts = await stored(settings)
    assert record.state == "running" and 0 < record.done < record.total
    assert counts["memories"] == 1 and counts["ready"] == 0 and counts["chunks"] > 0
    hit = (await search(settings, "storms of year 1801 and lighthouse 1"))[0]
    assert (hit.memory_id, hit.status) == (receipt.memory_id, "ingesting")
    assert (hit.parts.done, hit.parts.total) == (record.done, record.total)

    await run_workers(settings)
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "done"
    hit = (await search(settings, "lighthouse keeper storms"))[0]
    assert (hit.memory_id, hit.status) == (receipt.memory_id, msgspec.UNSET)


async def test_same_text_twice_is_one_memory(settings, front, aredis):
    first = await add(front, "Remember to water the ficus on Fridays.")
    again = await add(front, "\nRemember to water the ficus on Fridays.\t")
    elsewhere = await add(front, "Remember to water the ficus on Fridays.", namespace="home")
    assert again.memory_id == first.memory_id and again.task_id == first.task_id
    assert again.duplicate and not first.duplicate
    assert elsewhere.memory_id != first.memory_id and not elsewhere.duplicate
    assert await aredis.zcard(QUEUE_NAME) == 2

    await run_workers(settings)
    after = await add(front, "Remember to water the ficus on Fridays.")
    assert (after.duplicate, after.status, after.task_id) == (True, "done", first.task_id)
    assert (await stored(settings))["memories"] == 1
    assert (await stored(settings, "home"))["memories"] == 1


@pytest.mark.parametrize("part_size", [1000, 4])
async def test_jobs_that_run_again_write_the_same_graph(falkordb_url, aredis, part_chunks,
                                                        part_size):
    """arq delivers at least once: every job, run a second time, changes nothing."""
    part_chunks(part_size)
    settings = make_settings(falkordb_url, chunk_tokens=64)
    from zapomni.services.mcp.front import Front

    front = Front(settings)
    try:
        receipt = await add(front, ARTICLE)
        await run_workers(settings)
        before = await stored(settings)
        payload = IngestJob(task_id=receipt.task_id, memory_id=receipt.memory_id,
                            namespace="default", text=ARTICLE,
                            content_hash=decode_add_memory(ARTICLE, None, None).content_hash)
        # the memory's job again, as a batch of its own (its members are gone with its job)
        await aredis.hset(members_key("again-ingest"), receipt.task_id, serialize(payload))
        await front.redis.enqueue_job(INGEST_BATCH, BatchJob(batch_id="again-ingest",
                                                             namespace="default", alone=True),
                                      _job_id="again-ingest")
        if part_size == 4:
            chunks = (await query(settings, "MATCH (c:Chunk) RETURN count(c)"))[0][0]
            from zapomni.shared.text.chunking import Chunker

            spans = Chunker(64, 8).split(ARTICLE)
            assert len(spans) == chunks
            parts = (await tasks.get_task(aredis, receipt.task_id)).total
            part = PartJob(task_id=receipt.task_id, memory_id=receipt.memory_id,
                           namespace="default", part=1, parts=parts,
                           chunk_count=chunks, chunks=spans[4:8])
            await front.redis.enqueue_job(EMBED_PART, part, _job_id="again-part")
        await run_workers(settings)
    finally:
        await front.aclose()
    assert await stored(settings) == before
    assert before["memories"] == before["ready"] == 1 and before["orphan_chunks"] == 0
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "done"


PIERS = [
    f"Pier {i}\n\nThe ferry to pier {i} leaves at {6 + i} o'clock and carries {i + 2} cars; "
    f"in winter the harbour master moves it an hour later, and on stormy days the keeper "
    f"of lighthouse {i} rings the bell twice." for i in range(8)]
NOTES = "\n\n".join(PIERS)


async def test_a_memory_of_paragraphs_is_stored_one_paragraph_a_chunk(falkordb_url, aredis):
    """Paragraphs first in the workers: each titled note of a memory longer than a chunk is a
    chunk of its own."""
    settings = make_settings(falkordb_url, chunk_tokens=128)
    await add_text(settings, NOTES)
    await run_workers(settings)
    rows = await query(settings, "MATCH (c:Chunk) RETURN c.text ORDER BY c.char_start")
    stored_texts = [text for (text,) in rows]
    assert stored_texts == PIERS
