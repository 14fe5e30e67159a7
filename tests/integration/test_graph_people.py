"""People and places on a short chat, with real workers (spaCy), FalkorDB and the query service:
a place the gazetteer confirms is shown as one whatever type the model gave it, a one-word
name is the one person whose name begins with it, and the merge is undone by a second such
person or by the delete of the person's memories (workers/extract.py)."""

from __future__ import annotations

from tests.support.graph import query
from tests.support.mcp import call
from tests.support.workers import run_workers
from zapomni.services.query.entities import named_in
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.text.entities import entity_id, entity_key

# the model reads "Kraków" as a person and "Marta" as a place here (spaCy's small model)
CHAT = """user: Hi! I'm planning a weekend trip with my friend Marta. We both live in Kraków.
assistant: Nice! Kraków is a great base. Where would you like to go?
user: Marta suggested Ojców National Park, it's close to Kraków.
assistant: Ojców National Park is about 25 km north of Kraków."""
KOWALCZYK = ("Marta Kowalczyk booked a room in Zakopane for Sunday. Marta Kowalczyk has lived "
             "in Kraków since 2019.")
NOWAK = ("Marta Nowak from Warsaw called me yesterday. Marta Nowak is a doctor at the "
         "hospital in Warsaw.")


async def add(client, settings, text: str) -> str:
    receipt = await call(client, "add_memory", text=text, namespace="chat")
    await run_workers(settings)
    return receipt["memory_id"]


async def aliases(settings) -> set[tuple[str, str]]:
    rows = await query(settings, "MATCH (a:Entity)-[:SAME_AS]->(p:Entity) RETURN a.name, p.name",
                       namespace="chat")
    return {(a, p) for a, p in rows}


async def test_a_place_is_a_place_and_marta_is_the_one_marta(client, settings):
    await add(client, settings, CHAT)
    kowalczyk = await add(client, settings, KOWALCZYK)

    places = await call(client, "search_entities", query="Kraków Zakopane", namespace="chat")
    assert {(e["name"], e["type"]) for e in places["results"]} == {("Kraków", "place"),
                                                                  ("Zakopane", "place")}
    park = await call(client, "get_entity", name_or_id="Ojców National Park", namespace="chat")
    assert park["entity"]["type"] == "unknown"  # no gazetteer has it: no type, not a wrong one

    marta = await call(client, "get_entity", name_or_id="Marta", namespace="chat")
    assert (marta["entity"]["name"], marta["entity"]["type"]) == ("Marta Kowalczyk", "person")
    assert marta["entity"]["mentions"] == 2  # passages: the chat's (Marta) and its own
    assert len(marta["passages"]) == 2
    # the neighbours of both: Kraków (of both, once), Zakopane (of hers), the park (the chat's)
    names = [n["name"] for n in marta["neighbours"]]
    assert sorted(names) == ["Kraków", "Ojców National Park", "Zakopane"]
    found = await call(client, "search_entities", query="Marta", namespace="chat")
    assert [e["name"] for e in found["results"]] == ["Marta Kowalczyk"]
    people = await call(client, "search_entities", query="Marta", type="person",
                        namespace="chat")
    assert [e["name"] for e in people["results"]] == ["Marta Kowalczyk"]
    assert await aliases(settings) == {("Marta", "Marta Kowalczyk")}

    # a second Marta: "Marta" is no longer either of them
    nowak = await add(client, settings, NOWAK)
    assert await aliases(settings) == set()
    again = await call(client, "get_entity", name_or_id="Marta", namespace="chat")
    assert again["entity"]["name"] == "Marta"
    found = await call(client, "search_entities", query="Marta", namespace="chat")
    assert {e["name"] for e in found["results"]} == {"Marta", "Marta Kowalczyk", "Marta Nowak"}

    # deleting Marta Nowak's memory merges again; deleting Marta Kowalczyk's un-merges
    await call(client, "delete_memory", memory_id=nowak, namespace="chat")
    await run_workers(settings)
    assert await aliases(settings) == {("Marta", "Marta Kowalczyk")}
    await call(client, "delete_memory", memory_id=kowalczyk, namespace="chat")
    await run_workers(settings)
    assert await aliases(settings) == set()
    alone = await call(client, "get_entity", name_or_id="Marta", namespace="chat")
    assert (alone["entity"]["name"], alone["entity"]["mentions"]) == ("Marta", 1)


async def test_the_graph_signal_reads_the_names_a_question_says(client, settings):
    """A person's one-word alias does not join the graph signal for the person, nor the
    person for the alias: on HotpotQA that cost hybrid 0.0023 and graph mode 0.0073 nDCG@10
    (docs/benchmarks.md, "The graph read path"); the question's own words decide."""
    await add(client, settings, CHAT)
    await add(client, settings, KOWALCZYK)
    store = GraphStore(settings)
    try:
        graph = store.graph("chat")
        by_person = await named_in(graph, "Where did Marta Kowalczyk stay?")
        by_alias = await named_in(graph, "Where does Marta live?")
    finally:
        await store.aclose()
    marta, kowalczyk = (entity_id(entity_key(name)) for name in ("Marta", "Marta Kowalczyk"))
    assert by_person.direct == {marta, kowalczyk}  # every word of each name is asked
    assert by_alias.direct == {marta}
    assert by_person.mentions[marta] == 1
    # prose: no symbols of code were written, so search does not look for them
    assert await query(settings, "MATCH (x:ZapomniMeta {key: 'code'}) RETURN count(x)",
                       namespace="chat") == [[0]]
