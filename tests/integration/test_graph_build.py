"""Graph builds at their bounds, with real workers (spaCy) and FalkorDB: parts that page through
chunk ids, evidence capped while weights stay exact, a rebuild cancelled at an exact batch
(a worker checkpoint after each batch), a part retried after it failed, and continuation jobs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from tests.conftest import make_settings
from tests.integration.test_graph import letters
from tests.support.graph import broken, query, stored
from tests.support.workers import add_text, on_graph_batch, run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import BuildGraph, MemoryRef
from zapomni.shared.protocol.jobs import GraphJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks.queue import deserialize
from zapomni.workers import graph
from zapomni.workers.extract import ChunkEntities
from zapomni.workers.store import EVIDENCE_KEEP, forget_entities, write_entities


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch):
    """Call with the graph path's sizes for one test (workers/graph.py: PART_CHUNKS, BATCH,
    SLICE_SECONDS), so a few dozen chunks make several parts, batches and continuations."""
    def set_sizes(**values: float) -> None:
        for name, value in values.items():
            monkeypatch.setattr(graph, name, value)
    return set_sizes


def quiet(settings: Settings, **overrides) -> Settings:
    """Automatic extraction off: each test starts its graph tasks itself."""
    return make_settings(settings.falkordb_url, query_url=settings.query_url, graph_auto=False,
                         **overrides)


async def ingest(settings: Settings, texts: list[str]) -> list[str]:
    receipts = [await add_text(settings, text) for text in texts]
    await run_workers(settings)
    return [r.memory_id for r in receipts]


async def build(front: Front, settings: Settings, request: BuildGraph, workers: int = 1):
    receipt = await ops.build_graph(front, request)
    await run_workers(settings, count=workers)
    return await ops.task_status(front, receipt.task_id)


async def job_args(front: Front, job_id: str) -> dict | None:
    """The payload of a job that ran (arq keeps its result, with its arguments, a minute)."""
    raw = await front.redis.get(f"arq:result:{job_id}")
    return None if raw is None else deserialize(raw)["a"][0]


def consistent(counts: dict) -> dict:
    return dict.fromkeys(counts, 0)


async def forget(settings: Settings, chunk_ids: list[str]) -> None:
    """Undo what these chunks contributed, as a delete does before removing them."""
    store = GraphStore(settings)
    try:
        await forget_entities(store.graph("default"), chunk_ids)
    finally:
        await store.aclose()


async def test_a_build_pages_through_more_chunks_than_a_part_holds(settings, front, sizes):
    sizes(PART_CHUNKS=8, BATCH=3)
    small = quiet(settings)
    memory_ids = await ingest(small, letters(40))
    task = await build(front, small, BuildGraph(), workers=2)
    assert (task.state, task.done, task.total) == ("done", 40, 40)
    counts = await stored(small, graph=True)
    assert counts["extracted"] == counts["chunks"] == 40 and counts["related"] > 0
    # five parts, each a range of chunk ids: no part carries the ids it reads
    parts = [await job_args(front, f"{task.task_id}:part:{i}") for i in range(6)]
    assert parts[5] is None and all(p is not None for p in parts[:5])
    assert all("chunk_ids" not in p and p["last"] for p in parts[:5])
    assert await pages(small, 5) == sorted(f"{m}:0" for m in memory_ids)
    assert await broken(small) == consistent(await broken(small))
    # some memories: groups of whole memories, read from each memory to its chunks
    some = await build(front, small, BuildGraph(memory_ids=memory_ids[:20], rebuild=True))
    assert (some.state, some.done, some.total) == ("done", 20, 20)
    groups = [await job_args(front, f"{some.task_id}:part:{i}") for i in range(3)]
    assert sorted(m for g in groups for m in g["memory_ids"]) == sorted(memory_ids[:20])
    assert await stored(small, graph=True) == counts


async def pages(settings: Settings, parts: int) -> list[str]:
    """Every chunk id the parts of a rebuild read, part after part, batch after batch."""
    store = GraphStore(settings)
    res = SimpleNamespace(settings=settings)
    try:
        g = store.graph("default")
        job = GraphJob(task_id="task_pages", namespace="default", rebuild=True)
        read = []
        for part in await graph.plan(g, job, parts * graph.PART_CHUNKS, graph.PART_CHUNKS):
            after = part.after
            while rows := await graph.next_batch(res, g, part, after):
                read += [row[0] for row in rows]
                after = rows[-1][0]
        return read
    finally:
        await store.aclose()


PAIR_TEXTS = [f"Ada Lovelace wrote to Charles Babbage about engine number {i}."
              for i in range(EVIDENCE_KEEP + 8)]


async def pair_edge(settings: Settings) -> tuple[int, list[str]]:
    rows = await query(settings, "MATCH (a:Entity {name: 'Ada Lovelace'})-[r:RELATED]-"
                                 "(b:Entity {name: 'Charles Babbage'}) RETURN r.weight, r.evidence")
    assert len(rows) == 1
    return rows[0][0], rows[0][1]


async def test_evidence_keeps_the_last_ids_and_weights_stay_exact_under_deletes(settings,
                                                                                 front, sizes):
    sizes(BATCH=5)
    small = quiet(settings)
    memory_ids = await ingest(small, PAIR_TEXTS)
    await build(front, small, BuildGraph())
    weight, evidence = await pair_edge(small)
    assert (weight, len(evidence)) == (len(PAIR_TEXTS), EVIDENCE_KEEP)
    # delete memories whose chunk ids the edge no longer keeps, then some it keeps
    kept = {cid.rsplit(":", 1)[0] for cid in evidence}
    dropped = [m for m in memory_ids if m not in kept]
    assert len(dropped) == len(PAIR_TEXTS) - EVIDENCE_KEEP
    for memory_id in dropped[:5] + sorted(kept)[:3]:
        await ops.delete_memory(front, MemoryRef(memory_id=memory_id))
    await run_workers(small)
    weight, evidence = await pair_edge(small)
    assert weight == len(PAIR_TEXTS) - 8
    assert len(evidence) == EVIDENCE_KEEP - 3
    assert not {cid.rsplit(":", 1)[0] for cid in evidence} & set(dropped[:5] + sorted(kept)[:3])
    assert await broken(small) == consistent(await broken(small))
    # a forget that runs again (a retried delete) takes nothing off twice
    gone = set(dropped[:5] + sorted(kept)[:3])
    chunk = next(f"{m}:0" for m in memory_ids if m not in gone)
    await forget(small, [chunk])
    await forget(small, [chunk])
    assert (await pair_edge(small))[0] == weight - 1
    assert await broken(small) == consistent(await broken(small))


@pytest.fixture
def hook() -> list:
    """Each graph batch's last chunk id, as a test's checkpoint sees them."""
    return []


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
async def test_a_rebuild_cancelled_at_any_batch_keeps_the_whole_graph(settings, front, hook,
                                                                      share, sizes):
    sizes(BATCH=5)
    small = quiet(settings)
    await ingest(small, letters(50))
    assert (await build(front, small, BuildGraph())).state == "done"
    before = await stored(small, graph=True)
    receipt = await ops.build_graph(front, BuildGraph(rebuild=True))
    stop_after = round(10 * share)  # 10 batches of 5

    async def cancel_at(job, last_id: str) -> None:
        hook.append(last_id)
        if len(hook) == stop_after:
            await ops.cancel_task(front, job.task_id)

    await run_workers(small, checkpoint=on_graph_batch(cancel_at))
    task = await ops.task_status(front, receipt.task_id)
    assert (task.state, task.done, len(hook)) == ("cancelled", 5 * stop_after, stop_after)
    rebuilt = await query(small, "MATCH ()-[h:HAS_CHUNK {graph_task: $t}]->(:Chunk) "
                          "RETURN count(h)",
                          {"t": receipt.task_id})
    assert rebuilt[0][0] == 5 * stop_after  # those were rewritten; the rest kept theirs
    assert await stored(small, graph=True) == before
    assert await broken(small) == consistent(await broken(small))
    # a plain build afterwards has nothing to read back: nothing was lost
    plain = await build(front, small, BuildGraph())
    assert (plain.state, plain.total, plain.message) == ("done", 0, "nothing new to read")
    assert await stored(small, graph=True) == before


async def test_a_plain_build_reads_back_chunks_whose_contribution_was_forgotten(settings,
                                                                               front, sizes):
    sizes(BATCH=5)
    small = quiet(settings)
    memory_ids = await ingest(small, letters(20))
    await build(front, small, BuildGraph())
    before = await stored(small, graph=True)
    lost = [f"{m}:0" for m in memory_ids[:7]]  # as a crash between undo and write would leave
    await forget(small, lost)
    assert (await stored(small, graph=True))["extracted"] == 13
    again = await build(front, small, BuildGraph())
    assert (again.state, again.done, again.total) == ("done", 7, 7)
    assert await stored(small, graph=True) == before
    assert await broken(small) == consistent(await broken(small))


async def test_a_retried_rebuild_part_does_not_rewrite_what_it_rewrote(settings, front, hook,
                                                                      sizes):
    sizes(BATCH=5)
    small = quiet(settings)
    await ingest(small, letters(30))
    await build(front, small, BuildGraph())
    before = await stored(small, graph=True)
    receipt = await ops.build_graph(front, BuildGraph(rebuild=True))

    async def fail_once(job, last_id: str) -> None:
        hook.append(last_id)
        if len(hook) == 3:
            raise RuntimeError("the worker lost its connection")  # after the 3rd of 6 batches

    await run_workers(small, checkpoint=on_graph_batch(fail_once))
    task = await ops.task_status(front, receipt.task_id)
    assert (task.state, task.attempts) == ("done", 2)
    assert len(hook) == 6 and len(set(hook)) == 6  # each batch read once over both tries
    rebuilt = await query(small, "MATCH ()-[h:HAS_CHUNK {graph_task: $t}]->(:Chunk) "
                          "RETURN count(h)",
                          {"t": receipt.task_id})
    assert rebuilt[0][0] == 30
    assert await stored(small, graph=True) == before


async def test_a_part_over_its_time_budget_hands_the_rest_to_a_continuation(settings, front,
                                                                            sizes):
    sizes(BATCH=4, SLICE_SECONDS=1e-9)
    small = quiet(settings)
    await ingest(small, letters(16))
    task = await build(front, small, BuildGraph())
    assert (task.state, task.done, task.total) == ("done", 16, 16)
    assert (await stored(small, graph=True))["extracted"] == 16
    # one batch per job: the planning job read the first, continuations 1-3 the others
    jobs = [await job_args(front, f"{task.task_id}:part:0:next:{seq}") for seq in range(1, 5)]
    assert [j is not None for j in jobs] == [True, True, True, False]
    afters = [j["after"] for j in jobs[:3]]
    assert afters == sorted(afters) and len(set(afters)) == 3
    assert await broken(small) == consistent(await broken(small))


async def test_runs_of_one_build_on_two_workers_write_one_graph(settings, front, sizes):
    """Two workers, small parts and a tiny budget: many jobs, one consistent graph."""
    sizes(BATCH=2, PART_CHUNKS=6, SLICE_SECONDS=1e-9)
    small = quiet(settings)
    await ingest(small, letters(24))
    first = await build(front, small, BuildGraph(), workers=2)
    counts = await stored(small, graph=True)
    again = await asyncio.gather(*(ops.build_graph(front, BuildGraph(rebuild=True))
                                   for _ in range(2)))
    await run_workers(small, count=2)
    states = [(await ops.task_status(front, r.task_id)).state for r in again]
    assert first.state == "done" and states == ["done", "done"]
    assert await stored(small, graph=True) == counts
    assert await broken(small) == consistent(await broken(small))


async def test_an_entity_is_typed_again_from_its_mentions_when_chunks_change(settings):
    """Chunks that disagree on a name's type (the small model calls a person an organisation
    in one sentence and a person in the next): the entity is shown as a person only while
    two thirds of its mentions say so, and a place the gazetteer has is a place whatever the
    model said; both are looked at again when chunks are forgotten or rewritten. The type
    most mentions give is kept beside (ner_type)."""
    small = quiet(settings)
    memory_ids = await ingest(small, [f"Letter {i} from Ada Lovelace." for i in range(3)])
    chunks = [f"{m}:0" for m in memory_ids]

    def said(kind: str, count: int) -> ChunkEntities:
        return ChunkEntities(mentions={"ada lovelace": ("Ada Lovelace", kind, count),
                                       "kraków": ("Kraków", "person", 1)})

    store = GraphStore(small)
    try:
        await write_entities(store.graph("default"), chunks, [
            said("person", 3), said("organization", 2), said("organization", 2)], "t1")
        assert await entity_types(small) == [("Ada Lovelace", "unknown", "organization"),
                                             ("Kraków", "place", "person")]
        await forget(small, chunks[1:2])
        assert await entity_types(small) == [("Ada Lovelace", "unknown", "person"),  # 3 to 2
                                             ("Kraków", "place", "person")]
        await write_entities(store.graph("default"), chunks[2:3], [said("person", 2)], "t2")
        assert await entity_types(small) == [("Ada Lovelace", "person", "person"),  # 5 to 0
                                             ("Kraków", "place", "person")]
    finally:
        await store.aclose()


async def entity_types(settings: Settings) -> list[tuple[str, str, str]]:
    rows = await query(settings, "MATCH (e:Entity) RETURN e.name, e.type, e.ner_type "
                       "ORDER BY e.name")
    return [(name, kind, said) for name, kind, said in rows]
