"""The keyword postings follow the live chunks (shared/store/postings.py, compaction.py): after
any mix of adds, updates, deletes, jobs that ran again, deletes landing mid-write and writers
that died, the document frequencies, words and chunks counted equal a recount from the chunks
the graph holds, and the keyword pool is BM25 over them at every step of a compaction pass;
once a pass has run, each term holds one record a live chunk, as a fresh ingest would, and a
namespace reuses the numbers of its deleted chunks instead of running out of them."""

from __future__ import annotations

import argparse
import asyncio
import random
import string
import uuid

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from tests.support import postings as support
from tests.support.postings import add, add_one, counted, delete, job_of, recount
from tests.support.workers import run_workers
from zapomni.services.cli.moves import run_migrate
from zapomni.shared.store import compaction, cypher_schema, migrate, postings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.workers import store as worker_store

WORDS = ["heron", "otter", "badger", "kestrel", "stoat", "harbour", "meadow", "quarry",
         "orchard", "estuary", "dusk", "wall", "herons", "walls", "running", "ran"]
QUERIES = ["heron harbour", "otter estuary dusk", "badger", "kestrel quarry wall",
           "stoat meadow orchard running", "walls herons ran"]

paragraph = st.lists(st.sampled_from(WORDS), min_size=1, max_size=9).map(" ".join)
text = st.lists(paragraph, min_size=1, max_size=3).map("\n\n".join)
pick = st.integers(min_value=0, max_value=10_000)
operation = st.one_of(
    st.tuples(st.just("add"), st.lists(text, min_size=1, max_size=3)),
    st.tuples(st.just("add_one"), text),
    st.tuples(st.just("delete"), pick),
    st.tuples(st.just("update"), pick, text),  # a new text replaces a memory (a file again)
    st.tuples(st.just("again"), pick),  # a write that runs again
    st.tuples(st.just("lost"), text),  # deleted while its text was embedded
    st.tuples(st.just("died"), text, st.sampled_from(["deleted", "retried", "undone"])),
    st.tuples(st.just("compact"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("reconcile")),
)


class Scenario:
    """A namespace written by the workers' store functions, and a compactor that holds its
    lock and runs a few steps at a time, so writes land in the middle of its passes."""

    def __init__(self, graph) -> None:
        self.graph = graph
        self.live: list = []  # the jobs of the memories stored
        self.token = uuid.uuid4().hex
        self.unsettled = False  # a dead writer's claim not yet resolved against the graph

    def chosen(self, i: int):
        return self.live[i % len(self.live)] if self.live else None

    def fresh(self, body: str):
        """A job for this text, unique in the namespace (a memory's id is its text's)."""
        return job_of("p", f"{body}\n\n{uuid.uuid4().hex[:8]}")

    async def apply(self, op: tuple) -> None:
        await getattr(self, op[0])(*op[1:])

    async def add(self, bodies: list[str]) -> None:
        jobs = [self.fresh(body) for body in bodies]
        await add(self.graph, jobs)
        self.live += jobs

    async def add_one(self, body: str) -> None:
        self.live.append(job := self.fresh(body))
        await add_one(self.graph, job)

    async def delete(self, i: int) -> None:
        if self.live:
            old = self.chosen(i)
            self.live.remove(old)
            await delete(self.graph, old.memory_id)

    async def update(self, i: int, body: str) -> None:
        if self.live:
            old = self.chosen(i)
            await self.add_one(body)
            self.live.remove(old)
            await delete(self.graph, old.memory_id)

    async def again(self, i: int) -> None:
        if self.live:
            job = self.chosen(i)
            spans = support.spans_of(job.text)
            await worker_store.write_chunks(self.graph, job.memory_id, spans,
                                            support.vectors(len(spans)))

    async def lost(self, body: str) -> None:
        job = self.fresh(body)
        spans = support.spans_of(job.text)
        await worker_store.write_memory(self.graph, job, len(spans))
        await delete(self.graph, job.memory_id)
        await worker_store.write_chunks(self.graph, job.memory_id, spans,
                                        support.vectors(len(spans)))

    async def compact(self, steps: int) -> None:
        for _ in range(steps):
            await compaction.step(self.graph, self.token, force=True)

    async def reconcile(self) -> None:
        await compaction.reconcile(self.graph)
        self.unsettled = False

    async def died(self, body: str, then: str) -> None:
        """A writer that numbered its chunks and died before writing them; then its memory
        is deleted, its job runs again, or the sweep undoes what it wrote."""
        graph, job = self.graph, self.fresh(body)
        spans = support.spans_of(job.text)
        await worker_store.write_memory(graph, job, len(spans))
        await postings.write_postings(graph, postings.counts_of(
            [(f"{job.memory_id}:{s.idx}", s.text) for s in spans]))
        if then == "retried":
            await add_one(graph, job)
            self.live.append(job)
            return
        if then == "deleted":
            await delete(graph, job.memory_id)
        else:
            await worker_store.undo_memory(graph, job.memory_id, job.task_id)
        self.unsettled = True

    async def check(self) -> None:
        if not self.unsettled:
            assert await counted(self.graph) == await recount(self.graph)
            for query in QUERIES[:2]:
                await support.pool_is_bm25(self.graph, query, 5)


async def play(settings, ops: list[tuple]) -> None:
    store = GraphStore(settings)
    graph = store.graph("p")
    keys = postings.prefix(graph.key)
    try:
        await graph.raw.flushall()
        await support.prepare(graph)
        scenario = Scenario(graph)
        await graph.raw.set(keys + "lock", scenario.token)
        for op in ops:
            await scenario.apply(op)
            await scenario.check()
        await compaction.reconcile(graph)
        assert await graph.raw.hlen(keys + "pend") == 0
        assert await counted(graph) == await recount(graph)
        for query in QUERIES:
            await support.pool_is_bm25(graph, query, 10)
        # the pass under way to its end, then one begun now: one record a live chunk and
        # stem, every dead number free
        for _ in range(2):
            while await compaction.step(graph, scenario.token, force=True) != "ended":
                pass
        assert await support.held_records(graph) == await support.fresh_records(graph)
        assert await graph.raw.bitcount(keys + "dead") == 0
        numbered = {int(n) for n in (await graph.raw.hgetall(keys + "seqof")).values()}
        free = [int(n) for n in await graph.raw.lrange(keys + "free", 0, -1)]
        assert len(free) == len(set(free)) and not numbered & set(free)
        assert numbered | set(free) == set(range(1, int(await graph.raw.get(keys + "seq")
                                                         or 0) + 1))
        for query in QUERIES:
            await support.pool_is_bm25(graph, query, 10)
    finally:
        await store.aclose()


@pytest.mark.timeout(900)
def test_the_postings_equal_a_recount_after_any_mix_of_writes(settings, monkeypatch):
    # passes of many small steps, so that writes and searches land in the middle of them
    monkeypatch.setattr(compaction, "PAGE_TERMS", 3)
    monkeypatch.setattr(compaction, "FREE_BATCH", 2)
    @hypothesis_settings(max_examples=40, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(HealthCheck))
    @given(st.lists(operation, min_size=1, max_size=25))
    def sequence(ops: list[tuple]) -> None:
        asyncio.run(play(settings, ops))

    sequence()


async def test_a_pass_goes_a_page_at_a_time_and_searches_stay_right_between(settings,
                                                                           monkeypatch):
    """A pass over a vocabulary larger than a page (600 terms holding junk; the hash's HSCAN
    pages it) rewrites a bounded number of terms a step; writes and deletes land between its
    steps, and after each step the counts equal a recount and the pool is BM25 over the
    chunks the graph holds. Once it and the next pass end, each term is as a fresh ingest."""
    monkeypatch.setattr(compaction, "PAGE_TERMS", 50)
    rng = random.Random(45)
    vocabulary = ["".join(rng.choice(string.ascii_lowercase) for _ in range(9))
                  for _ in range(600)]
    store = GraphStore(settings)
    graph = store.graph("p")
    keys = postings.prefix(graph.key)
    token = uuid.uuid4().hex
    try:
        await support.prepare(graph)
        jobs = [job_of("p", " ".join(vocabulary[i: i + 6]) + f" heron {i}")
                for i in range(0, 600, 3)]
        await add(graph, jobs)
        for job in jobs[::2]:
            await delete(graph, job.memory_id)
        live = jobs[1::2]
        assert await graph.raw.hlen(keys + "junk") > 300
        await graph.raw.set(keys + "lock", token)
        assert await compaction.step(graph, token, force=True) == "began"
        scans, at = 0, 0
        while True:
            before = await graph.raw.hlen(keys + "junk")
            if (state := await compaction.step(graph, token)) != "scanned":
                break
            scans += 1
            rewritten = before - await graph.raw.hlen(keys + "junk")
            assert rewritten <= 2 * compaction.PAGE_TERMS, rewritten  # a step's bound
            # a write and a delete between two steps of the pass
            new = job_of("p", f"{vocabulary[at]} {vocabulary[-1 - at]} otter {at}")
            await add_one(graph, new)
            await delete(graph, live.pop(at % len(live)).memory_id)
            live.append(new)
            at += 1
            assert await counted(graph) == await recount(graph)
            for query in (f"{vocabulary[at]} heron", f"{vocabulary[300 + at]} otter"):
                await support.pool_is_bm25(graph, query, 10)
        assert scans >= 5, scans  # 600 terms in pages of ~50, not in one read
        while state != "ended":
            state = await compaction.step(graph, token)
        while await compaction.step(graph, token, force=True) != "ended":
            pass
        assert await support.held_records(graph) == await support.fresh_records(graph)
        assert await counted(graph) == await recount(graph)
        await support.pool_is_bm25(graph, f"{vocabulary[7]} heron otter", 10)
    finally:
        await store.aclose()


async def test_a_namespace_reuses_the_numbers_of_its_deleted_chunks(settings):
    """Round after round of a namespace filled and emptied, the numbers and the id table stay
    those of its largest size: no lifetime ceiling (before, every chunk ever written took a
    new number, and the id table grew 48 bytes a number up to Redis' 512 MB a string)."""
    store = GraphStore(settings)
    graph = store.graph("p")
    keys = postings.prefix(graph.key)
    try:
        await support.prepare(graph)
        for round_ in range(4):
            jobs = [job_of("p", f"round {round_} memory {i}: heron otter {i % 7}")
                    for i in range(60)]
            await add(graph, jobs)
            for job in jobs:
                await delete(graph, job.memory_id)
            assert await compaction.compact(graph, force=True) > 0
            assert int(await graph.raw.get(keys + "seq")) == 60, round_
            assert await graph.raw.strlen(keys + "chunks") == 61 * postings.SLOT
            assert await graph.raw.llen(keys + "free") == 60
            assert [key async for key in graph.raw.scan_iter(match=keys + "t:*")] == []
        assert await counted(graph) == await recount(graph) == ({}, 0, 0)
    finally:
        await store.aclose()


async def test_a_search_that_overlaps_freed_numbers_knows_it(settings):
    """The compaction moves its epoch when it frees numbers; the pool's reads see it move
    (services/query/postings.py then reads again: a freed number may name another chunk)."""
    store = GraphStore(settings)
    graph = store.graph("p")
    try:
        await support.prepare(graph)
        jobs = [job_of("p", f"the heron by the weir, number {i}") for i in range(5)]
        await add(graph, jobs)
        await delete(graph, jobs[0].memory_id)
        _, _, dead, epoch = await postings.read_terms(graph, ["heron"])
        assert dead.any()
        await compaction.compact(graph, force=True)
        ids, after = await postings.live_chunks(graph, [2, 3])
        assert after > epoch and all(ids)
        _, _, dead, again = await postings.read_terms(graph, ["heron"])
        assert again == after and not dead.any()
    finally:
        await store.aclose()


async def as_version_5(graph, store) -> None:
    """The namespace as version 5 left it: its junk never counted, no totals, no free list."""
    keys = postings.prefix(graph.key)
    await graph.raw.delete(keys + "junk", keys + "stats", keys + "free")
    await run(graph, cypher_schema.WRITE_SCHEMA, {"version": 5})
    assert await migrate.schema_version(store, graph.key[len("zapomni:ns:"):]) == 5


async def written_with_junk(graph, namespace: str) -> None:
    jobs = [job_of(namespace, f"note {i}: the otter by the estuary at dusk, {i % 4} herons")
            for i in range(30)]
    await add(graph, jobs)
    for job in jobs[:10]:  # jobs that ran again
        spans = support.spans_of(job.text)
        await worker_store.write_chunks(graph, job.memory_id, spans, support.vectors(1))
    for job in jobs[10:20]:
        await delete(graph, job.memory_id)


@pytest.mark.timeout(600)
async def test_a_store_of_version_5_is_compacted_once_migrated(settings, monkeypatch):
    """A worker's start-up migration, and `zapomni migrate`, count the junk version 5 left
    (a term written then counts as holding some once), after which a pass leaves each term
    as a fresh ingest would and frees the numbers deleted then."""
    store = GraphStore(settings)
    try:
        for namespace in ("old", "older"):
            graph = store.graph(namespace)
            await support.prepare(graph)
            await written_with_junk(graph, namespace)
            await as_version_5(graph, store)
        await run_workers(settings)  # a worker starts (and stops: nothing is queued)
        monkeypatch.setenv("ZAPOMNI_FALKORDB_URL", settings.falkordb_url)
        monkeypatch.setenv("ZAPOMNI_REDIS_URL", settings.redis_url)
        assert await migrate.schema_version(store, "old") == migrate.SCHEMA_VERSION
        await as_version_5(store.graph("older"), store)  # and again, migrated by hand
        assert await asyncio.to_thread(run_migrate, argparse.Namespace()) == 0
        for namespace in ("old", "older"):
            graph = store.graph(namespace)
            keys = postings.prefix(graph.key)
            assert await migrate.schema_version(store, namespace) == migrate.SCHEMA_VERSION
            stats = await compaction.stats_of(graph)
            assert stats.dead == 10 and stats.junk > 0 and stats.live > 0
            assert await support.held_records(graph) != await support.fresh_records(graph)
            await compaction.compact(graph, force=True)
            assert await support.held_records(graph) == await support.fresh_records(graph)
            assert await graph.raw.bitcount(keys + "dead") == 0
            assert await graph.raw.llen(keys + "free") == 10
            assert await counted(graph) == await recount(graph)
            for query in QUERIES:
                await support.pool_is_bm25(graph, query, 10)
    finally:
        await store.aclose()
