"""Stored shape version 4 (shared/store/migrate.py): a chunk's graph state moves from the chunk
to its HAS_CHUNK edge. A namespace written the version-3 way (prose and code read for the
graph, the marks on the chunks, code_targets indexed on Chunk) migrates when a worker starts,
with every mark intact even after a step cut short, and a graph rebuild afterwards writes the
same graph, with real workers (spaCy, the code graph) and FalkorDB."""

from __future__ import annotations

from tests.integration.test_code_graph import REPORT, SHAPES, code
from tests.integration.test_graph import letters
from tests.integration.test_graph_build import build
from tests.support.graph import broken, query, stored
from tests.support.waiting import eventually
from tests.support.workers import add_text, run_workers
from zapomni.shared.protocol.api import BuildGraph
from zapomni.shared.store import cypher_schema, migrate
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import SCHEMA_VERSION, schema_version

FIELDS = ("entities_at", "graph_task", "pairs", "code_targets")
ON_EDGES = ("MATCH ()-[h:HAS_CHUNK]->(c:Chunk) RETURN c.id, "
            + ", ".join(f"h.{f}" for f in FIELDS) + " ORDER BY c.id")
ON_CHUNKS = ("MATCH (c:Chunk) RETURN c.id, " + ", ".join(f"c.{f}" for f in FIELDS)
             + " ORDER BY c.id")
# what version 3 stored: the marks on the chunk, the array index on Chunk.code_targets
AS_VERSION_3 = (
    "MATCH ()-[h:HAS_CHUNK]->(c:Chunk) SET " + ", ".join(f"c.{f} = h.{f}" for f in FIELDS),
    "MATCH ()-[h:HAS_CHUNK]->(:Chunk) SET " + ", ".join(f"h.{f} = null" for f in FIELDS),
    "DROP INDEX FOR ()-[h:HAS_CHUNK]-() ON (h.code_targets)",
    "CREATE INDEX FOR (c:Chunk) ON (c.code_targets)",
    "MERGE (x:ZapomniMeta {key: 'schema'}) SET x.version = 3",
)
TARGETS_INDEXED = ("CALL db.indexes() YIELD label, properties WHERE 'code_targets' IN properties "
                   "RETURN label")


def empty(rows: list[list]) -> list[list]:
    return [[row[0], *[None] * len(FIELDS)] for row in rows]


async def test_a_version_3_namespace_keeps_its_marks_and_rebuilds_the_same_graph(settings,
                                                                                 front,
                                                                                 monkeypatch):
    for text in letters(12):
        await add_text(settings, text)
    await add_text(settings, REPORT, code("pkg/report.py"))
    await run_workers(settings)
    await add_text(settings, SHAPES, code("pkg/shapes.py"))
    await run_workers(settings)
    marks = await query(settings, ON_EDGES)
    assert len(marks) >= 14 and all(row[1] is not None and row[2] for row in marks)
    assert any(row[4] for row in marks) and any(row[3] for row in marks)  # code and prose
    graph = await stored(settings, graph=True)
    # (a code chunk records pairs whose ends do not all exist: pair_without_edge is not 0)
    checks = await broken(settings)
    for statement in AS_VERSION_3:
        await query(settings, statement, write=True)
    assert await query(settings, ON_CHUNKS) == marks
    assert await query(settings, ON_EDGES) == empty(marks)

    # a migration cut short after one batch: the marks it moved are on their edges, the rest
    # still on their chunks, none in neither place
    await query(settings, cypher_schema.MIGRATE_MARKS, {"batch": 5}, write=True)
    edges, chunks = await query(settings, ON_EDGES), await query(settings, ON_CHUNKS)
    assert sum(row != empty([row])[0] for row in edges) == 5
    assert [e if e != empty([e])[0] else c for e, c in zip(edges, chunks, strict=True)] == marks

    # a worker starts: it migrates every namespace, 4 chunks a statement here (several)
    monkeypatch.setitem(migrate.STEP_BATCH, cypher_schema.MIGRATE_MARKS, 4)
    await run_workers(settings)
    store = GraphStore(settings)
    try:
        assert await schema_version(store, "default") == SCHEMA_VERSION
    finally:
        await store.aclose()
    assert await query(settings, ON_EDGES) == marks
    assert await query(settings, ON_CHUNKS) == empty(marks)
    await eventually(lambda: query(settings, TARGETS_INDEXED),  # Chunk's is rebuilt without
                     lambda rows: rows == [["HAS_CHUNK"]], "code_targets indexed on the edge")

    task = await build(front, settings, BuildGraph(rebuild=True))
    assert (task.state, task.done, task.total) == ("done", len(marks), len(marks))
    rebuilt = await query(settings, ON_EDGES)
    assert [row[2] for row in rebuilt] == [task.task_id] * len(marks)
    assert [row[3:] for row in rebuilt] == [row[3:] for row in marks]
    assert await stored(settings, graph=True) == graph
    assert await broken(settings) == checks
