"""zapomni export / import: a namespace moved through a file, against real FalkorDB/Redis
and real arq workers."""

from __future__ import annotations

import asyncio
import gzip
import io
from pathlib import Path

import msgspec
import pytest
from redis.asyncio import Redis

from tests.conftest import make_settings
from tests.integration.test_expiry import sweep_once
from tests.support.export_files import version_1
from tests.support.graph import query, stored
from tests.support.workers import add_text, run_import, run_workers, worker_processes
from zapomni.services.cli.export import export_namespace
from zapomni.services.cli.progress import Progress
from zapomni.services.cli.restore import import_file, queue_import
from zapomni.services.query.entities import get_entity, search_entities
from zapomni.services.query.search import search_memory
from zapomni.services.stack.main import main
from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.protocol.api import EntityRef, EntitySearch
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.store.graphstore import GraphStore, namespace_exists
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.queue import connect_queue

TEXTS = [
    "The lighthouse at Cape Wrath was built in 1828 by Robert Stevenson.",
    "Honey never spoils: jars found in Egyptian tombs were still edible.",
    "Octopuses have three hearts and blue blood.",
    "The Eiffel Tower grows about 15 cm taller in summer as the iron expands.",
    "Bananas are berries, but strawberries are not.",
    " ".join(f"Paragraph {i} describes the tides of the northern sea, the keeper's log of "
             f"storm {i} and the ships the light guided home." for i in range(40)),
]
QUERIES = ["who built the lighthouse", "food that does not go bad", "animal with three hearts",
           "metal expands in heat", "which fruits are berries", "storms and ships at sea"]


def base_settings(falkordb_url: str, **overrides):
    return make_settings(falkordb_url, **{"graph_auto": False, **overrides})


async def fill(settings) -> None:
    for i, text in enumerate(TEXTS):
        metadata = {"tags": ["fact"], "n": i, "thread": "t1", "role": "user",
                    "occurred_at": f"200{i}-05-04"} if i < 3 else {"source": "book"}
        await add_text(settings, text, metadata)
    await run_workers(settings)


async def export_to(settings, path: Path, namespace="default", vectors=True) -> None:
    out = io.BytesIO()
    await export_namespace(settings, namespace, out, vectors=vectors, show=False)
    path.write_bytes(out.getvalue())


async def results(settings, namespace: str, mode="hybrid", queries=QUERIES
                  ) -> list[list[tuple[str, str]]]:
    store, redis = GraphStore(settings), Redis.from_url(settings.redis_url)
    embedder = make_embedder(settings)
    try:
        return [[(hit.memory_id, hit.chunk_id) for hit in (await search_memory(
            store, embedder, redis, settings,
            decode_search(q, 10, None, namespace, mode))).results] for q in queries]
    finally:
        await store.aclose()
        await redis.aclose()
        await embedder.aclose()


MEMORY_STATE = ("MATCH (m:Memory) OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c:Chunk) "
                "WITH m, c ORDER BY c.id RETURN m.id, m.text, m.tags, m.source, m.metadata, "
                "m.created_at, m.occurred_at, m.role, m.thread, m.after, m.ready, "
                "collect([c.id, c.char_start, "
                "c.char_end, c.embedding]) ORDER BY m.id")


@pytest.mark.usefixtures("settings")  # empties the servers first
async def test_export_import_gives_the_same_search_and_embeds_nothing(falkordb_url, tmp_path):
    settings = base_settings(falkordb_url)
    await fill(settings)
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path)

    lines = gzip.decompress(path.read_bytes()).splitlines()
    header = msgspec.json.decode(lines[0])
    assert (header["namespace"], header["memories"], header["vectors"]) == ("default", 6, True)
    assert header["model"] == make_embedder(settings).name and len(lines) == 7

    record = await run_import(settings, path, "copy")
    assert record.state == "done" and record.embedded == 0, record.message
    assert "6 memories made searchable, 0 chunks embedded" in record.message
    assert await stored(settings, "copy") == await stored(settings, "default")
    assert await results(settings, "copy") == await results(settings, "default")
    source = await query(settings, MEMORY_STATE)
    assert await query(settings, MEMORY_STATE, namespace="copy") == source
    assert sorted(row[6] for row in source if row[7]) == [957398400.0, 988934400.0, 1020470400.0]
    # the thread's order came along: the same THEN edges
    then = "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id ORDER BY a.id"
    assert await query(settings, then, namespace="copy") == await query(settings, then)

    # importing the same file again changes nothing
    again = await run_import(settings, path, "copy")
    assert again.state == "done" and "0 memories made searchable" in again.message
    assert await query(settings, MEMORY_STATE, namespace="copy") == source


ENTITIES = ("MATCH (e:Entity)<-[:MENTIONS]-(c:Chunk) "
            "RETURN e.name, e.type, c.id ORDER BY e.name, c.id")


GRAPH = {  # the whole graph, as stored
    "entities": "MATCH (e:Entity) RETURN e.id, properties(e) ORDER BY e.id",
    "links": "MATCH (c:Chunk)-[r]->(e:Entity) MATCH ()-[h:HAS_CHUNK]->(c) "
             "RETURN c.id, type(r), e.id, properties(r), h.pairs ORDER BY c.id, e.id",
    "relations": "MATCH (a:Entity)-[r]->(b:Entity) RETURN a.id, type(r), b.id, properties(r) "
                 "ORDER BY a.id, b.id, type(r)",
    "read": "MATCH ()-[h:HAS_CHUNK]->(c:Chunk) WHERE h.entities_at IS NULL RETURN count(c)",
}


async def whole_graph(settings, namespace: str) -> dict[str, list]:
    graph = {name: await query(settings, cypher, namespace=namespace)
             for name, cypher in GRAPH.items()}
    for row in graph["relations"]:  # evidence: the same chunks, in the order written
        row[3] = {**row[3], "evidence": sorted(row[3].get("evidence", []))}
    for row in graph["entities"] + graph["links"]:  # properties in any order
        row[1 if len(row) == 2 else 3] = dict(row[1 if len(row) == 2 else 3])
    return graph


async def answers(settings, namespace: str, names: list[str]) -> list:
    """What the entity tools and graph-mode search answer, but for the namespace's name."""
    store = GraphStore(settings)
    try:
        found = [await search_entities(store, EntitySearch(query=n, namespace=namespace))
                 for n in names]
        detail = [await get_entity(store, EntityRef(name_or_id=n, depth=2, namespace=namespace))
                  for n in names]
    finally:
        await store.aclose()
    plain = msgspec.to_builtins([*found, *detail])
    for answer in plain:
        answer.pop("namespace")
    return [plain, await results(settings, namespace, mode="graph", queries=[
        f"what about {n}" for n in names])]


@pytest.mark.usefixtures("settings")
async def test_an_import_carries_the_graph_and_reads_nothing_again(falkordb_url, tmp_path):
    settings = base_settings(falkordb_url, graph_auto=True)
    await fill(settings)
    source = await whole_graph(settings, "default")
    assert len(source["entities"]) > 5 and source["read"] == [[0]]
    assert any(row[1] == "RELATED" and row[3]["weight"] > 0 for row in source["relations"])
    # what other parts of the graph add travels without a change: a property on an entity,
    # on a mention, and a relationship type of its own between entities
    await query(settings, "MATCH (e:Entity {name: 'Robert Stevenson'}) "
                          "SET e.source = 'lighthouse.md', e.start_line = 3", write=True)
    await query(settings, "MATCH (:Chunk)-[r:MENTIONS]->(e:Entity {name: 'Cape Wrath'}) "
                          "SET r.first = 12", write=True)
    await query(settings, "MATCH (a:Entity {name: 'Robert Stevenson'}) "
                          "MATCH (b:Entity {name: 'Cape Wrath'}) "
                          "CREATE (a)-[:BUILT {year: 1828, by: ['hand']}]->(b)", write=True)
    source = await whole_graph(settings, "default")
    names = ["Robert Stevenson", "Cape Wrath", "Eiffel Tower"]
    asked = await answers(settings, "default", names)
    assert all(answer["results"] for answer in asked[0][:3]) and all(asked[1])
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path, vectors=False)  # the chunks are kept, vectors embedded
    kinds = [msgspec.json.decode(line).get("kind")
             for line in gzip.decompress(path.read_bytes()).splitlines()[1:]]
    assert kinds.count("entity") == len(source["entities"]) and "relation" in kinds

    record = await run_import(settings, path, "copy")
    assert record.state == "done" and record.graph_task_id == "", record.message
    assert "graph task" not in record.message
    redis = Redis.from_url(settings.redis_url)
    try:  # no graph task ran: the import is the namespace's only task
        assert await tasks.task_counts(redis, "copy", 3600) == {**dict.fromkeys(
            tasks.TASK_STATES, 0), "done": 1}
    finally:
        await redis.aclose()
    assert await whole_graph(settings, "copy") == source
    assert await answers(settings, "copy", names) == asked

    # imported again, into the copy: the same graph, weights not counted twice
    again = await run_import(settings, path, "copy")
    assert again.state == "done" and again.graph_task_id == ""
    assert await whole_graph(settings, "copy") == source


MENTION_COUNTS = ("MATCH (c:Chunk)-[r:MENTIONS]->(e:Entity) "
                  "RETURN e.name, e.type, count(c), sum(r.count) ORDER BY e.name")


@pytest.mark.usefixtures("settings")
async def test_a_cancelled_import_leaves_the_graph_it_found_and_a_whole_one_adds_up(
        falkordb_url, tmp_path):
    settings = base_settings(falkordb_url, graph_auto=True)
    await fill(settings)
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path)
    await add_text(settings, "Robert Stevenson also built the Bell Rock lighthouse near "
                             "Arbroath.", namespace="mixed")
    await run_workers(settings)
    before = await whole_graph(settings, "mixed")
    # one mention: no type shown (a person's mentions must agree: shared/text/entities.py)
    assert ["Robert Stevenson", "unknown", 1, 1] in await query(settings, MENTION_COUNTS,
                                                                namespace="mixed")

    # the memories are written, with what their chunks contributed; then the import is
    # cancelled before its graph's parts, and the sweep removes what it wrote
    redis = connect_queue(settings)
    try:
        plan = await queue_import(settings, redis, path, "mixed",
                                  Progress("t", 0, ("", ""), quiet=True))
        await run_workers(settings)
        assert plan.graph_parts and await whole_graph(settings, "mixed") != before
        await tasks.move(redis, plan.task_id, "cancelled", ttl=3600, allowed=tasks.ACTIVE)
    finally:
        await redis.aclose()
    await sweep_once(settings)
    assert await whole_graph(settings, "mixed") == before

    record = await run_import(settings, path, "mixed")
    assert record.state == "done" and record.graph_task_id == ""
    counts = {row[0]: row[1:] for row in await query(settings, MENTION_COUNTS)}
    mixed = {row[0]: row[1:] for row in await query(settings, MENTION_COUNTS,
                                                     namespace="mixed")}
    # his two mentions, one from each side, agree: a person now (one alone showed no type)
    assert mixed["Robert Stevenson"] == ["person", counts["Robert Stevenson"][1] + 1,
                                         counts["Robert Stevenson"][2] + 1]
    assert mixed["Bell Rock"][1] == 1 and mixed["Cape Wrath"] == counts["Cape Wrath"]


@pytest.mark.usefixtures("settings")
async def test_a_version_1_file_imports_and_reads_its_entities_again(falkordb_url, tmp_path):
    settings = base_settings(falkordb_url, graph_auto=True)
    await fill(settings)
    mentions = await query(settings, ENTITIES)
    assert "Robert Stevenson" in [row[0] for row in mentions]  # named once: shown without a type
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path)
    path.write_bytes(version_1(path.read_bytes()))

    record = await run_import(settings, path, "copy")
    # the message names the graph task, not the import's own
    assert record.message.endswith(f"; graph task {record.graph_task_id} reads their entities")
    assert record.graph_task_id != record.task_id
    redis = Redis.from_url(settings.redis_url)
    try:
        graph = await tasks.get_task(redis, record.graph_task_id)
    finally:
        await redis.aclose()
    assert graph.kind == "graph" and graph.state == "done", graph
    assert await query(settings, ENTITIES, namespace="copy") == mentions


SOURCE = "\n".join(f"def step_{i}(x):\n    \"\"\"Step {i} of the ferry schedule.\"\"\"\n"
                   f"    return x + {i}" for i in range(24))
SPANS = ("MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) "
         "RETURN c.id, c.char_start, c.char_end, c.start_line, c.end_line ORDER BY c.id")


@pytest.mark.usefixtures("settings")
async def test_code_embedded_again_on_import_is_cut_on_its_syntax_tree(falkordb_url, tmp_path,
                                                                       fake_ollama):
    settings = base_settings(falkordb_url, chunk_tokens=48)
    await add_text(settings, SOURCE, {"language": "python", "source": "steps.py"})
    await add_text(settings, SOURCE.replace("ferry", "tram"), {"source": "steps.txt"})
    await run_workers(settings)
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path, vectors=False)

    # the file's model: its chunks are kept, only embedded
    record = await run_import(settings, path, "copy")
    assert record.state == "done" and record.embedded > 0, record.message
    spans = await query(settings, SPANS)
    assert len(spans) > 4
    assert await query(settings, SPANS, namespace="copy") == spans
    # another model: chunked again, code on its syntax tree, as at ingest
    other = base_settings(falkordb_url, chunk_tokens=48, ollama_url=fake_ollama.url,
                          ollama_model="nomic-embed-text")
    record = await run_import(other, path, "moved")
    assert record.state == "done" and record.embedded == len(spans), record.message
    assert await query(other, SPANS, namespace="moved") == spans


@pytest.mark.usefixtures("settings")
async def test_a_file_of_another_model_is_embedded_again(falkordb_url, tmp_path, fake_ollama):
    settings = base_settings(falkordb_url)
    await fill(settings)
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path)

    other = base_settings(falkordb_url, ollama_url=fake_ollama.url,
                          ollama_model="nomic-embed-text")
    record = await run_import(other, path, "moved")
    chunks = (await stored(settings))["chunks"]
    assert record.state == "done" and record.embedded == chunks > 6
    rows = await query(other, "MATCH (x:ZapomniMeta {key: 'embedding'}) RETURN x.model, x.dim",
                       namespace="moved")
    assert rows == [["ollama:nomic-embed-text", 768]]
    vectors = await query(other, "MATCH (c:Chunk) RETURN c.embedding", namespace="moved")
    assert len(vectors) == chunks and {len(row[0]) for row in vectors} == {768}
    # searched with the new model's vectors (hash vectors: every query finds every memory)
    hits = await results(other, "moved", mode="vector")
    assert all(len({memory for memory, _ in found}) == 6 for found in hits)


@pytest.mark.parametrize("damage, says", [
    (lambda raw: b"not gzip at all", "not a gzip file"),
    (lambda raw: raw[: len(raw) // 2], "cut short"),
    (lambda raw: gzip.compress(b'{"format": "zapomni-export"}\n'), "line 1: not an export "
                                                                     "header"),
    (lambda raw: gzip.compress(gzip.decompress(raw).replace(b'"version":2', b'"version":9',
                                                            1)), "line 1: format version 9"),
    (lambda raw: gzip.compress(b"\n".join(
        line[:40] if i == 3 else line
        for i, line in enumerate(gzip.decompress(raw).split(b"\n")))), "line 4: not a JSON "
                                                                        "object"),
    (lambda raw: gzip.compress(b"\n".join(
        line.replace(b'"id":"mem_', b'"id":"xx_') if i == 2 else line
        for i, line in enumerate(gzip.decompress(raw).split(b"\n")))), "line 3: id"),
])
@pytest.mark.usefixtures("settings")
async def test_a_bad_file_stores_nothing_and_names_its_line(falkordb_url, tmp_path, damage,
                                                            says):
    settings = base_settings(falkordb_url)
    await fill(settings)
    path = tmp_path / "default.jsonl.gz"
    await export_to(settings, path)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(damage(path.read_bytes()))
    with pytest.raises(InvalidInput) as refused:
        await import_file(settings, bad, "copy", show=False)
    assert says in refused.value.message and "nothing was imported" in refused.value.message
    redis = Redis.from_url(settings.redis_url)
    try:
        assert await tasks.queue_depth(redis) == 0
        assert await tasks.task_counts(redis, "copy", 3600) == dict.fromkeys(
            tasks.TASK_STATES, 0)
    finally:
        await redis.aclose()
    store = GraphStore(settings)
    try:
        assert not await namespace_exists(store, "copy")
    finally:
        await store.aclose()


def zapomni(*args: str) -> int:
    """The ``zapomni`` console script with these arguments: its exit code."""
    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    return exit_.value.code


@pytest.mark.usefixtures("settings")  # empties the servers first: a graph of its own
async def test_each_command_reaches_the_stack_by_one_flag_per_part(falkordb_url, tmp_path,
                                                                    capsys, monkeypatch):
    """export and migrate take --falkordb-url, import --redis-url (ingest and reembed take
    --mcp-url): a remote stack needs no environment, and a wrong address is one line that
    names the flag."""
    for name in ("ZAPOMNI_REDIS_URL", "ZAPOMNI_FALKORDB_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = base_settings(falkordb_url, graph_auto=True)
    await add_text(settings, TEXTS[0])
    await run_workers(settings)
    path = tmp_path / "default.jsonl.gz"
    assert await asyncio.to_thread(zapomni, "export", "--namespace", "default",
                                   "--falkordb-url", falkordb_url, "-o", str(path)) == 0
    with worker_processes(settings, 1):  # the memories, then (queued after them) the graph
        assert await asyncio.to_thread(zapomni, "import", str(path), "--namespace", "copy",
                                       "--redis-url", settings.redis_url) == 0
    assert await stored(settings, "copy") == await stored(settings, "default")
    mentions = await query(settings, ENTITIES)
    assert len(mentions) >= 2 and await query(settings, ENTITIES, namespace="copy") == mentions
    assert "graph_status" not in capsys.readouterr().err  # no graph task followed
    assert await asyncio.to_thread(zapomni, "migrate", "--falkordb-url", falkordb_url) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(zapomni, "export", "--namespace", "default", "-o",
                                   str(tmp_path / "x"), "--falkordb-url",
                                   "redis://:secret@127.0.0.1:9") == 1
    assert capsys.readouterr().err == (
        "zapomni: cannot reach the stack's FalkorDB (its store) at redis://:***@127.0.0.1:9; "
        "start it with `zapomni up`, or pass --falkordb-url (or ZAPOMNI_FALKORDB_URL) where "
        "it runs\n")
