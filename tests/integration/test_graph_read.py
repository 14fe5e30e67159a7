"""The graph read path with real workers (spaCy), FalkorDB and the query service: graph mode
says which entity found each passage, finds nothing it cannot explain, scores on 0-1 like the
other modes, and get_entity's passages carry their source and lines."""

from __future__ import annotations

import pytest

from tests.support.mcp import call
from tests.support.workers import run_workers

BRIDGE = [
    "Zorblax Industries hired Helena Varga as its chief engineer in Vienna.",
    "Helena Varga designed the new bridge over the Danube.",
    "The weather in spring is mild and the gardens are full of tulips.",
]
# a note of several lines, the entity on its third and fourth
NOTE = ("Field notes, week 12\n\nThe survey team met at dawn.\n"
        "Helena Varga measured the piers\nof the old bridge in Vienna.\n\nRain after noon.")


async def test_graph_mode_says_which_entity_found_each_passage(client, settings):
    added = [await call(client, "add_memory", text=text, namespace="kg") for text in BRIDGE]
    await run_workers(settings)
    found = await call(client, "search_memory", query="What did Zorblax Industries build?",
                       mode="graph", namespace="kg")
    assert [r["memory_id"] for r in found["results"]] == [added[0]["memory_id"],
                                                          added[1]["memory_id"]]
    named, near = (r["why"]["graph"] for r in found["results"])
    assert named["entities"] == ["Zorblax Industries"]
    assert named["via"] == {"Helena Varga": "Zorblax Industries", "Vienna": "Zorblax Industries"}
    # the second shares no word and no entity with the question: it mentions Helena Varga,
    # who shares a sentence with Zorblax Industries
    assert near["entities"] == [] and near["via"] == {"Helena Varga": "Zorblax Industries"}
    assert 0 < found["results"][1]["score"] < found["results"][0]["score"] <= 1


async def test_graph_mode_returns_nothing_for_a_question_naming_no_known_entity(client,
                                                                              settings):
    for text in BRIDGE:
        await call(client, "add_memory", text=text, namespace="kg")
    await run_workers(settings)
    # words of the passages, but no entity's name: other modes find them, graph mode not
    question = "who designed the new bridge in spring?"
    hybrid = await call(client, "search_memory", query=question, namespace="kg")
    assert hybrid["results"]
    unnamed = await call(client, "search_memory", query=question, mode="graph",
                         namespace="kg")
    assert unnamed["results"] == []
    assert unnamed["note"].startswith("no entity of the knowledge graph (4 in this namespace")


@pytest.mark.parametrize("mode", ["graph", "hybrid", "vector"])
async def test_graph_scores_within_0_and_1_like_hybrid_and_vector(client, settings, mode):
    for text in [*BRIDGE, NOTE]:
        await call(client, "add_memory", text=text, namespace="kg")
    await run_workers(settings)
    for question in ("Helena Varga", "Helena Varga in Vienna, Zorblax Industries",
                     "Where is the Danube?"):
        found = await call(client, "search_memory", query=question, mode=mode,
                           namespace="kg")
        assert found["results"]
        assert all(0 <= r["score"] <= 1 for r in found["results"]), found["results"]
        assert all(0 <= r["why"]["graph"]["score"] <= 1 for r in found["results"]
                   if "graph" in r["why"])


async def test_entity_passages_carry_their_source_and_lines(client, settings):
    note = await call(client, "add_memory", text=NOTE, namespace="kg",
                      metadata={"source": "notes/week12.md"})
    bridge = await call(client, "add_memory", text=BRIDGE[1], namespace="kg")
    await run_workers(settings)
    entity = await call(client, "get_entity", name_or_id="Helena Varga", namespace="kg")
    passages = {p["memory_id"]: p for p in entity["passages"]}
    assert set(passages) == {note["memory_id"], bridge["memory_id"]}
    assert passages[bridge["memory_id"]]["source"] == ""
    assert (passages[bridge["memory_id"]]["start_line"],
            passages[bridge["memory_id"]]["end_line"]) == (1, 1)
    mine = passages[note["memory_id"]]
    assert mine["source"] == "notes/week12.md"
    lines = NOTE.splitlines()[mine["start_line"] - 1:mine["end_line"]]
    assert "Helena Varga measured the piers" in lines
    # the same lines as search gives for the same passage
    hits = await call(client, "search_memory", query="Helena Varga piers", namespace="kg")
    hit = next(h for h in hits["results"] if h["chunk_id"] == mine["chunk_id"])
    assert (hit["source"], hit["start_line"], hit["end_line"]) == (
        mine["source"], mine["start_line"], mine["end_line"])


async def test_the_graph_joins_hybrid_for_one_or_two_rare_entities_only(client, settings):
    added = [await call(client, "add_memory", text=text, namespace="kg") for text in BRIDGE]
    await run_workers(settings)
    one = await call(client, "search_memory", query="What did Zorblax Industries build?",
                     namespace="kg")
    assert "graph" in next(r for r in one["results"]
                           if r["memory_id"] == added[1]["memory_id"])["why"]
    # four named: the words find them; the graph stays out (services/query/search.py)
    many = await call(client, "search_memory", namespace="kg",
                      query="Zorblax Industries, Helena Varga, Vienna and the Danube")
    assert many["results"] and all("graph" not in r["why"] for r in many["results"])
    none = await call(client, "search_memory", query="gardens full of tulips", namespace="kg")
    assert none["results"] and all("graph" not in r["why"] for r in none["results"])
