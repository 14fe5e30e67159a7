"""The write policy (ZAPOMNI_WRITE_POLICY) through the real MCP server and Redis: a refused
add answers {stored: false, reason} and leaves nothing behind; only stored adds count
against a thread's window."""

from __future__ import annotations

import json

import msgspec
from fastmcp import Client

from tests.conftest import make_settings
from tests.support.mcp import call, error
from tests.support.waiting import eventually
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server
from zapomni.shared.protocol import policy


def with_policy(falkordb_url: str, rules: dict, **overrides):
    return make_settings(falkordb_url, write_policy=json.dumps(rules), **overrides)


async def left_behind(aredis, settings) -> tuple[int, int, int]:
    """Tasks queued, task records and memory claims: what a stored add leaves."""
    return (await aredis.zcard("zapomni:tasks:*:queued"),
            len(await aredis.keys("zapomni:task:*")), len(await aredis.keys("zapomni:mem:*")))


async def test_a_confidence_below_the_minimum_is_refused_and_nothing_is_stored(
        settings, falkordb_url, aredis):
    settings = with_policy(falkordb_url, {
        "*": {"min_confidence": 0.5}, "open": {},
        "strict": {"min_confidence": 0.5, "require_confidence": True}})
    async with Client(build_server(settings)) as client:
        low = await call(client, "add_memory", text="The meeting might be on Friday.",
                         metadata={"confidence": 0.3})
        assert low == {"stored": False, "namespace": "default", "reason": (
            "metadata.confidence: 0.3 is below the minimum of 0.5 in namespace 'default' "
            "(write policy); nothing was stored")}
        unstated = await call(client, "add_memory", text="Call me Ishmael.",
                              namespace="strict")
        assert unstated["stored"] is False and unstated["reason"].startswith(
            "metadata.confidence: required in namespace 'strict' (write policy)")
        assert await left_behind(aredis, settings) == (0, 0, 0)

        sure = await call(client, "add_memory", text="The meeting is on Friday.",
                          metadata={"confidence": 0.5})
        plain = await call(client, "add_memory", text="A note with no confidence.")
        elsewhere = await call(client, "add_memory", text="Maybe it rains.",
                               metadata={"confidence": 0.1}, namespace="open")
    assert [r["status"] for r in (sure, plain, elsewhere)] == ["queued"] * 3
    assert await left_behind(aredis, settings) == (3, 3, 3)


async def test_a_thread_takes_at_most_its_share_per_window(settings, falkordb_url, aredis):
    settings = with_policy(falkordb_url, {"chat": {"max_per_thread": 2,
                                                   "window_seconds": 3600}})
    turn = {"thread": "t1"}
    async with Client(build_server(settings)) as client:
        first = await call(client, "add_memory", text="Hi, I am Ann.", metadata=turn,
                           namespace="chat")
        again = await call(client, "add_memory", text="Hi, I am Ann.", metadata=turn,
                           namespace="chat")
        assert again["duplicate"] and again["memory_id"] == first["memory_id"]
        second = await call(client, "add_memory", text="I like sailing.", metadata=turn,
                            namespace="chat")  # the duplicate did not count
        third = await call(client, "add_memory", text="And chess.", metadata=turn,
                           namespace="chat")
        other = await call(client, "add_memory", text="Hello from Bob.",
                           metadata={"thread": "t2"}, namespace="chat")
        loose = await call(client, "add_memories", namespace="chat", items=[
            {"text": "No thread here."}, {"text": "Nor here."}, {"text": "Nor here either."}])
        batch = await call(client, "add_memories", namespace="chat", items=[
            {"text": f"Bob's turn {i}.", "metadata": {"thread": "t2"}} for i in range(3)])
    assert second["status"] == "queued" and third["stored"] is False
    assert third["reason"].startswith(
        "metadata.thread: 2 memories in 3,600 s is the limit for one thread in namespace "
        "'chat' (write policy); nothing was stored. Retry in ")
    assert other["status"] == "queued"
    assert [r.get("status") for r in loose["results"]] == ["queued"] * 3
    assert [r.get("stored", True) for r in batch["results"]] == [True, False, False]
    stored_adds = 2 + 1 + 3 + 1
    assert await left_behind(aredis, settings) == (stored_adds,) * 3
    assert await aredis.zcard(policy.window_key("chat", "t1")) == 2
    assert 0 < await aredis.pttl(policy.window_key("chat", "t1")) <= 3600 * 1000


async def test_an_add_refused_for_capacity_gives_its_place_back(settings, falkordb_url, aredis):
    settings = with_policy(falkordb_url, {"*": {"max_per_thread": 1}}, max_queue_depth=1)
    async with Client(build_server(settings)) as client:
        # one job: an add to another namespace (one to this one would join its batch)
        await call(client, "add_memory", text="Fills the queue.", namespace="other")
        full = await error(client, "add_memory", text="First turn.", metadata={"thread": "t"})
        assert full.startswith("temporarily unavailable: the ingest queue is full")
        await run_workers(settings)
        accepted = await call(client, "add_memory", text="First turn.",
                              metadata={"thread": "t"})
        refused = await call(client, "add_memory", text="Second turn.",
                             metadata={"thread": "t"})
    assert accepted["status"] == "queued" and refused["stored"] is False


async def test_the_window_slides(settings, falkordb_url, aredis):
    settings = with_policy(falkordb_url, {"*": {"max_per_thread": 1, "window_seconds": 1}})
    async with Client(build_server(settings)) as client:
        await call(client, "add_memory", text="One.", metadata={"thread": "t"})
        refused = await call(client, "add_memory", text="Two.", metadata={"thread": "t"})
        assert refused["reason"].endswith("Retry in 1 s")
        later = await eventually(
            lambda: call(client, "add_memory", text="Two.", metadata={"thread": "t"}),
            lambda answer: answer.get("stored", True), "the window to pass", timeout=30)
    assert later["status"] == "queued"
    assert await left_behind(aredis, settings) == (2, 2, 2)


async def test_a_new_version_the_policy_refuses_answers_refused_and_keeps_the_old(
        settings, falkordb_url, query_service):
    policed = with_policy(falkordb_url, {"*": {"min_confidence": 0.5}})
    # the query service started for `settings` answers get_memory
    settings = msgspec.structs.replace(settings, write_policy=policed.write_policy)
    async with Client(build_server(settings)) as client:
        first = await call(client, "add_memory", text="The meeting is on Friday.",
                           metadata={"confidence": 0.9})
        await run_workers(settings)
        doubtful = await call(client, "update_memory", memory_id=first["memory_id"],
                              text="The meeting might be on Saturday.",
                              metadata={"confidence": 0.2})
        kept = await call(client, "get_memory", memory_id=first["memory_id"])
    assert doubtful == {"memory_id": first["memory_id"], "task_id": None, "status": "refused",
                        "namespace": "default", "message": (
                            "metadata.confidence: 0.2 is below the minimum of 0.5 in namespace "
                            "'default' (write policy); nothing was stored")}
    assert (kept["text"], kept["metadata"]["confidence"]) == ("The meeting is on Friday.", 0.9)
