"""The keyword signal's postings, kept by the workers beside FalkorDB's full-text index and
read whole by the query service (``graph``: a Graph of shared/store/graphstore.py, whose
``raw`` client answers bytes). For each stem of a namespace, one Redis string of fixed
records (the chunk's number, the stem's count in it, the chunk's length in words), appended
as chunks are written.

Why not FalkorDB's own index: its full-text procedure yields every match of a term one row at
a time (~5 us a row) with no top-k to push down, so at 1M chunks a question's terms cost
0.9-1.9 s (docs/benchmarks.md, the 1M curve). As one string a posting is 8 bytes to read and
a few nanoseconds of numpy (services/query/postings.py).

Keys carry the graph's name as a hash tag, so in a cluster they live on the graph's master
(``{zapomni:ns:NAME}:kw:`` and): ``t:STEM`` the postings; ``df`` a hash of each stem's live
chunks (BM25's document frequency); ``seqof`` a hash of each live chunk's number; ``chunks``
the id behind each number (SLOT bytes at number x SLOT); ``seq`` the highest number given;
``free`` numbers given again before a new one; ``words`` the live chunks' words (BM25's
average length); ``dead`` a bitmap of the numbers deleted whose records may remain; ``pend``
a hash of the numbers given whose chunk's write has not yet been seen to run, each with the
chunk's length and stems; ``junk`` a hash of the junk each term holds and ``stats`` the
totals, ``purge``, ``lock``: the compaction's (shared/store/compaction.py); ``backfill``
version 5's cursor.

A chunk is numbered once while it lives: the claim (postings_claim.lua) gives the number it
has or a new one, and counts its stems and words only then, in one script, so a job that
runs again appends the same postings again (the reader adds a chunk once per term; the
compaction removes the repeats) and counts nothing twice. A worker numbers a write's chunks
before it writes them and settles the claims after (postings_forget.lua): a chunk the write
did not write (its memory was deleted while its text was embedded) is forgotten by the
stems kept in ``pend``; a delete that reads the chunks after they are written finds them
numbered; a claim a dead writer left is resolved against the graph by the workers' upkeep.
A delete (postings_forget.lua, before the chunk goes) uncounts it and marks its number dead;
the reader leaves dead numbers out of the sums until the compaction has removed their
records and freed the numbers."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from zapomni.shared.store import cypher_schema
from zapomni.shared.store.graphstore import answer, run
from zapomni.shared.text.words import WORD, stem, worth_matching

log = logging.getLogger(__name__)

RECORD = np.dtype([("seq", "<u4"), ("tf", "<u2"), ("dl", "<u2")])
SLOT = 48  # a chunk id: "mem_", 32 hex digits, ":" and its index (38-44 bytes)
MAX_COUNT = 0xFFFF  # a count or length past 16 bits is kept as this (BM25 saturates long before)
# chunks a script counts at most: the server runs nothing else meanwhile (~70 stems a chunk,
# ~1 us each: ~15 ms)
SCRIPT_CHUNKS = 200


def prefix(graph_key: str) -> str:
    return "{" + graph_key + "}:kw:"


def term_key(graph_key: str, term: str) -> str:
    return prefix(graph_key) + "t:" + term


# a chunk's id, the stems of its words the keyword signal matches with their counts, and
# its length in words (counts_of)
Counted = tuple[str, Counter[str], int]


# the namespace's postings keys every script gets, in this order (each script names those it
# uses at its top)
KEYS = ("seqof", "df", "seq", "words", "dead", "pend", "chunks", "free", "junk", "stats")
HERE = Path(__file__).parent
SCRIPTS = {path.stem: path.read_text() for name in ("postings_*.lua", "compaction_*.lua",
                                                   "release_lock.lua")
           for path in HERE.glob(name)}


def keys_of(graph: Any) -> list[str]:
    return [prefix(graph.key) + key for key in KEYS]


async def call(graph: Any, name: str, args: list[Any], keys: list[str] | None = None) -> Any:
    """Run one of SCRIPTS (redis-py's Script: EVALSHA, loading it on the first NOSCRIPT) with
    every postings key, unless ``keys`` are given."""
    script = graph.raw.register_script(SCRIPTS[name])
    return await answer(script(keys=keys_of(graph) if keys is None else keys, args=args))


class Claim(NamedTuple):
    """A chunk's number as write_postings gave it: settled once its chunk's write ran."""

    chunk_id: str
    number: int


async def write_postings(graph: Any, counted: list[Counted]) -> list[Claim]:
    """Number the chunks (as counts_of counts them) and append their postings: one array of
    the batch's records, ordered by term and cut into each term's bytes, appended by one
    script. Against an APPEND a term in a pipeline and an argument a stem, the worker's CPU
    a chunk, counting included, 0.62 -> 0.26 ms, the server's 0.10 -> 0.11 ms (`./dev bench
    keyword_pool --write 3000`, 2026-11-28: the curve's workers spent 1.95 ms a chunk against
    1.06 before there were postings).

    Written before the chunks (the claims come back to ``settle``): a delete that reads the
    chunks after they are written finds them numbered and forgets them; one that runs before
    leaves the write nothing to write to, and settle forgets what it numbered. A chunk whose
    number was taken from it between the two scripts (another writer of it, a delete) gets
    no records: the append is refused and sent again without it."""
    claims: list[Claim] = []
    for start in range(0, len(counted), SCRIPT_CHUNKS):
        batch = counted[start : start + SCRIPT_CHUNKS]
        args: list[Any] = [SLOT]
        for chunk_id, counts, length in batch:
            if len(chunk_id.encode()) > SLOT:
                raise ValueError(f"chunk id {chunk_id[:80]!r} is longer than {SLOT} bytes")
            args += [chunk_id, length, " ".join(counts)]
        numbered = await call(graph, "postings_claim", args)
        members = [(chunk, int(seq), int(new)) for chunk, seq, new in
                   zip(batch, numbered[::2], numbered[1::2], strict=True)]
        claims += [Claim(chunk[0], seq) for chunk, seq, _ in members]
        while members:
            lost = await append(graph, members)
            members = [m for i, m in enumerate(members, 1) if i not in lost]
            if not lost:
                break
    return claims


async def append(graph: Any, members: list[tuple[Counted, int, int]]) -> set[int]:
    """Append the records of ``members`` (each counted chunk, its number, 1 if numbered now)
    unless one's number is no longer its own: then nothing, and those positions (from 1)."""
    terms: dict[str, int] = {}
    which, records, again = [], [], []
    for (_, counts, length), seq, new in members:
        for term, count in counts.items():
            which.append(terms.setdefault(term, len(terms)))
            records.append((seq, min(count, MAX_COUNT), length))
            again.append(1 - new)
    args: list[Any] = [len(members)]
    for (chunk_id, _, _), seq, _ in members:
        args += [chunk_id, seq]
    parts: list[bytes] = []
    repeats: list[Any] = []
    if terms:
        order = np.argsort(which, kind="stable")
        blob = np.array(records, RECORD)[order].tobytes()
        sizes = np.bincount(which) * RECORD.itemsize
        parts = [blob[end - size : end] for end, size in
                 zip(np.cumsum(sizes).tolist(), sizes.tolist(), strict=True)]
        if any(again):
            for at, (term, repeated) in enumerate(zip(terms, np.bincount(
                    which, weights=again).astype(int).tolist(), strict=True), 1):
                if repeated:
                    repeats += [at, term, repeated]
    args += [len(repeats) // 3, *repeats, *parts]
    keys = prefix(graph.key)
    answered = await call(graph, "postings_append", args, [
        keys + "seqof", keys + "junk", keys + "stats",
        *(term_key(graph.key, term) for term in terms)])
    return {int(i) for i in answered[1:]}


async def settle(graph: Any, claims: list[Claim], written: set[str]) -> int:
    """The chunks' write has run: the claims of chunks it wrote are kept, the others (their
    memory was deleted meanwhile: the write wrote nothing) forgotten. How many were."""
    gone = 0
    for start in range(0, len(claims), SCRIPT_CHUNKS):
        args: list[Any] = ["settle"]
        for chunk_id, number in claims[start : start + SCRIPT_CHUNKS]:
            args += [chunk_id, number, int(chunk_id in written)]
        gone += int(await call(graph, "postings_forget", args))
    return gone


async def index_written(graph: Any, counted: list[Counted]) -> None:
    """The postings of chunks the graph holds already (an import's, the migration's, those a
    delete found another ingest's): numbered and settled at once."""
    claims = await write_postings(graph, counted)
    await settle(graph, claims, {chunk_id for chunk_id, _ in claims})


async def forget(graph: Any, chunks: list[tuple[str, str]]) -> None:
    """Before chunks, (chunk id, text) each, are deleted: uncount them, drop their numbers."""
    for start in range(0, len(chunks), SCRIPT_CHUNKS):
        args: list[Any] = ["read"]
        for chunk_id, counts, length in counts_of(chunks[start : start + SCRIPT_CHUNKS]):
            args += [chunk_id, length, " ".join(counts)]
        await call(graph, "postings_forget", args)


def counts_of(chunks: list[tuple[str, str | None]]) -> list[Counted]:
    """Each chunk's id, the stems of its words the keyword signal matches with their counts
    (as a question's words become terms: services/query/keyword.py), and its length in
    words (count_words's, from the same split: the workers store it on the chunk too; a
    chunk without text: none)."""
    out = []
    for chunk_id, text in chunks:
        words = WORD.findall((text or "").lower())
        out.append((chunk_id, Counter(stem(w) for w in words if worth_matching(w)),
                    min(len(words), MAX_COUNT)))
    return out


async def term_sizes(graph: Any, terms: list[str]) -> list[int]:
    """How many live chunks hold each term (BM25's document frequency)."""
    return [int(size or 0) for size in await answer(graph.raw.hmget(prefix(graph.key) + "df",
                                                                     terms))]


async def read_terms(graph: Any, terms: list[str]
                     ) -> tuple[list[np.ndarray], float, np.ndarray, int]:
    """Each term's postings (RECORD arrays), the average length of a live chunk, which
    numbers are dead (a bool a number, as far as any was deleted), and the compaction's
    epoch: read before the dead numbers, which are read before the terms, so a number not
    dead then had no record of an earlier chunk left (the compaction frees a number only
    once no term holds one: compaction.py)."""
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    pipe.hget(keys + "stats", "epoch")
    pipe.hlen(keys + "seqof")
    pipe.get(keys + "words")
    pipe.get(keys + "dead")
    for term in terms:
        pipe.get(term_key(graph.key, term))
    epoch, chunks, words, dead, *blobs = await answer(pipe.execute())
    return ([np.frombuffer(blob or b"", RECORD) for blob in blobs],
            int(words or 0) / max(int(chunks), 1),
            np.unpackbits(np.frombuffer(dead or b"", np.uint8)).astype(bool), int(epoch or 0))


async def live_chunks(graph: Any, seqs: list[int]) -> tuple[list[str], int]:
    """The chunk id behind each number, or "" where the number is no longer its chunk's (it
    was deleted; its id may since be written again under another number), and the
    compaction's epoch after: if it moved since the terms were read, a number may have been
    freed and given to another chunk meanwhile (read again)."""
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    for seq in seqs:
        pipe.getrange(keys + "chunks", seq * SLOT, seq * SLOT + SLOT - 1)
    ids = [raw.rstrip(b"\0").decode() for raw in await answer(pipe.execute())]
    pipe = graph.raw.pipeline(transaction=False)
    if ids:
        pipe.hmget(keys + "seqof", ids)
    pipe.hget(keys + "stats", "epoch")
    *owners, epoch = await answer(pipe.execute())
    return [chunk if owner is not None and int(owner) == seq else ""
            for seq, chunk, owner in zip(seqs, ids, owners[0] if ids else [], strict=True)
            ], int(epoch or 0)


# version 5's step (shared/store/migrate.py): node ids a page, from a cursor in Redis
PAGE_IDS = 2_000
PROGRESS_S = 60
LOCK_MS = 60_000


async def backfill(graph: Any) -> int:
    """The postings of every chunk written before there were any, a page of node ids at a
    time from a cursor kept beside them, so a migration cut short goes on where it stopped
    (CLAIM numbers a chunk of the page it was in once). Workers that start together wait for
    the one holding the lock (a holder that died frees it after LOCK_MS). The chunks read."""
    keys, token = prefix(graph.key), uuid.uuid4().hex
    while not await answer(graph.raw.set(keys + "backfill:lock", token, nx=True, px=LOCK_MS)):
        await asyncio.sleep(1)
    try:
        rows = await run(graph, cypher_schema.MAX_CHUNK_NODE, read_only=True)
        last = int(rows[0][0]) if rows and rows[0][0] is not None else -1
        start = int(await answer(graph.raw.get(keys + "backfill")) or 0)
        done, shown = 0, time.monotonic()
        while start <= last:
            page = await run(graph, cypher_schema.CHUNKS_BY_NODE,
                             {"from": start, "to": start + PAGE_IDS}, read_only=True)
            await index_written(graph, counts_of([(chunk_id, text) for chunk_id, text in page]))
            start += PAGE_IDS
            pipe = graph.raw.pipeline(transaction=False)
            pipe.set(keys + "backfill", start)
            pipe.pexpire(keys + "backfill:lock", LOCK_MS)
            await answer(pipe.execute())
            done += len(page)
            if time.monotonic() - shown > PROGRESS_S:
                shown = time.monotonic()
                log.info("%s: keyword postings of %d chunks written (node %d of %d)",
                         graph.key, done, start, last)
        return done
    finally:
        await call(graph, "release_lock", [token], [keys + "backfill:lock"])
