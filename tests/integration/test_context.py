"""Conversation context: memories added one after another to one thread are chained by the
front and workers (Memory.after, THEN edges), and hybrid search lifts a turn whose neighbour
matches the question: the answer that does not repeat the question's words."""

from __future__ import annotations

import msgspec
import pytest

from tests.support.graph import query
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.errors import Overloaded
from zapomni.shared.protocol.jobs import IngestJob
from zapomni.shared.protocol.validation import decode_add_memory, decode_search
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import capacity
from zapomni.workers.store import write_memory

CHAT = [
    ("Ana: Did you ever make it to the lighthouse poetry evening in Brixham?", "question"),
    ("Ben: Yes, last Friday. Fishermen read verses about storms and an old sailor cried.",
     "answer"),
    ("Ana: My sister finally bought the red bicycle she wanted.", "other"),
    ("Ben: Nice, tell her the canal path is flat and quiet in the mornings.", "other"),
]
NOISE = [
    "The lighthouse keeper's logbook from 1910 lists every passing steamer.",
    "Brixham harbour fills with trawlers when the weather turns.",
    "A poetry anthology of the sea was printed in Plymouth.",
    "Evenings in the town hall are booked for choir practice.",
]
QUESTION = "What happened at the lighthouse poetry evening in Brixham?"


async def search(front, query, namespace, **options):
    request = decode_search(query, 10, options.get("filters"), namespace, "hybrid")
    return (await front.query.call("/v1/search", request, SearchResponse)).results


async def add_chat(front, namespace: str, thread: str | None) -> list[str]:
    ids = []
    for text in NOISE:
        ids.append((await ops.add_memory(front, decode_add_memory(text, None, namespace)))
                   .memory_id)
    for text, tag in CHAT:
        meta = {"tags": [tag], "source": "chat", **({"thread": thread} if thread else {})}
        ids.append((await ops.add_memory(front, decode_add_memory(text, meta, namespace)))
                   .memory_id)
    return ids


@pytest.fixture
async def chats(settings, front, query_service):
    turns = await add_chat(front, "chat", "chat with Ben")
    loose = await add_chat(front, "loose", None)  # the same texts, no thread: no context
    await run_workers(settings)
    return turns[len(NOISE):], loose[len(NOISE):]


async def test_turns_of_one_thread_are_chained_in_the_order_they_were_added(
        settings, chats):
    turns, loose = chats
    rows = await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id",
                       namespace="chat")
    assert sorted(rows) == sorted([[turns[0], turns[1]], [turns[1], turns[2]],
                                   [turns[2], turns[3]]])
    assert await query(settings, "MATCH ()-[r:THEN]->() RETURN count(r)",
                       namespace="loose") == [[0]]


async def test_a_turn_refused_or_added_twice_is_chained_once(settings, front, aredis):
    """A turn's add is one step (shared/tasks/adds.py): refused, it leaves no place in its thread;
    added again, it is the same turn."""
    first = await ops.add_memory(front, decode_add_memory(CHAT[0][0], {"thread": "t"}, "lost"))
    full = Front(msgspec.structs.replace(
        settings, max_queue_bytes=await capacity.queued_bytes(aredis) + 10))
    try:
        with pytest.raises(Overloaded):
            await ops.add_memory(full, decode_add_memory(CHAT[2][0], {"thread": "t"}, "lost"))
    finally:
        await full.aclose()
    second = await ops.add_memory(front, decode_add_memory(CHAT[1][0], {"thread": "t"}, "lost"))
    again = await ops.add_memory(front, decode_add_memory(CHAT[1][0], {"thread": "t"}, "lost"))
    assert (again.duplicate, again.task_id) == (True, second.task_id)

    await run_workers(settings)

    assert await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id",
                       namespace="lost") == [[first.memory_id, second.memory_id]]
    assert await query(settings, "MATCH (m:Memory) RETURN count(m)", namespace="lost") == [[2]]


async def test_workers_may_write_a_threads_turns_in_any_order(settings):
    store = GraphStore(settings)
    try:
        await prepare_namespace(store, "shuffled", OnnxEmbedder().name, 384)
        graph = store.graph("shuffled")
        jobs = [IngestJob(task_id=f"t{i}", memory_id=f"m{i}", namespace="shuffled",
                          text=f"turn {i}", content_hash=f"h{i}", thread="talk",
                          after=f"m{i - 1}" if i else "") for i in range(4)]
        for job in (jobs[2], jobs[0], jobs[3], jobs[1], jobs[1]):  # and one written twice
            await write_memory(graph, job, 1)
    finally:
        await store.aclose()
    rows = await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id",
                       namespace="shuffled")
    assert sorted(rows) == [["m0", "m1"], ["m1", "m2"], ["m2", "m3"]]


async def test_an_answer_is_found_through_the_question_before_it(front, chats):
    turns, loose = chats
    with_context = [h.memory_id for h in await search(front, QUESTION, "chat")]
    without = [h.memory_id for h in await search(front, QUESTION, "loose")]
    answer_rank = with_context.index(turns[1]) + 1
    assert answer_rank <= 3
    assert loose[1] not in without or without.index(loose[1]) + 1 > answer_rank
    hit = (await search(front, QUESTION, "chat"))[answer_rank - 1]
    assert hit.why["context"].rank == with_context.index(turns[0]) + 1  # lent by the question
    assert hit.why["context"].score > 0
    assert all("context" not in h.why for h in await search(front, QUESTION, "loose"))


async def test_context_never_brings_in_a_memory_the_filters_exclude(front, chats):
    turns, _ = chats
    hits = await search(front, QUESTION, "chat", filters={"tags": ["question", "other"]})
    assert turns[0] in [h.memory_id for h in hits]
    assert turns[1] not in [h.memory_id for h in hits]
