"""Every MCP tool through fastmcp's real client, against real Redis/FalkorDB, workers and the
query service."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastmcp import Client

from tests.conftest import make_settings
from tests.integration.test_races import Act
from tests.support.graph import stored
from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.capacity import QUEUE_NAME

TOOLS = {"add_memory", "add_memories", "graph_status", "search_memory", "get_memory",
         "delete_memory", "get_stats", "build_graph", "cancel_task", "search_entities",
         "get_entity", "update_memory", "list_memories", "ingest_path",
         "get_history", "build_context", "reembed"}


async def nothing_queued(aredis, settings: Settings) -> bool:
    return (await aredis.zcard(QUEUE_NAME) == 0
            and not await aredis.keys("zapomni:task:*"))


async def test_the_whole_tool_set(client, settings, aredis):
    assert {t.name for t in await client.list_tools()} == TOOLS
    added = await call(client, "add_memory", text="Ada Lovelace wrote the first program.",
                       metadata={"tags": ["history"], "source": "book"}, namespace="notes")
    assert set(added) == {"memory_id", "task_id", "status", "duplicate", "namespace"}
    assert (added["status"], added["duplicate"]) == ("queued", False)
    batch = await call(client, "add_memories", namespace="notes", items=[
        {"text": "Grace Hopper built the first compiler."},
        {"text": "Alan Turing described a universal machine.", "metadata": {"tags": ["cs"]}},
    ])
    assert [r["duplicate"] for r in batch["results"]] == [False, False]
    status = await call(client, "graph_status", task_id=added["task_id"])
    assert (status["state"], status["progress"]) == ("queued", {"done": 0, "total": 1,
                                                                "percent": 0.0})

    await run_workers(settings)

    status = await call(client, "graph_status", task_id=added["task_id"])
    assert status["state"] == "done" and status["progress"]["percent"] == 100.0
    assert status["kind"] == "ingest" and status["seconds"] is not None and status["worker"]
    found = await call(client, "search_memory", query="who wrote the first program?",
                       namespace="notes", limit=2)
    assert len(found["results"]) == 2
    top = found["results"][0]
    assert (top["memory_id"], top["tags"], top["source"]) == (added["memory_id"], ["history"],
                                                              "book")
    assert 0 < top["score"] <= 1 and top["text"] == "Ada Lovelace wrote the first program."
    filtered = await call(client, "search_memory", query="machines", namespace="notes",
                          filters={"tags": ["cs"]})
    assert [r["text"] for r in filtered["results"]] == [
        "Alan Turing described a universal machine."]
    memory = await call(client, "get_memory", memory_id=added["memory_id"], namespace="notes")
    assert (memory["status"], memory["chunk_count"]) == ("ready", 1)
    stats = await call(client, "get_stats", namespace="notes")
    assert (stats["memories"], stats["chunks"], stats["workers_alive"]) == (3, 3, 0)

    deleted = await call(client, "delete_memory", memory_id=added["memory_id"],
                         namespace="notes")
    await run_workers(settings)
    assert (await call(client, "graph_status", task_id=deleted["task_id"]))["state"] == "done"
    assert "not found" in await error(client, "get_memory", memory_id=added["memory_id"],
                                      namespace="notes")
    assert (await stored(settings, "notes"))["memories"] == 2


@pytest.mark.parametrize(("tool", "arguments", "message"), [
    ("add_memory", {"text": "   "}, "text: must not be empty or only whitespace"),
    ("add_memory", {"text": "a\x00b"}, "text: must not contain NUL characters"),
    ("add_memory", {"text": "x", "namespace": "Bad NS"}, "namespace: must be 1-64 characters"),
    ("add_memory", {"text": "x", "metadata": {"tags": ["a\x00"]}},
     "metadata.tags[0]: must not contain NUL characters"),
    ("add_memory", {"text": "x", "metadata": {"source": "\x00", "thread": "t"}},
     "metadata.source: must not contain NUL characters"),
    ("add_memory", {"text": "x", "metadata": {"thread": "t\x00"}},
     "metadata.thread: must not contain NUL characters"),
    ("add_memories", {"items": [{"text": "ok"}, {"text": "x", "metadata": {"k\x00": 1}}]},
     'items[1].metadata: the key "k\\u0000" must not contain NUL characters'),
    ("update_memory", {"memory_id": "mem_" + "0" * 32, "metadata": {"room": "a\x00"}},
     "metadata.room: must not contain NUL characters"),
    ("add_memory", {"text": "x", "metadata": {"created_at": 1}},
     "metadata: reserved key(s) created_at; rename them"),
    ("add_memory", {"text": "x", "metadata": {"tags": ["t"] * 101}},
     "metadata.tags: 101 tags is over the limit of 100"),
    ("add_memories", {"items": []}, "items: expected a list of 1 to 1000 items"),
    ("add_memories", {"items": [{"text": "ok"}, {"text": ""}]},
     "items[1].text: must not be empty"),
    ("add_memories", {"items": [{"text": "ok", "extra": 1}]},
     "items[0]: expected an object with 'text' and optional 'metadata'"),
    ("search_memory", {"query": "x" * 2001}, "query: too long (at most 2,000 characters)"),
    ("search_memory", {"query": "q", "limit": 0}, "limit: must be at least 1"),
    ("search_memory", {"query": "q", "filters": {"color": "red"}},
     "filters: unknown key(s) color; known: tags, tags_all, source, source_prefix, after, "
     "before, metadata, include_superseded"),
    ("graph_status", {"task_id": "nope"}, "task_id: not a valid id"),
    ("get_memory", {"memory_id": "mem_123"}, "memory_id: not a valid id"),
    ("delete_memory", {"memory_id": "../../etc"}, "memory_id: not a valid id"),
    ("get_stats", {"namespace": "x" * 65}, "namespace: must be 1-64 characters"),
    ("build_graph", {"memory_ids": ["mem_1"]},
     "memory_ids[0]: not a valid id (expected mem_ and 32 hex digits)"),
    ("build_graph", {"memory_ids": []}, "memory_ids: too few items (at least 1)"),
    ("cancel_task", {"task_id": "task_x"}, "task_id: not a valid id"),
    ("search_entities", {"query": "x", "type": "planet"}, "type: expected one of class, constant"),
    ("search_entities", {"query": " "}, "query: must not be empty"),
    ("get_entity", {"name_or_id": "Ada", "depth": 3}, "depth: must be at most 2"),
    ("update_memory", {"memory_id": "mem_1", "metadata": {"a": 1}}, "memory_id: not a valid id"),
    ("update_memory", {"memory_id": "mem_" + "0" * 32},
     "text: give a new text, or metadata to change, or both; nothing was changed"),
    ("update_memory", {"memory_id": "mem_" + "0" * 32, "metadata": {"text": None}},
     "metadata: reserved key(s) text; rename them"),
    ("ingest_path", {"path": "/etc"}, "path: ingest_path is off on this server; set "
     "ZAPOMNI_INGEST_ROOTS to the folders it may read"),
    ("ingest_path", {"path": ""}, "path: must not be empty"),
    ("ingest_path", {"path": "/x", "include": ["*"] * 51}, "include: too many items"),
])
async def test_bad_input_is_a_clear_error_and_nothing_is_queued(client, settings, aredis,
                                                                tool, arguments, message):
    assert (await error(client, tool, **arguments)).startswith(message)
    assert await nothing_queued(aredis, settings)


# what the tools' signatures refuse (services/mcp/arguments.py words it): strict types
@pytest.mark.parametrize(("tool", "arguments", "message"), [
    ("add_memory", {"text": 5}, "text: expected a string, got 5"),
    ("add_memory", {"text": "x", "metadata": ["tags"]},
     "metadata: expected a JSON object, got a list"),
    ("add_memory", {}, "text: required but missing; send a string"),
    ("add_memory", {"text": "x", "tags": ["t"]},
     "tags: unknown argument; add_memory takes text, metadata, namespace"),
    ("add_memories", {"items": {"text": "x"}}, "items: expected a list, got a JSON object"),
    ("add_memories", {"items": ["x"]}, "items[0]: expected a JSON object, got a string"),
    ("add_memories", {"items": [{"text": None}]}, "items[0].text: expected a string, got null"),
    ("search_memory", {"query": "q", "limit": "10"}, "limit: expected an integer, got a string"),
    ("search_memory", {"query": "q", "limit": 10.5}, "limit: expected an integer, got 10.5"),
    ("search_memory", {"query": "q", "limit": True}, "limit: expected an integer, got true"),
    ("search_memory", {"query": "q", "min_score": "0.5"},
     "min_score: expected a number, got a string"),
    ("search_memory", {"query": "q", "filters": [1]},
     "filters: expected a JSON object, got a list"),
    ("search_memory", {"query": "q", "filters": {"metadata": {"lang": ["en"]}}},
     "filters.metadata: expected true, false, a number or a string, got a list"),
    ("search_memory", {"limit": 3}, "query: required but missing; send a string"),
    ("search_memory", {"query": "q", "top_k": 3}, "top_k: unknown argument; search_memory "
     "takes query, limit, filters, namespace, mode, min_score"),
    ("search_memory", {"query": "q", "a\nb": 1}, '"a\\nb": unknown argument;'),
    ("graph_status", {"task_id": None}, "task_id: expected a string, got null"),
    ("graph_status", {}, "task_id: required but missing; send a string"),
    ("get_memory", {"memory_id": ["mem_1"]}, "memory_id: expected a string, got a list"),
    ("delete_memory", {"memory_id": "mem_" + "0" * 32, "force": True},
     "force: unknown argument; delete_memory takes memory_id, namespace"),
    ("get_stats", {"namespace": 7}, "namespace: expected a string, got 7"),
    ("build_graph", {"rebuild": "yes"}, "rebuild: expected true or false, got a string"),
    ("build_graph", {"rebuild": "true"}, "rebuild: expected true or false, got a string"),
    ("build_graph", {"rebuild": 1}, "rebuild: expected true or false, got 1"),
    ("build_graph", {"memory_ids": "mem_1"}, "memory_ids: expected a list, got a string"),
    ("build_graph", {"memory_ids": [1]}, "memory_ids[0]: expected a string, got 1"),
    ("cancel_task", {"task_id": 1}, "task_id: expected a string, got 1"),
    ("ingest_path", {"path": ["/tmp"]}, "path: expected a string, got a list"),
    ("ingest_path", {"path": "/tmp", "include": "*.py"},
     "include: expected a list, got a string"),
    ("search_entities", {"query": "x", "limit": 2.0}, "limit: expected an integer, got 2.0"),
    ("search_entities", {"query": "x", "type": 3}, "type: expected a string, got 3"),
    ("get_entity", {"name_or_id": "Ada", "depth": True}, "depth: expected an integer, got true"),
    ("get_entity", {"depth": 1, "name": "Ada"},
     "name_or_id: required but missing; send a string (and 1 more problem)"),
])
async def test_wrong_types_unknown_and_missing_arguments_are_refused_in_our_words(
        client, settings, aredis, tool, arguments, message):
    text = await error(client, tool, **arguments)
    assert text.startswith(message), text
    assert "\n" not in text and "pydantic" not in text and "http" not in text
    assert await nothing_queued(aredis, settings)


async def test_a_memory_not_yet_written_is_queued_then_ingesting_with_its_task(
        client, settings):
    text = "The harbour of Vesterby froze over in the winter of 1902."
    added = await call(client, "add_memory", text=text, namespace="notes", metadata={
        "tags": ["sea"], "source": "logbook", "captain": "Aino"})
    queued = await call(client, "get_memory", memory_id=added["memory_id"], namespace="notes")
    assert {k: queued[k] for k in ("status", "task_id", "text", "tags", "source", "metadata",
                                   "chunk_count")} == {
        "status": "queued", "task_id": added["task_id"], "text": text, "tags": ["sea"],
        "source": "logbook", "metadata": {"captain": "Aino"}, "chunk_count": 0}
    assert "parts" not in queued
    resource = await client.read_resource(f"memory://notes/{added['memory_id']}")
    assert json.loads(resource[0].text)["status"] == "queued"
    status = await call(client, "graph_status", task_id=added["task_id"])
    assert (status["state"], status["message"]) == ("queued", "waiting for a worker")
    seen = {}

    async def look(job) -> None:  # a worker has taken the job; nothing is written yet
        seen["running"] = await call(client, "get_memory", memory_id=added["memory_id"],
                                     namespace="notes")
        seen["stored"] = await stored(settings, "notes")
        seen["status"] = await call(client, "graph_status", task_id=added["task_id"])

    await run_workers(settings, checkpoint=Act("owned", look))
    assert seen["stored"]["memories"] == 0
    assert seen["status"]["state"] == "running"  # and a message that waits for no worker
    assert not seen["status"]["message"].startswith("waiting"), seen["status"]
    assert (seen["running"]["status"], seen["running"]["task_id"], seen["running"]["text"]) == (
        "ingesting", added["task_id"], text)
    ready = await call(client, "get_memory", memory_id=added["memory_id"], namespace="notes")
    assert (ready["status"], ready["chunk_count"], ready["text"]) == ("ready", 1, text)
    assert "task_id" not in ready

    deleted = await call(client, "delete_memory", memory_id=added["memory_id"],
                         namespace="notes")

    async def look_again(job) -> None:  # a delete says nothing more until it is done
        seen["deleting"] = await call(client, "graph_status", task_id=deleted["task_id"])

    await run_workers(settings, checkpoint=Act("deleted", look_again))
    assert (seen["deleting"]["state"], seen["deleting"]["message"]) == (
        "running", "a worker started it")


async def test_unknown_ids_say_not_found(client):
    assert await error(client, "graph_status", task_id="task_" + "0" * 32) == (
        f"task_id: task_{'0' * 32} not found (task records are kept 7 days)")
    assert await call(client, "delete_memory", memory_id="mem_" + "0" * 32) == {
        "memory_id": "mem_" + "0" * 32, "task_id": None, "status": "gone",
        "namespace": "default", "message": f"mem_{'0' * 32} is not stored in namespace "
                                           "'default' (deleted already, or never added); "
                                           "nothing to delete"}
    assert await error(client, "update_memory", memory_id="mem_" + "0" * 32,
                       metadata={"tags": ["x"]}) == (
        f"memory_id: mem_{'0' * 32} not found in namespace 'default'")


async def test_internal_errors_are_masked(client, aredis):
    task_id = "task_" + "1" * 32
    await aredis.hset(f"zapomni:task:{task_id}", mapping={"task_id": task_id, "kind": "x",
                                                          "namespace": "n", "state": "running",
                                                          "done": "lots"})
    message = await error(client, "graph_status", task_id=task_id)
    assert message == "Error calling tool 'graph_status'"


async def test_full_queue_refuses_with_a_retryable_error(falkordb_url, aredis):
    settings = make_settings(falkordb_url, max_queue_depth=2)
    async with Client(build_server(settings)) as client:
        # two jobs (adds to one namespace would share one: shared/tasks/adds.py)
        await call(client, "add_memory", text="first", namespace="one")
        await call(client, "add_memory", text="second", namespace="two")
        message = await error(client, "add_memory", text="third", namespace="three")
        batch = await error(client, "add_memories", items=[{"text": "fourth"}])
    assert message.startswith("temporarily unavailable: the ingest queue is full (2 jobs, "
                              "limit 2); nothing was stored. Retry in ~30 seconds")
    assert batch.startswith("temporarily unavailable: the ingest queue is full")
    assert await aredis.zcard(QUEUE_NAME) == 2
    assert len(await aredis.keys("zapomni:task:*")) == 2


async def test_redis_or_query_service_down_is_a_retryable_error_not_a_hang(falkordb_url):
    from zapomni.services.stack.falkordb import free_port

    settings = make_settings(falkordb_url, redis_url=f"redis://127.0.0.1:{free_port()}/0",
                             query_url=f"http://127.0.0.1:{free_port()}", request_timeout=2.0)
    async with Client(build_server(settings)) as client:
        async with asyncio.timeout(20):
            add = await error(client, "add_memory", text="hello")
            status = await error(client, "graph_status", task_id="task_" + "2" * 32)
            search = await error(client, "search_memory", query="hello")
    assert add == ("temporarily unavailable: the queue (Redis) is unreachable; nothing was "
                   "stored. Retry in a few seconds")
    assert status == add
    assert search == ("temporarily unavailable: the query service is unreachable (is "
                      "zapomni-query running?); retry in a few seconds")
