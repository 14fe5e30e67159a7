"""Event time, the time rule, as_of and time words, and the newer statement first, through
fastmcp's client, the real query service, real workers and FalkorDB (issue 32)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime

from tests.support.graph import query
from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.services.cli.moves import run_migrate
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.store.migrate import SCHEMA_VERSION, schema_version

MAY_2023 = datetime.fromisoformat("2023-05-26T12:00:00+00:00").timestamp()


async def add(client, text: str, namespace: str = "time", **metadata) -> str:
    return (await call(client, "add_memory", text=text, metadata=metadata or None,
                       namespace=namespace))["memory_id"]


async def test_event_time_orders_filters_and_shows(client, settings):
    """A memory says when it happened (ISO-8601 or unix seconds); absent, it happened when
    it was added. Filters, listing, history and results read that time."""
    old = await add(client, "We signed the lease for the flat on Elm Street.", thread="t",
                    occurred_at="2021-03-01")
    late = await add(client, "The flat on Elm Street got a new boiler.", thread="t",
                     occurred_at=1_650_000_000)  # 2022-04-15
    now = await add(client, "The Elm Street flat is up for sale.", thread="t")
    await run_workers(settings)

    memory = await call(client, "get_memory", memory_id=old, namespace="time")
    assert memory["occurred_at"] == "2021-03-01T00:00:00+00:00"
    assert memory["metadata"]["occurred_at"] == "2021-03-01T00:00:00Z"
    assert memory["created_at"] > "2025"
    listed = await call(client, "list_memories", namespace="time")
    assert [m["memory_id"] for m in listed["memories"]] == [now, late, old]
    oldest = await call(client, "list_memories", namespace="time", order="oldest", limit=1)
    assert [m["memory_id"] for m in oldest["memories"]] == [old]
    turns = (await call(client, "get_history", thread="t", namespace="time"))["turns"]
    assert [t["memory_id"] for t in turns] == [old, late, now]
    assert [t["occurred_at"][:10] for t in turns[:2]] == ["2021-03-01", "2022-04-15"]

    for after, before, expected in (("2022-01-01", "2023-01-01", {late}),
                                    (1_600_000_000, 1_640_000_000, {old}),
                                    ("2023-01-01", None, {now})):
        filters = {"after": after} | ({"before": before} if before else {})
        hits = await call(client, "search_memory", query="Elm Street flat", namespace="time",
                          filters=filters)
        assert {h["memory_id"] for h in hits["results"]} == expected
        assert all(h["occurred_at"] and h["created_at"] for h in hits["results"])


async def test_every_point_in_time_takes_iso_or_unix_seconds(client):
    for arguments, message in (
        ({"tool": "add_memory", "text": "x", "metadata": {"occurred_at": "last week"}},
         "metadata.occurred_at: expected an ISO-8601 date or datetime"),
        ({"tool": "add_memory", "text": "x", "metadata": {"expires_at": 1_000}},
         "metadata.expires_at: 1970-01-01T00:16:40Z is in the past"),
        ({"tool": "add_memory", "text": "x", "metadata": {"expires_in": "an hour"}},
         "metadata.expires_in: expected seconds from now"),
        ({"tool": "search_memory", "query": "x", "as_of": "tomorrow"},
         "as_of: expected an ISO-8601 date or datetime"),
        ({"tool": "search_memory", "query": "x", "as_of": True},
         "as_of: expected a string or a number or null, got true"),
        ({"tool": "build_context", "query": "x", "as_of": "soon"},
         "as_of: expected an ISO-8601 date or datetime"),
        ({"tool": "search_memory", "query": "x", "filters": {"after": "May"}},
         "filters.after: expected an ISO-8601 date or datetime"),
        ({"tool": "search_memory", "query": "x", "as_of": "2026-02-30"},
         "as_of: no such day: 2026-02-30 (February 2026 has 28 days)"),
        ({"tool": "build_context", "query": "x", "as_of": -5},
         "as_of: -5.0 is negative; unix seconds count from 1970-01-01 and are never an offset "
         "from now"),
        ({"tool": "add_memory", "text": "x", "metadata": {"occurred_at": "2026-04-31"}},
         "metadata.occurred_at: no such day: 2026-04-31 (April 2026 has 30 days)"),
    ):
        tool = arguments.pop("tool")
        assert (await error(client, tool, **arguments)).startswith(message)
    expiring = await call(client, "add_memory", text="The gate code is 1234.",
                          metadata={"expires_in": 3600})
    shown = await call(client, "get_memory", memory_id=expiring["memory_id"])
    assert shown["status"] == "queued" and "expires_in" not in shown["metadata"]
    assert shown["metadata"]["expires_at"].endswith("Z")


async def test_time_words_are_a_soft_prior_shown_in_why(client, settings):
    """"last week" asked as of a day in May 2023 lifts what happened that week; a window
    nothing happened in leaves the results as they were."""
    march = await add(client, "I went to a pottery class with my neighbour.",
                      occurred_at="2023-03-10T18:00:00Z")
    may = await add(client, "I went to a pottery class and made a vase.",
                    occurred_at="2023-05-17T18:00:00Z")
    await run_workers(settings)
    asked = {"query": "What did I make at the pottery class last week?", "namespace": "time",
             "as_of": MAY_2023}
    hits = (await call(client, "search_memory", **asked))["results"]
    assert hits[0]["memory_id"] == may
    why = hits[0]["why"]["time"]
    assert why["words"] == "last week" and why["score"] == 1.0 and why["points"] > 0
    assert why["window"] == ["2023-05-15T00:00:00Z", "2023-05-22T00:00:00Z"]
    earlier = (await call(client, "search_memory", **{**asked, "query": "What did I do at "
                          "the pottery class with my neighbour in March?"}))["results"]
    assert earlier[0]["memory_id"] == march and earlier[0]["why"]["time"]["score"] == 1.0
    empty_window = (await call(client, "search_memory", **{**asked, "query": "pottery class "
                               "in 1999"}))["results"]
    assert {h["memory_id"] for h in empty_window} == {march, may}  # nothing left out
    iso = (await call(client, "search_memory", **{**asked, "as_of": "2023-05-26T12:00:00Z"}))
    assert iso["results"][0]["why"]["time"] == why


async def test_the_newer_statement_first_kraków_and_gdańsk(client, settings):
    """A user says they live in Kraków and later that they moved to Gdańsk, in one chat,
    without update_memory: a question about now reads Gdańsk first, one about the start
    Kraków, and Kraków's result names Gdańsk as newer."""
    chat = [("user", "Hi! My name is Ola and I work as a nurse."),
            ("assistant", "Nice to meet you, Ola."),
            ("user", "I live in Kraków, in a flat near the old town."),
            ("assistant", "Kraków is a beautiful city."),
            ("user", "My favourite food is pierogi."),
            ("assistant", "Good choice."),
            ("user", "Big news: I moved to Gdańsk last month, the new place is by the sea."),
            ("assistant", "Congratulations on the move!")]
    ids = [await add(client, text, namespace="ola", thread="chat", role=role)
           for role, text in chat]
    krakow, gdansk = ids[2], ids[6]
    await run_workers(settings)
    for rank in ("relevance", "memory"):
        hits = (await call(client, "search_memory", query="Where does the user live now?",
                           namespace="ola", rank=rank))["results"]
        order = [h["memory_id"] for h in hits]
        assert order[0] == gdansk and order.index(krakow) > 0
        old = hits[order.index(krakow)]
        assert old["outdated_by"] == gdansk and old["why"]["currency"]["newer"] == gdansk
        assert "outdated_by" not in hits[0] and hits[0]["why"]["currency"]["older"] == krakow
    first = (await call(client, "search_memory", query="Where did the user live initially?",
                        namespace="ola"))["results"]
    assert first[0]["memory_id"] == krakow and first[0]["outdated_by"] == gdansk
    context = await call(client, "build_context", query="Where does the user live now?",
                         namespace="ola")
    assert context["memories"][0]["memory_id"] == gdansk
    outdated = next(m for m in context["memories"] if m["memory_id"] == krakow)
    assert outdated["outdated_by"] == gdansk


async def test_a_new_version_inherits_what_its_older_version_matches(client, settings):
    """update_memory stays the strong form: the question in the first statement's words
    finds the current version, which says whose match it inherited; the old one is never
    shown unless asked for."""
    old = await add(client, "Ilyas works at Hollowpine Games.", namespace="jobs")
    await add(client, "Ilyas switched gym day to Tuesday.", namespace="jobs")
    await add(client, "Ilyas reports to Noor.", namespace="jobs")
    await run_workers(settings)
    new = (await call(client, "update_memory", memory_id=old, namespace="jobs",
                      text="Ilyas left for a new job at Glasswing."))["memory_id"]
    await run_workers(settings)
    hits = (await call(client, "search_memory", query="Where does Ilyas work?",
                       namespace="jobs"))["results"]
    assert hits[0]["memory_id"] == new and old not in [h["memory_id"] for h in hits]
    assert hits[0]["why"]["version"]["older"] == old
    assert hits[0]["text"] == "Ilyas left for a new job at Glasswing."
    both = (await call(client, "search_memory", query="Where does Ilyas work?",
                       namespace="jobs", filters={"include_superseded": True}))["results"]
    assert old in [h["memory_id"] for h in both]
    assert all("version" not in h["why"] for h in both)


async def test_a_store_of_the_shape_before_event_time_is_migrated(client, settings,
                                                                monkeypatch):
    """Memories written before event time (no occurred_at, no shape version): a worker
    migrates them when it starts, `zapomni migrate` by hand; afterwards they are listed by
    the time they were added, the namespace says the current version, and an entity typed
    by the model's majority shows no type (version 3) until a rebuild."""
    kept = await add(client, "The old shed was painted green.", namespace="old")
    await add(client, "The old gate squeaks in the wind.", namespace="older")
    await run_workers(settings)
    store = GraphStore(settings)

    async def as_before(namespace: str) -> None:
        graph = store.graph(namespace)
        await run(graph, "MATCH (m:Memory) REMOVE m.occurred_at")
        await run(graph, "MATCH (x:ZapomniMeta {key: 'schema'}) DELETE x")
        # an entity as versions 1-2 wrote it: the model's majority type, no ner_type
        await run(graph, "MERGE (e:Entity {id: 'ent_0', key: 'acme', name: 'Acme'}) "
                         "SET e.type = 'organization' REMOVE e.ner_type")
        assert await schema_version(store, namespace) == 1

    try:
        await as_before("old")
        await as_before("older")
        await run_workers(settings)  # a worker starts (and stops: nothing is queued)
        assert await schema_version(store, "old") == SCHEMA_VERSION
        assert await query(settings, "MATCH (m:Memory) RETURN m.occurred_at = m.created_at",
                           namespace="old") == [[True]]
        assert await query(settings, "MATCH (e:Entity {id: 'ent_0'}) RETURN e.type, "
                           "e.ner_type", namespace="old") == [["unknown", "organization"]]
        await as_before("older")
        monkeypatch.setenv("ZAPOMNI_FALKORDB_URL", settings.falkordb_url)
        monkeypatch.setenv("ZAPOMNI_REDIS_URL", settings.redis_url)
        assert await asyncio.to_thread(run_migrate, argparse.Namespace()) == 0
        assert await schema_version(store, "older") == SCHEMA_VERSION
        assert await query(settings, "MATCH (m:Memory) RETURN m.occurred_at = m.created_at",
                           namespace="older") == [[True]]
    finally:
        await store.aclose()
    listed = await call(client, "list_memories", namespace="old")
    assert [m["memory_id"] for m in listed["memories"]] == [kept]
    assert listed["memories"][0]["occurred_at"] == listed["memories"][0]["created_at"]


async def test_a_question_at_the_end_of_the_calendar_is_answered(client, settings):
    """"on 9999-12-31" was a 500 (OverflowError reading the day after it, issue 45); now its
    window is that day, shown in why.time, and "İ" before the words leaves them whole."""
    late = await add(client, "The last lighthouse keeper retired.", occurred_at="9999-12-30")
    await run_workers(settings)
    hits = (await call(client, "search_memory", query="İİ what happened on 9999-12-31?",
                       namespace="time", as_of="9999-12-30"))["results"]
    assert hits[0]["memory_id"] == late
    why = hits[0]["why"]["time"]
    assert why["words"] == "9999-12-31"
    assert why["window"] == ["9999-12-31T00:00:00Z", "9999-12-31T23:59:59Z"]
    context = await call(client, "build_context", query="what did the keeper do in December?",
                         namespace="time", as_of="9999-12-30")
    assert context["memories"][0]["memory_id"] == late
