"""The knowledge graph with real workers (spaCy), FalkorDB and the query service: extraction
after ingest, build_graph progress, cancel, re-runs, delete, entity tools, the graph signal."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from tests.conftest import make_settings
from tests.support.graph import broken, query, stored
from tests.support.mcp import call
from tests.support.waiting import eventually
from tests.support.workers import ENDED, add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import BuildGraph, MemoryRef
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.tasks import tasks
from zapomni.workers import graph as graph_path

BRIDGE = [
    "Zorblax Industries hired Helena Varga as its chief engineer in Vienna.",
    "Helena Varga designed the new bridge over the Danube.",
    "The weather in spring is mild and the gardens are full of tulips.",
]
PEOPLE = ["Ada Lovelace", "Charles Babbage", "Grace Hopper", "Alan Turing", "Marie Curie",
          "Niels Bohr", "Lise Meitner", "Emmy Noether", "Rosalind Franklin", "Enrico Fermi"]
CITIES = ["London", "Paris", "Vienna", "Berlin", "Rome", "Madrid"]


def letters(count: int) -> list[str]:
    """Short texts naming two people and a city each: many entities, many relations."""
    return [f"In {1900 + i}, {PEOPLE[i % 10]} met {PEOPLE[(i * 3 + 1) % 10]} in "
            f"{CITIES[i % 6]} to talk about letter number {i}." for i in range(count)]


async def test_entities_are_extracted_after_ingest_and_the_tools_read_them(client, settings):
    added = [await call(client, "add_memory", text=text, namespace="kg") for text in BRIDGE]
    await run_workers(settings)
    ingest = await call(client, "graph_status", task_id=added[0]["task_id"])
    graph_task = await call(client, "graph_status", task_id=ingest["graph_task_id"])
    assert (graph_task["kind"], graph_task["state"]) == ("graph", "done")
    # the three were added while no worker ran: one batch, one graph task for its memories
    assert graph_task["progress"]["done"] == graph_task["progress"]["total"] == 3
    ids = {(await call(client, "graph_status", task_id=a["task_id"]))["graph_task_id"]
           for a in added}
    graph_tasks = [await call(client, "graph_status", task_id=i) for i in ids]
    # together they created each entity and relation once
    assert len(graph_tasks) == 1
    assert sum(t["entities_created"] for t in graph_tasks) == 4
    assert sum(t["relations_created"] for t in graph_tasks) == 4

    found = await call(client, "search_entities", query="varga", namespace="kg")
    assert [(e["name"], e["mentions"]) for e in found["results"]] == [("Helena Varga", 2)]
    entity = await call(client, "get_entity", name_or_id="helena varga's", namespace="kg")
    assert entity["entity"]["entity_id"] == found["results"][0]["entity_id"]
    assert {(n["name"], n["weight"]) for n in entity["neighbours"]} == {
        ("Zorblax Industries", 1), ("Vienna", 1), ("Danube", 1)}
    assert {p["memory_id"] for p in entity["passages"]} == {added[0]["memory_id"],
                                                            added[1]["memory_id"]}
    deeper = await call(client, "get_entity", name_or_id="Danube", depth=2, namespace="kg")
    assert {(n["name"], n["depth"], n["via"]) for n in deeper["neighbours"]} == {
        ("Helena Varga", 1, ""), ("Zorblax Industries", 2, "Helena Varga"),
        ("Vienna", 2, "Helena Varga")}
    stats = await call(client, "get_stats", namespace="kg")
    assert (stats["entities"], stats["relations"]) == (4, 4)
    assert await broken(settings, "kg") == dict.fromkeys(await broken(settings, "kg"), 0)


async def test_graph_signal_finds_a_passage_that_shares_no_word_with_the_query(client,
                                                                               settings):
    added = [await call(client, "add_memory", text=text, namespace="kg") for text in BRIDGE]
    await run_workers(settings)
    question = "What did Zorblax Industries build?"
    assert not set(question.lower().strip("?").split()) & set(BRIDGE[1].lower().split())
    keyword = await call(client, "search_memory", query=question, mode="keyword",
                         namespace="kg")
    assert added[1]["memory_id"] not in [r["memory_id"] for r in keyword["results"]]
    graph = await call(client, "search_memory", query=question, mode="graph", namespace="kg")
    assert [r["memory_id"] for r in graph["results"]] == [added[0]["memory_id"],
                                                          added[1]["memory_id"]]
    hybrid = await call(client, "search_memory", query=question, namespace="kg", limit=2)
    second = hybrid["results"][1]
    assert second["memory_id"] == added[1]["memory_id"] and "graph" in second["why"]
    assert second["entities"] == ["Helena Varga", "Danube"] or \
        sorted(second["entities"]) == ["Danube", "Helena Varga"]


async def test_graph_mode_says_why_it_found_nothing(client, settings):
    asked = {"query": "Who is Helena Varga?", "mode": "graph", "namespace": "kg"}
    nothing = await call(client, "search_memory", **asked)
    assert nothing["note"] == "namespace 'kg' holds no memories yet"
    await call(client, "add_memory", text=BRIDGE[0], namespace="kg")
    await run_workers(make_settings(settings.falkordb_url, query_url=settings.query_url,
                                    graph_auto=False))
    unread = await call(client, "search_memory", **asked)
    assert unread["results"] == [] and "has no entities yet" in unread["note"]
    await call(client, "build_graph", namespace="kg")
    await run_workers(settings)
    unnamed = await call(client, "search_memory", query="who designed a bridge?",
                         mode="graph", namespace="kg")
    assert unnamed["results"] == []
    assert unnamed["note"].startswith("no entity of the knowledge graph (3 in this namespace")
    filtered = await call(client, "search_memory", **asked, filters={"tags": ["nothing"]})
    assert "mentioned in no passage that passes the filters" in filtered["note"]
    found = await call(client, "search_memory", **asked)
    assert len(found["results"]) == 1 and found["note"] is None


async def test_graph_signal_keeps_to_the_filters(client, settings):
    added = [await call(client, "add_memory", text=text, namespace="kg",
                        metadata={"tags": [tag]})
             for text, tag in zip(BRIDGE, ("company", "people", "weather"), strict=True)]
    await run_workers(settings)
    question = "What did Zorblax Industries build?"
    graph = await call(client, "search_memory", query=question, mode="graph", namespace="kg",
                       filters={"tags": ["people"]})
    assert [r["memory_id"] for r in graph["results"]] == [added[1]["memory_id"]]
    hybrid = await call(client, "search_memory", query=question, namespace="kg",
                        filters={"tags": ["people", "weather"]})
    assert added[0]["memory_id"] not in [r["memory_id"] for r in hybrid["results"]]
    assert hybrid["results"][0]["memory_id"] == added[1]["memory_id"]
    assert "graph" in hybrid["results"][0]["why"]


async def test_build_graph_reports_progress_part_by_part(settings, query_service, monkeypatch):
    monkeypatch.setattr(graph_path, "BATCH", 4)  # several batches and parts from 48 chunks
    monkeypatch.setattr(graph_path, "PART_CHUNKS", 16)
    quiet = make_settings(settings.falkordb_url, query_url=settings.query_url,
                          graph_auto=False)
    receipts = [await add_text(quiet, text) for text in letters(48)]
    await run_workers(quiet)
    assert (await stored(quiet, graph=True))["extracted"] == 0  # automatic extraction is off
    front = Front(quiet)
    try:
        receipt = await ops.build_graph(front, BuildGraph())
        seen = []  # the record after each job, one job at a time: every step, by construction
        for _ in range(10):  # the plan and 3 parts, with room for a retry
            await run_workers(quiet, max_jobs=1)
            record = await tasks.get_task(front.redis, receipt.task_id)
            seen.append((record.state, record.done, record.total))
            if record.state in ENDED:
                break
        final = await ops.task_status(front, receipt.task_id)
        parts = await tasks.part_workers(front.redis, receipt.task_id)
    finally:
        await front.aclose()
    assert sorted(parts) == [0, 1, 2]  # 48 chunks fanned out in parts of 16
    partial = [done for state, done, total in seen if state == "running" and 0 < done < total]
    # progress moved with each part, not all at the end (parts are slices of the chunk ids'
    # hash space: about, not exactly, 16 chunks each)
    assert len(partial) == 2 and partial[0] < partial[1], seen
    # (within a part, each batch adds its own: the cancel test below sees it at 4 of 60)
    assert (final.state, final.done, final.total) == ("done", 48, 48)
    counts = await stored(quiet, graph=True)
    assert final.entities == counts["entities"] and final.relations == counts["related"]
    names = {row[0] for row in await query(quiet, "MATCH (e:Entity) RETURN e.name")}
    assert set(PEOPLE) | set(CITIES) <= names
    assert counts["extracted"] == counts["chunks"] == len(receipts)
    assert await broken(quiet) == dict.fromkeys(await broken(quiet), 0)


async def test_rebuilding_and_rerunning_creates_no_duplicates(settings, query_service):
    await asyncio.gather(*(add_text(settings, text) for text in letters(20)))
    await run_workers(settings)
    first = await stored(settings, graph=True)
    assert first["entities"] >= len(PEOPLE) + len(CITIES) and first["related"] > 0
    front = Front(settings)
    try:
        for request in (BuildGraph(), BuildGraph(rebuild=True), BuildGraph(rebuild=True)):
            receipt = await ops.build_graph(front, request)
            await run_workers(settings)
            assert (await ops.task_status(front, receipt.task_id)).state == "done"
            assert await stored(settings, graph=True) == first
    finally:
        await front.aclose()
    mentions = await query(settings, "MATCH (c:Chunk)-[r:MENTIONS]->(e:Entity) "
                                     "RETURN c.id, e.id, count(r) ORDER BY count(r) DESC "
                                     "LIMIT 1")
    assert mentions[0][2] == 1  # one edge per chunk and entity, whatever ran twice
    assert await broken(settings) == dict.fromkeys(await broken(settings), 0)


async def test_cancel_stops_a_graph_task_between_batches(settings, query_service, monkeypatch):
    monkeypatch.setattr(graph_path, "BATCH", 2)
    quiet = make_settings(settings.falkordb_url, query_url=settings.query_url,
                          graph_auto=False)
    await asyncio.gather(*(add_text(quiet, text) for text in letters(60)))
    await run_workers(quiet)
    front = Front(quiet)
    try:
        receipt = await ops.build_graph(front, BuildGraph())
        worker = asyncio.create_task(run_workers(quiet))
        try:
            record = await eventually(
                lambda: tasks.get_task(front.redis, receipt.task_id),
                lambda r: r is not None and (r.done >= 4 or r.state in ENDED),
                "the graph task to read 4 chunks", timeout=120, every=0.005)
        finally:
            await ops.cancel_task(front, receipt.task_id)
            await worker
        final = await ops.task_status(front, receipt.task_id)
    finally:
        await front.aclose()
    counts = await stored(quiet, graph=True)
    assert final.state == "cancelled" and record.state == "running", (record, final)
    # the batch under way when the cancel landed is written whole, but a cancelled task
    # takes no more progress (terminal states are final)
    assert 4 <= final.done <= counts["extracted"] <= final.done + graph_path.BATCH < 60
    assert await broken(quiet) == dict.fromkeys(await broken(quiet), 0)


TEXT = "Cancel me before I am stored."


async def test_cancel_undoes_a_queued_ingest(settings, query_service):
    front = Front(settings)
    try:
        receipt = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
        status = await ops.cancel_task(front, receipt.task_id)
        await run_workers(settings)
        again = await ops.add_memory(front, decode_add_memory(TEXT, None, None))
        await run_workers(settings)
        done = await ops.task_status(front, again.task_id)
    finally:
        await front.aclose()
    assert status.state == "cancelled" and "removes what was written" in status.message
    assert not again.duplicate and done.state == "done"  # the text could be added again
    assert (await stored(settings))["memories"] == 1


async def test_deleting_a_memory_removes_what_it_added_to_the_graph(settings, query_service):
    receipts = [await add_text(settings, text) for text in BRIDGE]
    await run_workers(settings)
    front = Front(settings)
    try:
        await ops.delete_memory(front, MemoryRef(memory_id=receipts[1].memory_id))
        await run_workers(settings)
    finally:
        await front.aclose()
    names = {row[0] for row in await query(settings, "MATCH (e:Entity) RETURN e.name")}
    assert names == {"Zorblax Industries", "Helena Varga", "Vienna"}  # Danube is gone
    evidence = await query(settings, "MATCH ()-[r:RELATED]->() RETURN r.evidence")
    assert all(receipts[1].memory_id not in chunk for row in evidence for chunk in row[0])
    assert await broken(settings) == dict.fromkeys(await broken(settings), 0)


def test_a_missing_spacy_model_stops_the_worker_at_start_with_what_to_do(settings):
    done = subprocess.run([sys.executable, "-m", "zapomni.workers"], capture_output=True, text=True,
                          timeout=60, env={"ZAPOMNI_SPACY_MODEL": "no_such_model",
                                           "ZAPOMNI_REDIS_URL": settings.redis_url,
                                           "PATH": ""})
    assert done.returncode == 1
    assert "the spaCy model 'no_such_model' is not installed" in done.stderr
    assert "Traceback" not in done.stderr


MARKDOWN = """# Zorblax

Zorblax is maintained by Helena Varga in Vienna. See the
[guide by Marta Kowalski](https://docs.example.org/Tomasz/Lisbon) or write to
Piotr.Nowak@example.org.

```python
from zorblax import Engine
Grzegorz Brzeczyszczykiewicz = Engine(city="Paris")
```

Run `zorblax --city Madrid` or ./bin/Oslo --serve; `Ingrid Bergstrom` wrote parse_config.
"""


async def test_a_markdown_document_gives_no_entity_from_its_code_or_links(client, settings):
    await call(client, "add_memory", text=MARKDOWN, namespace="md")
    await run_workers(settings)
    rows = await query(settings, "MATCH (e:Entity) RETURN e.name, e.type ORDER BY e.name",
                       namespace="md")
    names = {name for name, _ in rows}
    assert "Helena Varga" in names  # prose is read
    assert "Vienna" in names
    # nothing from the code block, inline code, the link's target, the address or the path
    assert not names & {"Grzegorz Brzeczyszczykiewicz", "Paris", "Engine", "Madrid", "Oslo",
                        "Ingrid Bergstrom", "Tomasz", "Lisbon", "Piotr", "Piotr Nowak"}
    # technical text: a type only for a person's name, the rest shown as unknown
    assert {kind for _, kind in rows} <= {"person", "unknown"}
    found = await call(client, "search_entities", query="vienna", type="unknown", namespace="md")
    assert [e["name"] for e in found["results"]] == ["Vienna"]


async def test_a_term_is_named_by_its_plural_and_a_name_is_not(client, settings):
    trial = ("Patients who took a statin had fewer strokes. In the trial, statin therapy "
             "lowered LDL cholesterol by a third.")
    letter = "Mark Hollis wrote the letter in London."
    added = [await call(client, "add_memory", text=text, namespace="kg")
             for text in (trial, letter)]
    await run_workers(settings)
    terms = await call(client, "search_entities", query="statin", namespace="kg")
    assert [(e["name"], e["type"]) for e in terms["results"]] == [("statin", "unknown")]
    found = await call(client, "search_memory", query="Do statins reduce strokes?",
                       mode="graph", namespace="kg")
    assert [r["memory_id"] for r in found["results"]] == [added[0]["memory_id"]]
    # "marks" is no plural of the person Mark Hollis's first name, nor "hollises" of his
    unnamed = await call(client, "search_memory", query="the marks of hollises",
                         mode="graph", namespace="kg")
    assert unnamed["results"] == []
