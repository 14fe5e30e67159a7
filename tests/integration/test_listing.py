"""list_memories through the real MCP server, query service, Redis/FalkorDB and workers."""

from __future__ import annotations

import time

import msgspec
import pytest

from tests.support.mcp import call, error
from tests.support.workers import add_text, run_workers
from zapomni.services.query.listing import write_cursor
from zapomni.shared.store import cypher_schema
from zapomni.shared.store.graphstore import GraphStore, run

LONG_LINE = "A first line that goes on " + "and on " * 40  # over 200 characters


async def add_all(settings, texts, metadata=None, namespace=None) -> list[str]:
    """Add ``texts`` one after another (each later than the one before); their ids."""
    return [(await add_text(settings, text, metadata, namespace)).memory_id for text in texts]


async def pages(client, **arguments) -> list[list[str]]:
    """Every page of a listing, as memory ids, following next_cursor to the end."""
    found, cursor = [], None
    while True:
        page = await call(client, "list_memories", cursor=cursor, **arguments)
        found.append([m["memory_id"] for m in page["memories"]])
        cursor = page["next_cursor"]
        if cursor is None:
            return found


async def test_memories_are_listed_newest_first_with_what_they_are(client, settings):
    ids = await add_all(settings, ["Plain note about the garden.",
                                   "Shopping\nmilk\nbread", LONG_LINE])
    tagged = await add_text(settings, "Tagged: the boiler is serviced in May.",
                            {"tags": ["home"], "source": "phone", "room": "cellar"})
    await run_workers(settings)
    page = await call(client, "list_memories")
    assert [m["memory_id"] for m in page["memories"]] == [tagged.memory_id, *ids[::-1]]
    assert page["next_cursor"] is None and page["namespace"] == "default"
    top = page["memories"][0]
    assert {k: top[k] for k in ("first_line", "tags", "source", "metadata", "chunk_count",
                                "state", "task_id")} == {
        "first_line": "Tagged: the boiler is serviced in May.", "tags": ["home"],
        "source": "phone", "metadata": {"room": "cellar"}, "chunk_count": 1, "state": "ready",
        "task_id": None}
    assert top["created_at"] >= page["memories"][1]["created_at"]
    lines = [m["first_line"] for m in page["memories"][1:]]
    assert lines[1:] == ["Shopping", "Plain note about the garden."]
    assert len(lines[0]) == 200 and lines[0].endswith("…")
    assert LONG_LINE.startswith(lines[0][:-1])
    oldest = await call(client, "list_memories", order="oldest")
    assert [m["memory_id"] for m in oldest["memories"]] == [*ids, tagged.memory_id]


async def test_filters_are_the_same_as_search(client, settings):
    work = await add_text(settings, "Budget review on Thursday.", {"tags": ["work"],
                                                                   "source": "mail"})
    home = await add_text(settings, "Water the plants.", {"tags": ["home"], "lang": "en"})
    await add_text(settings, "Other namespace note.", {"tags": ["work"]}, "elsewhere")
    await run_workers(settings)

    async def listed(filters):
        page = await call(client, "list_memories", filters=filters)
        return [m["memory_id"] for m in page["memories"]]

    assert await listed({"tags": ["work"]}) == [work.memory_id]
    assert await listed({"source": "mail"}) == [work.memory_id]
    assert await listed({"metadata": {"lang": "en"}}) == [home.memory_id]
    assert await listed({"tags_all": ["work", "home"]}) == []
    assert await listed({"before": "2000-01-01"}) == []
    assert await listed({"after": "2000-01-01"}) == [home.memory_id, work.memory_id]
    empty = await call(client, "list_memories", namespace="never-used")
    assert (empty["memories"], empty["next_cursor"]) == ([], None)


async def test_pages_follow_the_cursor_and_do_not_shift_while_memories_are_added(client,
                                                                                 settings):
    ids = await add_all(settings, [f"Note number {i} about the harbour." for i in range(7)])
    await run_workers(settings)
    newest = ids[::-1]
    assert await pages(client, limit=3) == [newest[:3], newest[3:6], newest[6:]]
    assert await pages(client, limit=3, order="oldest") == [ids[:3], ids[3:6], ids[6:]]
    assert await pages(client, limit=7) == [newest]  # no empty last page

    first = await call(client, "list_memories", limit=3)
    later = await add_all(settings, [f"A later note {i} about the lighthouse." for i in
                                     range(2)])
    await run_workers(settings)
    second = await call(client, "list_memories", limit=3, cursor=first["next_cursor"])
    assert [m["memory_id"] for m in second["memories"]] == newest[3:6]
    third = await call(client, "list_memories", limit=3, cursor=second["next_cursor"])
    assert ([m["memory_id"] for m in third["memories"]], third["next_cursor"]) == (
        newest[6:], None)
    # oldest first, the new memories come after every page already read
    assert sum(await pages(client, limit=4, order="oldest"), []) == [*ids, *later]


async def test_pages_are_exact_over_years_of_memories_and_equal_times(client, settings):
    """Memories whose event times spread from a minute ahead (another clock) to ~30 years
    back, pairs that happened in the same microsecond, added at the same time or not: every
    page, either order, is the exact slice of the whole order (by event time in
    microseconds, then time added, then id), across the windows a page is read from."""
    now = time.time()
    times = [now + 60, now, now, now - 1, *(now - 10 ** (k / 4) for k in range(4, 36)),
             now - 5e8, now - 5e8, now - 5e8]
    rows = [[f"mem_{i * 7919 % 1000:032x}", at, f"Memory {i}\nbody", now - i % 2] for i, at in
            enumerate(times)]
    store = GraphStore(settings)
    try:
        graph = store.graph("default")
        for query in cypher_schema.SCHEMA:
            await run(graph, query)
        await run(graph, "UNWIND $rows AS r CREATE (:Memory {id: r[0], occurred_at: r[1], "
                         "created_at: r[3], text: r[2], tags: [], source: '', metadata: '{}', "
                         "meta_kv: [], chunk_count: 1, ready: true, task_id: ''})",
                  {"rows": rows})
    finally:
        await store.aclose()
    order = sorted(rows, key=lambda r: (int(r[1] * 1_000_000), int(r[3] * 1_000_000), r[0]),
                   reverse=True)
    newest = [r[0] for r in order]
    for limit in (1, 3, 7):
        found = await pages(client, limit=limit)
        assert sum(found, []) == newest and all(len(p) == limit for p in found[:-1])
        assert sum(await pages(client, limit=limit, order="oldest"), []) == newest[::-1]


async def test_a_memory_still_ingesting_is_listed_with_its_task(client, settings, aredis,
                                                                part_chunks):
    from zapomni.workers.main import make_worker

    # a long text fans out: its ingest job writes the memory and queues its parts
    part_chunks(2)
    fan_out = msgspec.structs.replace(settings, chunk_tokens=64)
    text = " ".join(f"Sentence {i} of a long report on harbour cranes." for i in range(80))
    receipt = await add_text(settings, text)
    worker = make_worker(fan_out, burst=True, handle_signals=False)
    worker.max_burst_jobs = 1
    await worker.main()
    await worker.close()
    listed = (await call(client, "list_memories"))["memories"]
    assert [(m["memory_id"], m["state"], m["task_id"]) for m in listed] == [
        (receipt.memory_id, "ingesting", receipt.task_id)]
    await run_workers(fan_out)
    listed = (await call(client, "list_memories"))["memories"]
    assert [(m["state"], m["task_id"]) for m in listed] == [("ready", None)]
    assert listed[0]["chunk_count"] > 2


@pytest.mark.parametrize(("arguments", "message"), [
    ({"limit": 0}, "limit: must be at least 1"),
    ({"limit": 201}, "limit: must be at most 200"),
    ({"limit": "5"}, "limit: expected an integer, got a string"),
    ({"order": "random"}, "order: expected newest or oldest"),
    ({"cursor": "not-a-cursor"}, "cursor: not a cursor list_memories returned"),
    ({"cursor": ""}, "cursor: must not be empty"),
    ({"cursor": "x" * 201}, "cursor: too long (at most 200 characters)"),
    ({"cursor": write_cursor("oldest", 1, 1, "mem_" + "0" * 32)},
     "cursor: not a cursor list_memories returned for this order"),
    ({"cursor": write_cursor("newest", 1, 1, "../etc")}, "cursor: not a cursor"),
    ({"filters": {"colour": "red"}}, "filters: unknown key(s) colour"),
    ({"namespace": "Bad NS"}, "namespace: must be 1-64 characters"),
    ({"sort": "newest"}, "sort: unknown argument; list_memories takes namespace, filters"),
])
async def test_bad_arguments_are_refused_in_our_words(client, arguments, message):
    text = await error(client, "list_memories", **arguments)
    assert text.startswith(message), text
