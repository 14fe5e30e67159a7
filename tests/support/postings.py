"""Memories written and deleted through the workers' store functions (workers/store.py: the
keyword postings' real write path, FalkorDB and all), without embedding: the postings never
read a vector, so each chunk gets a small random one and its namespace no vector index. And
what the postings hold against a recount from the chunks the graph holds."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, NamedTuple

import numpy as np
import pytest

from tests.support.waiting import eventually
from zapomni.services.query import postings as pool
from zapomni.services.query.keyword import K1, B, idf
from zapomni.shared.protocol.ids import memory_id
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.store import cypher_schema, postings
from zapomni.shared.store.graphstore import indexes_building, run
from zapomni.shared.text.words import stem
from zapomni.workers import store

DIM = 4  # the chunks' vectors: no index reads them


async def prepare(graph: Any) -> None:
    """The namespace's indexes (as prepare_namespace creates them, less the vector index),
    usable."""
    for query in cypher_schema.SCHEMA:
        await graph.query(query)
    await eventually(lambda: indexes_building(graph), lambda building: not building,
                     "the namespace's indexes to be usable")


def job_of(namespace: str, text: str, gen: int = 0) -> IngestJob:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return IngestJob(task_id=f"task_{digest[:32]}", memory_id=memory_id(namespace, digest),
                     namespace=namespace, text=text, content_hash=digest, gen=gen)


def spans_of(text: str) -> list[ChunkSpan]:
    """A chunk a paragraph (blank lines between)."""
    spans, at = [], 0
    for i, part in enumerate(text.split("\n\n")):
        spans.append(ChunkSpan(idx=i, text=part, char_start=at, char_end=at + len(part),
                               tokens=len(part.split())))
        at += len(part) + 2
    return spans


def vectors(count: int, rng: np.random.Generator | None = None) -> np.ndarray:
    return (rng or np.random.default_rng(count)).random((count, DIM), dtype=np.float32)


async def add(graph: Any, jobs: list[IngestJob]) -> None:
    """These memories written as one batch of small memories is (workers/ingest.py), made
    searchable."""
    split = [(job, spans_of(job.text)) for job in jobs]
    await store.write_memories(graph, [(job, len(spans)) for job, spans in split])
    await store.write_batch_chunks(graph, [(job.memory_id, spans) for job, spans in split],
                                   vectors(sum(len(spans) for _, spans in split)))
    await store.mark_all_ready(graph, jobs)


async def add_one(graph: Any, job: IngestJob) -> None:
    """One memory written as an ingest's part writes it (workers/ingest.py)."""
    spans = spans_of(job.text)
    await store.write_memory(graph, job, len(spans))
    await store.write_chunks(graph, job.memory_id, spans, vectors(len(spans)))
    await store.mark_ready(graph, job.memory_id, job.task_id)


async def delete(graph: Any, memory: str) -> None:
    await store.delete_memory_graph(graph, memory)


class Counts(NamedTuple):
    df: dict[str, int]
    words: int
    chunks: int


async def recount(graph: Any) -> Counts:
    """Document frequencies, words and chunks counted from the chunks the graph holds."""
    rows = await run(graph, "MATCH (c:Chunk) RETURN c.id, c.text", read_only=True)
    df: Counter[str] = Counter()
    words = 0
    for _, counts, length in postings.counts_of([(cid, text) for cid, text in rows]):
        df.update(counts.keys())
        words += length
    return Counts(dict(df), words, len(rows))


async def counted(graph: Any) -> Counts:
    """What the postings count."""
    keys = postings.prefix(graph.key)
    df = {k.decode(): int(v) for k, v in (await graph.raw.hgetall(keys + "df")).items()}
    return Counts(df, int(await graph.raw.get(keys + "words") or 0),
                  int(await graph.raw.hlen(keys + "seqof")))


async def held_records(graph: Any) -> dict[str, list[tuple[str, int, int]]]:
    """Each term's records as (chunk id, count, length), sorted, of live numbers only; a
    record whose number no chunk has raises (it would be credited to whichever chunk gets it
    next)."""
    keys = postings.prefix(graph.key)
    owner = {int(v): k.decode() for k, v in (await graph.raw.hgetall(keys + "seqof")).items()}
    dead = np.unpackbits(np.frombuffer(await graph.raw.get(keys + "dead") or b"", np.uint8))
    out = {}
    async for key in graph.raw.scan_iter(match=keys + "t:*"):
        records = np.frombuffer(await graph.raw.get(key) or b"", postings.RECORD)
        mine = []
        for seq, tf, dl in records.tolist():
            if seq < len(dead) and dead[seq]:
                continue
            assert seq in owner, f"{key!r}: a record of number {seq}, which no chunk has"
            mine.append((owner[seq], tf, dl))
        if mine:
            out[key.decode()[len(keys) + 2:]] = sorted(mine)
    return out


async def fresh_records(graph: Any) -> dict[str, list[tuple[str, int, int]]]:
    """What held_records would be for a fresh ingest of the chunks the graph holds: one
    record a chunk and stem."""
    rows = await run(graph, "MATCH (c:Chunk) RETURN c.id, c.text", read_only=True)
    out: dict[str, list[tuple[str, int, int]]] = {}
    for cid, counts, length in postings.counts_of([(cid, text) for cid, text in rows]):
        for term, count in counts.items():
            out.setdefault(term, []).append((cid, min(count, postings.MAX_COUNT), length))
    return {term: sorted(records) for term, records in out.items()}


async def postings_bytes(graph: Any) -> dict[str, int]:
    """Bytes the server holds for the namespace's postings (MEMORY USAGE), by kind of key:
    the terms' strings together, and each other key."""
    keys = postings.prefix(graph.key)
    out: Counter[str] = Counter()
    async for key in graph.raw.scan_iter(match=keys + "*", count=1000):
        name = key.decode()[len(keys):]
        out["t:*" if name.startswith("t:") else name] += int(
            await graph.raw.memory_usage(key, samples=0) or 0)
    return dict(out)


VISIBLE = {"now": 0.0, "superseded": False}


async def pool_is_bm25(graph: Any, query: str, over: int) -> None:
    """The keyword pool the query service sums from the postings (services/query/postings.py)
    is BM25 over every chunk the graph holds, computed here from their texts: the same chunks
    in the same order (ties by chunk number), the same scores."""
    rows = await run(graph, "MATCH (c:Chunk) RETURN c.id, c.text", read_only=True)
    counts = {cid: (terms, length) for cid, terms, length in postings.counts_of(rows)}
    total = len(counts)
    average = sum(length for _, length in counts.values()) / max(total, 1)
    first: dict[str, str] = {}  # a stem's first word, as the search sends it
    for word in query.split():
        first.setdefault(stem(word), word)
    df = {s: sum(1 for terms, _ in counts.values() if s in terms) for s in first}
    weights = {s: idf(total, df[s]) for s in first if df[s]}
    scores = {}
    for cid, (terms, length) in counts.items():
        score = sum(w * terms[s] * (K1 + 1) / (terms[s] + K1 * (1 - B + B * length / average))
                    for s, w in weights.items() if terms.get(s))
        if score:
            scores[cid] = score
    keys = postings.prefix(graph.key)
    numbers = dict(zip(scores, await graph.raw.hmget(keys + "seqof", list(scores)),
                       strict=True)) if scores else {}
    expected = sorted(scores.items(), key=lambda item: (-item[1], int(numbers[item[0]])))[:over]
    weighted = [[first[s], w] for s, w in weights.items()]
    chosen = await pool.keyword_pool(graph, weighted, over, VISIBLE) if weighted else []
    assert [row[1] for row in chosen] == [cid for cid, _ in expected], query
    assert [row[3] for row in chosen] == pytest.approx([s for _, s in expected], rel=1e-9)
