"""Access tracking and rank="memory", through the real query service, real workers and
FalkorDB: what search returned is counted on each memory by the worker's fold (once, even
when a fold dies before trimming the stream), a search answers when its access record
cannot be written, and rank="memory" puts a recent or important memory above an otherwise
equal one, with parts that add up to the score."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

import httpx2
import msgspec
import pytest
import redis.asyncio
from prometheus_client import REGISTRY

from tests.support.graph import query
from tests.support.waiting import eventually
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.rank import MAX_PENDING, AccessLog
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store import access
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.tasks.queue import connect_queue
from zapomni.workers.upkeep import FOLD

NOTES = [
    "The spare house key is hidden under the blue flowerpot by the back door.",
    "Ben's bicycle needs a new chain before the canal ride on Saturday.",
    "Ana drinks green tea without sugar every morning at seven.",
    "The boiler was serviced in March; the engineer left his number on the fridge.",
]
COUNTS = "MATCH (m:Memory) RETURN m.id, m.access_count, m.accessed_at"


@pytest.fixture
def quiet(settings):
    """The test settings without entity extraction (nothing here reads the graph)."""
    return msgspec.structs.replace(settings, graph_auto=False)


async def add_notes(quiet, texts, namespace=None, metadata=None) -> list[str]:
    front = Front(quiet)
    try:
        receipts = [await ops.add_memory(front, decode_add_memory(
            text, (metadata or {}).get(text), namespace)) for text in texts]
    finally:
        await front.aclose()
    await run_workers(quiet)
    return [r.memory_id for r in receipts]


async def search(front, text, limit=10, namespace=None, mode="hybrid", rank=None):
    request = decode_search(text, limit, None, namespace, mode, None, rank)
    return await front.query.call("/v1/search", request, SearchResponse)


async def fold(settings, checkpoint=None) -> None:
    """One run of the worker's access fold, as its cron would start it."""
    queue = connect_queue(settings)
    try:
        await queue.enqueue_job(FOLD)
    finally:
        await queue.aclose()
    await run_workers(settings, checkpoint=checkpoint)


async def counts(settings, namespace="default") -> dict[str, tuple]:
    rows = await query(settings, COUNTS, namespace=namespace)
    return {memory_id: (count, at) for memory_id, count, at in rows}


async def stream_length(aredis) -> int:
    return await aredis.xlen(access.STREAM) if await aredis.exists(access.STREAM) else 0


async def test_what_search_returned_is_counted_on_each_memory_by_the_fold(
        quiet, front, query_service, aredis):
    ids = await add_notes(quiet, NOTES)
    started = time.time()
    asked = [("where is the spare key?", 1), ("bicycle chain and boiler", 2),
             ("spare key", 1), ("morning tea", 4)]
    returned = [[h.memory_id for h in (await search(front, q, limit)).results]
                for q, limit in asked]
    ended = time.time()
    expected = Counter(m for hits in returned for m in set(hits))
    assert all(returned) and len(expected) >= 3  # every search found something
    await eventually(lambda: stream_length(aredis), lambda n: n == len(asked),
                     "one access event per search")

    await fold(quiet)
    stored = await counts(quiet)
    assert {m: c for m, (c, _) in stored.items() if c} == dict(expected)
    assert all(started <= at <= ended for m, (_, at) in stored.items() if m in expected)
    assert all(stored[m] == (None, None) for m in ids if m not in expected)
    assert await stream_length(aredis) == 0  # the fold trimmed what it read

    await fold(quiet)  # nothing new: nothing changes
    assert await counts(quiet) == stored
    memory = await search(front, "spare key", limit=4, rank="memory")
    assert memory.results  # each hit's frequency comes from its memory's count
    for hit in memory.results:
        assert hit.rank_parts["frequency"].basis == expected.get(hit.memory_id, 0)


async def test_a_fold_that_dies_before_trimming_counts_nothing_twice(quiet, front,
                                                                     query_service, aredis):
    await add_notes(quiet, NOTES)
    returned = [[h.memory_id for h in (await search(front, q, 2)).results]
                for q in ("spare key", "green tea", "spare key under the flowerpot")]
    expected = Counter(m for hits in returned for m in set(hits))
    await eventually(lambda: stream_length(aredis), lambda n: n == 3, "three access events")

    async def dies_after_writing(point, entries) -> None:
        if point == "access_folded":
            raise RuntimeError("the worker died between its write and its trim")

    await fold(quiet, checkpoint=dies_after_writing)
    written = await counts(quiet)
    assert {m: c for m, (c, _) in written.items() if c} == dict(expected)
    assert await stream_length(aredis) == 3  # not trimmed: the next run reads them again

    await fold(quiet)
    assert await counts(quiet) == written  # counted once
    assert await stream_length(aredis) == 0


async def access_events(outcome: str) -> float:
    return REGISTRY.get_sample_value("zapomni_access_events_total",
                                     {"outcome": outcome}) or 0.0


async def failed_writes() -> float:
    return await access_events("failed")


async def test_a_search_whose_access_record_fails_still_answers(quiet, front, query_service,
                                                                aredis, caplog):
    await add_notes(quiet, NOTES)
    expected = [h.memory_id for h in (await search(front, "spare key")).results]
    await eventually(lambda: stream_length(aredis), lambda n: n == 1, "the first event")
    await aredis.delete(access.STREAM)
    await aredis.set(access.STREAM, "not a stream")  # every XADD now fails (WRONGTYPE)
    before = await failed_writes()
    with caplog.at_level(logging.WARNING, logger="zapomni.services.query.rank"):
        answers = [[h.memory_id for h in (await search(front, "spare key")).results]
                   for _ in range(3)]
        await eventually(failed_writes, lambda n: n == before + 3, "three failed records")
    assert answers == [expected] * 3
    warnings = [r for r in caplog.records if "access tracking" in r.getMessage()]
    assert len(warnings) == 1  # logged once, not once per search
    assert await aredis.get(access.STREAM) == b"not a stream"

    await aredis.delete(access.STREAM)  # repaired: the next search is recorded again
    await search(front, "spare key")
    await eventually(lambda: stream_length(aredis), lambda n: n == 1, "a recorded event")


async def test_with_access_tracking_off_nothing_is_written(quiet, aredis):
    log = AccessLog(aredis, msgspec.structs.replace(quiet, access_tracking=False))
    log.record("default", ["mem_" + "a" * 32])
    assert not log.pending and await stream_length(aredis) == 0
    on = AccessLog(aredis, quiet)
    on.record("default", ["mem_" + "a" * 32])
    await on.aclose()
    assert await stream_length(aredis) == 1


async def test_writes_in_flight_are_bounded_when_redis_does_not_answer(quiet):
    async def silent(reader, writer) -> None:
        await reader.read()  # reads the commands, never answers
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    client = redis.asyncio.Redis(port=server.sockets[0].getsockname()[1], socket_timeout=60)
    log = AccessLog(client, quiet)
    dropped = await access_events("dropped")
    try:
        for _ in range(MAX_PENDING + 5):
            log.record("default", ["mem_" + "a" * 32])
        assert len(log.pending) == MAX_PENDING  # a connection each, no more
        assert await access_events("dropped") == dropped + 5
        await log.aclose(grace=0.1)  # shutdown does not wait on a Redis that is gone
        assert not log.pending
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()


async def make_older(settings, memory_id: str, days: float, namespace: str) -> None:
    store = GraphStore(settings)
    try:
        await run(store.graph(namespace), "MATCH (m:Memory {id: $id}) SET m.created_at = "
                  "m.created_at - $age, m.occurred_at = m.occurred_at - $age",
                  {"id": memory_id, "age": days * 86400})
    finally:
        await store.aclose()


def check_parts(hit, weights=(0.4, 0.3, 0.2, 0.1)) -> None:
    parts = hit.rank_parts
    assert [parts[p].weight for p in ("relevance", "recency", "frequency", "importance")] \
        == list(weights)
    assert sum(p.points for p in parts.values()) == pytest.approx(hit.score, abs=1e-5)
    for part in parts.values():
        assert part.points == pytest.approx(part.value * part.weight, abs=1e-6)


async def test_rank_memory_puts_a_recent_memory_above_an_otherwise_equal_one(
        quiet, front, query_service):
    twins = ["Reminder: the spare house key is under the blue flowerpot.",
             "Reminder: the spare house key is under the blue flower pot."]
    await add_notes(quiet, twins + NOTES[1:], namespace="recency")
    first, second = [h.memory_id for h in (await search(
        front, "where is the spare house key?", 2, "recency", "vector")).results]
    await make_older(quiet, first, 60, "recency")  # relevance's first is now 60 days old

    relevance = await search(front, "where is the spare house key?", 2, "recency", "vector")
    memory = await search(front, "where is the spare house key?", 2, "recency", "vector",
                          rank="memory")
    assert [h.memory_id for h in relevance.results] == [first, second]  # unchanged
    assert [h.memory_id for h in memory.results] == [second, first]
    assert (memory.rank, relevance.rank) == ("memory", "relevance")
    old, new = memory.results[1].rank_parts, memory.results[0].rank_parts
    assert old["recency"].basis == pytest.approx(60, abs=0.01)
    assert old["recency"].value == pytest.approx(0.25, abs=0.001)  # two half-lives
    assert new["recency"].value == pytest.approx(1.0, abs=0.001)
    assert old["relevance"].value > new["relevance"].value
    for hit in memory.results:
        check_parts(hit)
    assert all(h.rank_parts == {} for h in relevance.results)


async def test_rank_memory_puts_an_important_memory_above_an_otherwise_equal_one(
        quiet, front, query_service):
    plain = "Ana prefers green tea in the morning, without sugar."
    important = "Ana prefers green tea in the mornings, without sugar."
    await add_notes(quiet, [plain, important, *NOTES[:2]], namespace="importance",
                    metadata={important: {"importance": 1.0}, plain: {"importance": 0.0}})
    asked = ("what does Ana drink in the morning?", 2, "importance")
    relevance = (await search(front, *asked)).results
    memory = (await search(front, *asked, rank="memory")).results
    assert [h.text for h in relevance] == [plain, important]  # relevance alone: plain first
    assert [h.text for h in memory] == [important, plain]
    assert memory[0].rank_parts["importance"].basis == 1.0
    assert memory[1].rank_parts["importance"].basis == 0.0
    for hit in memory:
        check_parts(hit)
    no_importance = (await search(front, "canal ride", 1, "importance", rank="memory")).results
    assert no_importance[0].rank_parts["importance"].value == 0.5  # none given: 0.5


async def test_relevance_is_the_default_and_rank_is_checked(quiet, front, query_service,
                                                            settings):
    await add_notes(quiet, NOTES)
    default = await search(front, "spare key and tea")
    assert default.rank == "relevance"
    assert (await search(front, "spare key and tea", rank="relevance")) == default
    with pytest.raises(InvalidInput, match=r"^rank: expected relevance .* or memory"):
        decode_search("spare key", 10, None, None, None, None, "popular")
    body = msgspec.json.encode(SearchRequest(query="spare key")).replace(
        b'"rank":"relevance"', b'"rank":"recent"')
    async with httpx2.AsyncClient(base_url=query_service, headers={
            "authorization": f"Bearer {settings.query_secret}"}) as http:
        response = await http.post("/v1/search", content=body)
    assert response.status_code == 400
    assert response.json() == {"kind": "invalid_input",
                               "message": "rank: not one of the allowed values"}
