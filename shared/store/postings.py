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
the id behind each number (SLOT bytes at number x SLOT); ``seq`` the last number given;
``words`` the live chunks' words (BM25's average length); ``dead`` a bitmap of the numbers
deleted; ``backfill`` version 5's cursor.

A chunk is numbered once while it lives: CLAIM gives the number it has or a new one, and
counts its stems and words only then, in one script, so a job that runs again appends the
same postings again (the reader adds a chunk once per term) and counts nothing twice. A
delete (FORGET, before the chunk goes) uncounts it and marks its number dead; its postings
stay, and the reader leaves dead numbers out of the sums."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from typing import Any

import numpy as np
from redis.exceptions import LockError

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


def slot(chunk_id: str) -> bytes:
    name = chunk_id.encode()
    if len(name) > SLOT:
        raise ValueError(f"chunk id {chunk_id[:80]!r} is longer than {SLOT} bytes")
    return name.ljust(SLOT, b"\0")


# a chunk's id, the stems of its words the keyword signal matches with their counts, and
# its length in words (counts_of)
Counted = tuple[str, Counter[str], int]


async def write_postings(graph: Any, counted: list[Counted]) -> None:
    """Number the chunks (as counts_of counts them) and append their postings: one array of
    the batch's records, ordered by term and cut into each term's bytes, appended by one
    script. Against an APPEND a term in a pipeline and an argument a stem, the worker's CPU
    a chunk, counting included, 0.62 -> 0.26 ms, the server's 0.10 -> 0.11 ms (`./dev bench
    keyword_pool --write 3000`, 2026-11-28: the curve's workers spent 1.95 ms a chunk against
    1.06 before there were postings)."""
    keys = prefix(graph.key)
    for start in range(0, len(counted), SCRIPT_CHUNKS):
        batch = counted[start : start + SCRIPT_CHUNKS]
        seqs = await script(graph, CLAIM, batch)
        terms: dict[str, int] = {}
        which, records = [], []
        pipe = graph.raw.pipeline(transaction=False)
        for seq, (chunk_id, counts, length) in zip(seqs, batch, strict=True):
            for term, count in counts.items():
                which.append(terms.setdefault(term, len(terms)))
                records.append((seq, min(count, MAX_COUNT), length))
            pipe.setrange(keys + "chunks", seq * SLOT, slot(chunk_id))
        if terms:
            blob = np.array(records, RECORD)[np.argsort(which, kind="stable")].tobytes()
            sizes = np.bincount(which) * RECORD.itemsize
            parts = [blob[end - size : end] for end, size in
                     zip(np.cumsum(sizes).tolist(), sizes.tolist(), strict=True)]
            pipe.eval(APPEND, len(terms), *(term_key(graph.key, term) for term in terms),
                      *parts)
        await answer(pipe.execute())


async def forget(graph: Any, chunks: list[tuple[str, str]]) -> None:
    """Before chunks, (chunk id, text) each, are deleted: uncount them, drop their numbers."""
    for start in range(0, len(chunks), SCRIPT_CHUNKS):
        await script(graph, FORGET, counts_of(chunks[start : start + SCRIPT_CHUNKS]))


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


# KEYS: each term's postings; ARGV: the bytes each gets
APPEND = "for i = 1, #KEYS do redis.call('APPEND', KEYS[i], ARGV[i]) end return #KEYS"
# KEYS: seqof, df, seq, words, dead; ARGV: per chunk its id, length, and its stems joined by
# spaces (a stem has none). The document frequencies change once a stem a script (not a
# chunk): the append-only file gets every command a script runs, and the 1M curve's backfill
# wrote 2.6 GB of it at once a chunk
CLAIM = """
local out, counts, i = {}, {}, 1
while i <= #ARGV do
  local seq = redis.call('HGET', KEYS[1], ARGV[i])
  if not seq then
    seq = redis.call('INCR', KEYS[3])
    redis.call('HSET', KEYS[1], ARGV[i], seq)
    redis.call('INCRBY', KEYS[4], ARGV[i + 1])
    for stem in string.gmatch(ARGV[i + 2], '%S+') do
      counts[stem] = (counts[stem] or 0) + 1
    end
  end
  out[#out + 1] = tonumber(seq)
  i = i + 3
end
for stem, count in pairs(counts) do redis.call('HINCRBY', KEYS[2], stem, count) end
return out
"""
FORGET = """
local counts, gone, i = {}, 0, 1
while i <= #ARGV do
  local seq = redis.call('HGET', KEYS[1], ARGV[i])
  if seq then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('SETBIT', KEYS[5], seq, 1)
    redis.call('DECRBY', KEYS[4], ARGV[i + 1])
    for stem in string.gmatch(ARGV[i + 2], '%S+') do
      counts[stem] = (counts[stem] or 0) + 1
    end
    gone = gone + 1
  end
  i = i + 3
end
for stem, count in pairs(counts) do
  if redis.call('HINCRBY', KEYS[2], stem, -count) <= 0 then redis.call('HDEL', KEYS[2], stem) end
end
return {gone}
"""


async def script(graph: Any, source: str, counted: list[Counted]) -> list[int]:
    if not counted:
        return []
    keys = prefix(graph.key)
    args: list[Any] = []
    for chunk_id, counts, length in counted:
        args += [chunk_id, length, " ".join(counts)]
    return [int(x) for x in await answer(graph.raw.eval(
        source, 5, keys + "seqof", keys + "df", keys + "seq", keys + "words", keys + "dead",
        *args))]


async def term_sizes(graph: Any, terms: list[str]) -> list[int]:
    """How many live chunks hold each term (BM25's document frequency)."""
    return [int(size or 0) for size in await answer(graph.raw.hmget(prefix(graph.key) + "df",
                                                                     terms))]


async def read_terms(graph: Any, terms: list[str]
                     ) -> tuple[list[np.ndarray], float, np.ndarray]:
    """Each term's postings (RECORD arrays), the average length of a live chunk, and which
    numbers are dead (a bool a number, as far as any was deleted)."""
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    pipe.hlen(keys + "seqof")
    pipe.get(keys + "words")
    pipe.get(keys + "dead")
    for term in terms:
        pipe.get(term_key(graph.key, term))
    chunks, words, dead, *blobs = await answer(pipe.execute())
    return ([np.frombuffer(blob or b"", RECORD) for blob in blobs],
            int(words or 0) / max(int(chunks), 1),
            np.unpackbits(np.frombuffer(dead or b"", np.uint8)).astype(bool))


async def live_chunks(graph: Any, seqs: list[int]) -> list[str]:
    """The chunk id behind each number, or "" where the number is no longer its chunk's (it
    was deleted; its id may since be written again under another number)."""
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    for seq in seqs:
        pipe.getrange(keys + "chunks", seq * SLOT, seq * SLOT + SLOT - 1)
    ids = [raw.rstrip(b"\0").decode() for raw in await answer(pipe.execute())]
    if not ids:
        return []
    owners = await answer(graph.raw.hmget(keys + "seqof", ids))
    return [chunk if owner is not None and int(owner) == seq else ""
            for seq, chunk, owner in zip(seqs, ids, owners, strict=True)]


# version 5's step (shared/store/migrate.py): node ids a page, from a cursor in Redis
PAGE_IDS = 2_000
PROGRESS_S = 60
LOCK_MS = 60_000


async def backfill(graph: Any) -> int:
    """The postings of every chunk written before there were any, a page of node ids at a
    time from a cursor kept beside them, so a migration cut short goes on where it stopped
    (CLAIM numbers a chunk of the page it was in once). Workers that start together wait for
    the one holding the lock (a holder that died frees it after LOCK_MS). The chunks read."""
    keys = prefix(graph.key)
    # redis-py's lock: SET NX PX to take it, and a release that deletes it only while it is
    # still this holder's (a compare-and-delete script: a GET then a DEL deleted the lock of
    # the worker that took it over in between, once this one's had lapsed)
    lock = graph.raw.lock(keys + "backfill:lock", timeout=LOCK_MS / 1000, sleep=1.0)
    await answer(lock.acquire())
    try:
        rows = await run(graph, cypher_schema.MAX_CHUNK_NODE, read_only=True)
        last = int(rows[0][0]) if rows and rows[0][0] is not None else -1
        start = int(await answer(graph.raw.get(keys + "backfill")) or 0)
        done, shown = 0, time.monotonic()
        while start <= last:
            page = await run(graph, cypher_schema.CHUNKS_BY_NODE,
                             {"from": start, "to": start + PAGE_IDS}, read_only=True)
            await write_postings(graph, counts_of([(chunk_id, text) for chunk_id, text in page]))
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
        with contextlib.suppress(LockError):  # it lapsed: another holder's now, left alone
            await answer(lock.release())
