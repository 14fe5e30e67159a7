"""The code graph with the real MCP server, query service, FalkorDB and arq workers: two
Python files, one importing and calling the other's function, read in the order that makes
the graph link a use written before its definition; search_entities, get_entity and graph
mode show the definition's file and lines and the use; a delete and a re-add."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_moves import export_to
from tests.support.graph import query
from tests.support.mcp import call, error
from tests.support.workers import add_text, run_import, run_workers

DATA = Path(__file__).parents[1] / "data" / "code_graph"
SHAPES = (DATA / "shapes.py").read_text()
REPORT = (DATA / "report.py").read_text()
NS = "code"


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def code(source: str) -> dict:
    return {"source": source, "type": "code", "language": "python"}


@pytest.fixture
async def files(settings) -> dict[str, str]:
    """report.py read (and graphed) first, then shapes.py, which it imports."""
    report = await add_text(settings, REPORT, code("pkg/report.py"), namespace=NS)
    await run_workers(settings)
    shapes = await add_text(settings, SHAPES, code("pkg/shapes.py"), namespace=NS)
    await run_workers(settings)
    return {"pkg/report.py": report.memory_id, "pkg/shapes.py": shapes.memory_id}


async def test_symbols_are_found_with_their_definition_and_their_uses(client, settings, files):
    found = await call(client, "search_entities", query="square_area", namespace=NS)
    first = found["results"][0]
    defined = line_of(SHAPES, "def square_area")
    assert (first["name"], first["type"], first["source"], first["start_line"],
            first["end_line"]) == ("pkg.shapes.square_area", "function", "pkg/shapes.py",
                                   defined, defined + 1)
    dotted = await call(client, "search_entities", query="Square.area", namespace=NS)
    assert dotted["results"][0]["name"] == "pkg.report.Square.area"
    methods = await call(client, "search_entities", query="area", type="method", namespace=NS)
    assert {e["name"] for e in methods["results"]} == {"pkg.report.Square.area",
                                                       "pkg.shapes.Shape.area"}

    entity = await call(client, "get_entity", name_or_id="square_area", namespace=NS)
    assert entity["entity"]["name"] == "pkg.shapes.square_area"
    called = line_of(REPORT, "return square_area")
    assert [(u["source"], u["lines"]) for u in entity["uses"]] == [("pkg/report.py", [
        line_of(REPORT, "from pkg.shapes"), called])]
    use = entity["uses"][0]
    assert use["start_line"] <= called <= use["end_line"]
    assert {(r["kind"], r["direction"], r["name"]) for r in entity["relations"]} == {
        ("defines", "from", "pkg.shapes"), ("calls", "from", "pkg.report.Square.area"),
        ("imports", "from", "pkg.report")}

    square = await call(client, "get_entity", name_or_id="pkg.report.Square", namespace=NS)
    assert ("inherits", "to", "pkg.shapes.Shape") in {
        (r["kind"], r["direction"], r["name"]) for r in square["relations"]}
    # names no file of the namespace defines make no entity: builtins, the typing of lists
    kinds = await query(settings, "MATCH (e:Entity) RETURN e.name, e.type ORDER BY e.name",
                        namespace=NS)
    assert kinds == [
        ["pkg.report", "module"], ["pkg.report.Square", "class"],
        ["pkg.report.Square.__init__", "method"], ["pkg.report.Square.area", "method"],
        ["pkg.report.total", "function"], ["pkg.shapes", "module"],
        ["pkg.shapes.SIDES", "constant"], ["pkg.shapes.Shape", "class"],
        ["pkg.shapes.Shape.area", "method"], ["pkg.shapes.square_area", "function"]]


async def test_graph_mode_answers_where_a_symbol_is_defined_and_used(client, files):
    where = await call(client, "search_memory", query="where is square_area defined",
                       mode="graph", namespace=NS)
    defined = line_of(SHAPES, "def square_area")
    assert any(hit["source"] == "pkg/shapes.py" and hit["start_line"] <= defined
               <= hit["end_line"] for hit in where["results"])
    callers = await call(client, "search_memory", query="what calls square_area",
                         mode="graph", namespace=NS)
    assert "pkg/report.py" in {hit["source"] for hit in callers["results"]}


async def test_a_deleted_file_takes_its_symbols_and_a_re_added_one_links_again(
        client, settings, files):
    await call(client, "delete_memory", memory_id=files["pkg/shapes.py"], namespace=NS)
    await run_workers(settings)
    message = await error(client, "get_entity", name_or_id="pkg.shapes.square_area",
                          namespace=NS)
    assert "no entity" in message
    left = await query(settings, "MATCH (e:Entity) WHERE e.name STARTS WITH 'pkg.shapes' "
                                 "RETURN count(e)", namespace=NS)
    assert left == [[0]]

    await add_text(settings, SHAPES, code("pkg/shapes.py"), namespace=NS)
    await run_workers(settings)
    entity = await call(client, "get_entity", name_or_id="square_area", namespace=NS)
    assert [u["source"] for u in entity["uses"]] == ["pkg/report.py"]


GRAPH = """
MATCH (e:Entity) OPTIONAL MATCH (c:Chunk)-[m:MENTIONS]->(e)
WITH e, collect([c.id, m.role, m.count, m.lines]) AS mentions
OPTIONAL MATCH (e)-[x:RELATED]->(n:Entity)
RETURN e.name, e.type, e.source, e.start_line, e.end_line, mentions,
       collect([n.name, x.kind, x.weight]) ORDER BY e.name
"""


def settled(rows: list) -> list:
    return [[*row[:5], sorted(row[5]), sorted(row[6])] for row in rows]


async def test_a_rebuild_writes_the_same_code_graph(client, settings, files):
    before = settled(await query(settings, GRAPH, namespace=NS))
    assert len(before) == 10
    receipt = await call(client, "build_graph", namespace=NS, rebuild=True)
    await run_workers(settings)
    task = await call(client, "graph_status", task_id=receipt["task_id"])
    assert (task["state"], task["progress"]["done"]) == ("done", task["progress"]["total"])
    assert settled(await query(settings, GRAPH, namespace=NS)) == before


TARGETS = "MATCH ()-[h:HAS_CHUNK]->(c:Chunk) RETURN c.id, h.code_targets ORDER BY c.id"
CODE_MARK = "MATCH (x:ZapomniMeta {key: 'code'}) RETURN count(x)"


async def test_an_export_and_import_carry_the_code_graph(client, settings, files, tmp_path):
    """The code graph travels in the file: the same symbols, places, uses and relations, and
    each chunk's names it refers to (so a file added after the import still links)."""
    before = settled(await query(settings, GRAPH, namespace=NS))
    path = tmp_path / "code.jsonl.gz"
    await export_to(settings, path, NS)
    record = await run_import(settings, path, "copied")
    assert record.state == "done" and record.graph_task_id == "", record.message
    assert settled(await query(settings, GRAPH, namespace="copied")) == before
    assert await query(settings, TARGETS, namespace="copied") == await query(
        settings, TARGETS, namespace=NS)
    for namespace in (NS, "copied"):  # search looks for symbols only where there are some
        assert await query(settings, CODE_MARK, namespace=namespace) == [[1]]
    entity = await call(client, "get_entity", name_or_id="square_area", namespace="copied")
    assert [u["source"] for u in entity["uses"]] == ["pkg/report.py"]
