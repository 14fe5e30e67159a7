"""Cypher and RediSearch syntax in every field a user controls is stored and searched as
plain text, and one namespace never sees, counts or deletes another's memories.

Through fastmcp's client, with real workers (ingest and entity extraction) and the real
query service."""

from __future__ import annotations

from tests.support.graph import broken, stored
from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.shared.tasks.capacity import QUEUE_NAME

CYPHER = "x'}) MATCH (n) DETACH DELETE n //"
REDISEARCH = "@text:(*) | -foo ~bar {baz} \"q\" %fuzzy% [1 TO 9]"
HOSTILE_TEXT = (f"Captain Nemo sailed the Nautilus. {CYPHER} {REDISEARCH} "
                "$param `backtick` \\ \u202e end.")
HOSTILE_META = {"tags": [CYPHER, REDISEARCH, "plain"], "source": CYPHER,
                CYPHER: REDISEARCH, "k`}) RETURN 1 //": {"nested": CYPHER}, "n": 7}


async def test_hostile_syntax_in_every_field_is_plain_text(client, settings):
    bystander = await call(client, "add_memory", text="The lighthouse keeper logs each ship.")
    added = await call(client, "add_memory", text=HOSTILE_TEXT, metadata=HOSTILE_META)
    await run_workers(settings)

    # stored exactly as sent
    got = await call(client, "get_memory", memory_id=added["memory_id"])
    assert got["text"] == HOSTILE_TEXT
    assert got["tags"] == HOSTILE_META["tags"] and got["source"] == CYPHER
    assert got["metadata"] == {k: v for k, v in HOSTILE_META.items()
                               if k not in ("tags", "source")}
    # searched as text, in every mode, and filters match hostile values literally
    for mode in ("hybrid", "vector", "keyword"):
        hits = (await call(client, "search_memory", query=HOSTILE_TEXT, mode=mode))["results"]
        assert hits[0]["memory_id"] == added["memory_id"]
    for filters in ({"tags": [CYPHER]}, {"tags_all": [REDISEARCH, "plain"]},
                    {"source": CYPHER}, {"metadata": {CYPHER: REDISEARCH}}):
        hits = (await call(client, "search_memory", query="Nautilus",
                           filters=filters))["results"]
        assert [h["memory_id"] for h in hits] == [added["memory_id"]], filters
    for query in (CYPHER, REDISEARCH, "k`}) RETURN 1 //"):
        await call(client, "search_entities", query=query)
        assert (await error(client, "get_entity", name_or_id=query)).startswith(
            "name_or_id: no entity")
    # nothing else was touched: the bystander is there, the graph is whole
    assert (await call(client, "get_memory", memory_id=bystander["memory_id"]))["text"]
    assert (await stored(settings))["memories"] == 2
    assert not any((await broken(settings)).values())


async def test_hostile_ids_and_namespaces_are_refused_by_name(client, settings, aredis):
    for tool, field in (("get_memory", "memory_id"), ("delete_memory", "memory_id"),
                        ("graph_status", "task_id"), ("cancel_task", "task_id")):
        message = await error(client, tool, **{field: CYPHER})
        assert message.startswith(f"{field}: not a valid id")
    message = await error(client, "add_memory", text="hello", namespace=CYPHER)
    assert message.startswith("namespace:")
    assert await aredis.zcard(QUEUE_NAME) == 0


async def test_one_namespace_never_sees_counts_or_deletes_another(client, settings):
    alice = await call(client, "add_memory", namespace="alice",
                       text="Alice keeps the spare key under the blue flowerpot in Lisbon.")
    bob = await call(client, "add_memory", namespace="bob",
                     text="Bob keeps the spare key inside the garden gnome in Osaka.")
    await run_workers(settings)

    hits = (await call(client, "search_memory", query="spare key", namespace="alice"))
    assert [h["memory_id"] for h in hits["results"]] == [alice["memory_id"]]
    for mode in ("vector", "keyword", "graph"):
        found = await call(client, "search_memory", query="spare key Osaka gnome",
                           namespace="alice", mode=mode)
        assert bob["memory_id"] not in [h["memory_id"] for h in found["results"]]
    entities = await call(client, "search_entities", query="Osaka", namespace="alice")
    assert entities["results"] == []
    assert (await call(client, "search_entities", query="Osaka", namespace="bob"))["results"]
    assert "no entity" in await error(client, "get_entity", name_or_id="Osaka",
                                      namespace="alice")
    stats = await call(client, "get_stats", namespace="alice")
    assert (stats["memories"], stats["chunks"]) == (1, 1)
    # bob's memory cannot be read, deleted or rebuilt from alice's namespace
    assert "not found" in await error(client, "get_memory", memory_id=bob["memory_id"],
                                      namespace="alice")
    assert (await call(client, "delete_memory", memory_id=bob["memory_id"],
                       namespace="alice"))["status"] == "gone"
    await run_workers(settings)
    assert (await call(client, "get_memory", memory_id=bob["memory_id"],
                       namespace="bob"))["text"].startswith("Bob keeps")
    assert (await stored(settings, "bob"))["memories"] == 1
