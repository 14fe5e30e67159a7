"""The keyword postings (shared/store/postings.py) kept to what the graph holds: their dead and
repeated records removed, the numbers of deleted chunks given to new ones, and the claims a
writer that died left unsettled resolved against the graph. Run by the workers in the
background (workers/compact.py), a bounded step at a time; searches read the postings
throughout (services/query/postings.py).

Junk: a record of a dead number (a chunk deleted, or a claim forgotten) or a second record
of a live chunk in one term (a write that ran again). Whatever makes junk counts it in that
term's entry of ``junk`` (the stems of a dead chunk are known where it dies: the text a
delete read, the stems kept with an unsettled claim; repeats where they are appended) and in
``stats`` (``junk`` records against ``live``, and ``dead`` numbers).

A pass: begun when the junk reaches GARBAGE_SHARE of the live records (or the dead numbers
that share of the live chunks), it takes the numbers dead then as its own (``purge``), scans
``junk`` (HSCAN, from a cursor in ``stats``) and rewrites each term it names without its junk,
then frees its numbers (``free``: the claim takes them first). Every term that held a record
of those numbers was in ``junk`` from their death until a rewrite after it, and no record of
a dead number is appended (postings_append.lua refuses it), so a freed number has no record
left anywhere: a chunk that gets it is never credited with another's words, and a namespace
never runs out of numbers. A rewrite keeps what was appended while it filtered (only appends
change a term, and one compactor at a time holds the namespace's lock, which every write of
a pass checks), and a search's GET sees the term before or after, both right; a search that
overlaps the freeing of numbers reads again (the epoch in ``stats``).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, NamedTuple

import numpy as np

from zapomni.shared.store import cypher_memories
from zapomni.shared.store.graphstore import answer, run
from zapomni.shared.store.postings import RECORD, SLOT, call, keys_of, prefix, term_key

log = logging.getLogger(__name__)

# a pass begins once junk is this share of the live records (or dead numbers of the live
# chunks): a search reads at most ~5% more than on a fresh store, the terms' bytes likewise,
# and a pass, which rewrites every term holding junk whole, removes at least a twentieth of
# what it rewrites (docs/benchmarks.md, "Postings that follow the live chunks")
GARBAGE_SHARE = 0.05
MIN_JUNK = 10_000  # junk records below which no pass begins (a small namespace: 80 KB)
MIN_DEAD = 1_000  # dead numbers likewise
PAGE_TERMS = 200  # junk's entries a step's scan reads
STEP_BYTES = 4 << 20  # term bytes read and written back in one script, at most (~ms each way)
FREE_BATCH = 5_000  # numbers freed a script
LOCK_MS = 60_000  # a compactor that died frees the namespace after this long
PEND_PAGE = 1_000  # unsettled claims read a reconcile
SEED_PAGE = 1_000  # terms a round trip of version 6's step


class LockLost(Exception):
    """Another compactor holds the namespace now (this one's lock expired)."""


class Stats(NamedTuple):
    passing: bool
    cursor: str
    live: int
    junk: int
    dead: int
    chunks: int


async def stats_of(graph: Any) -> Stats:
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    pipe.hmget(keys + "stats", ["pass", "cursor", "live", "junk", "dead"])
    pipe.hlen(keys + "seqof")
    (passing, cursor, live, junk, dead), chunks = await answer(pipe.execute())
    return Stats(passing == b"1", (cursor or b"0").decode(), int(live or 0), int(junk or 0),
                 int(dead or 0), int(chunks))


def due(stats: Stats) -> bool:
    """A pass is worth its rewrites: enough junk, or enough dead numbers to free."""
    return (stats.junk >= max(MIN_JUNK, GARBAGE_SHARE * stats.live)
            or stats.dead >= max(MIN_DEAD, GARBAGE_SHARE * stats.chunks))


async def compact(graph: Any, *, seconds: float | None = None, force: bool = False) -> int:
    """Run the namespace's compaction a step at a time: the pass under way, then those due,
    until none is or ``seconds`` have passed (``force``: begin one even if none is due, and
    run it to its end). Skipped while another compactor holds the namespace. Steps run."""
    keys, token = prefix(graph.key), uuid.uuid4().hex
    if not await answer(graph.raw.set(keys + "lock", token, nx=True, px=LOCK_MS)):
        return 0
    deadline = None if seconds is None else time.monotonic() + seconds
    steps = 0
    try:
        while deadline is None or time.monotonic() < deadline:
            state = await step(graph, token, force)
            if state == "idle":
                break
            force = force and state not in ("began", "scanned", "freed")
            steps += 1
    except LockLost:
        log.warning("%s: the postings' compaction lost its lock; another goes on", graph.key)
    finally:
        await call(graph, "release_lock", [token], [keys + "lock"])
    return steps


async def step(graph: Any, token: str, force: bool = False) -> str:
    """One bounded piece of a pass: begin one (if due), scan and rewrite a page of the terms
    holding junk, or free a batch of the pass's numbers. What it did."""
    stats = await stats_of(graph)
    cursor = stats.cursor
    if not stats.passing:
        if not (force or due(stats)):
            return "idle"
        await pass_script(graph, token, "begin")
        return "began"
    if cursor != "done":
        found, fields = await answer(graph.raw.hscan(prefix(graph.key) + "junk", int(cursor),
                                                     count=PAGE_TERMS))
        await rewrite(graph, token, [field.decode() for field in fields],
                      "done" if int(found) == 0 else str(found))
        return "scanned"
    return "freed" if await pass_script(graph, token, "free") == FREE_BATCH else "ended"


async def pass_script(graph: Any, token: str, mode: str) -> int:
    keys = prefix(graph.key)
    done = int(await call(graph, "compaction_pass", [token, LOCK_MS, mode, FREE_BATCH],
                          [*keys_of(graph), keys + "purge", keys + "lock"]))
    if done < 0:
        raise LockLost
    return done


async def rewrite(graph: Any, token: str, stems: list[str], cursor: str) -> None:
    """Rewrite these terms without their junk, STEP_BYTES of them a script; the last script
    moves the pass's cursor on."""
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    for stem in stems:
        pipe.strlen(term_key(graph.key, stem))
    sizes = await answer(pipe.execute()) if stems else []
    groups: list[list[str]] = [[]]
    held = 0
    for stem, size in zip(stems, sizes, strict=True):
        if groups[-1] and held + size > STEP_BYTES:
            groups.append([])
            held = 0
        groups[-1].append(stem)
        held += size
    for i, group in enumerate(groups):
        term_keys = [term_key(graph.key, stem) for stem in group]
        read = await call(graph, "compaction_read", group, [keys + "junk", *term_keys]) \
            if group else []
        dead = np.unpackbits(np.frombuffer(
            await answer(graph.raw.get(keys + "dead")) or b"", np.uint8)).astype(bool)
        args: list[Any] = [token, LOCK_MS, cursor if i == len(groups) - 1 else ""]
        for stem, junk, blob in zip(group, read[: len(group)], read[len(group):], strict=True):
            kept, removed = without_junk(blob, dead)
            args += [stem, len(blob), kept, int(junk), removed]
        if not int(await call(graph, "compaction_write", args,
                              [keys + "lock", keys + "junk", keys + "stats", *term_keys])):
            raise LockLost


def without_junk(blob: bytes, dead: np.ndarray) -> tuple[bytes, int]:
    """A term's records less those of dead numbers and repeats (the first of each number is
    kept, in the order written), and how many went."""
    records = np.frombuffer(blob, RECORD)
    seqs = records["seq"].astype(np.intp)
    if len(dead):
        alive = np.flatnonzero((seqs >= len(dead)) | ~dead[np.minimum(seqs, len(dead) - 1)])
    else:
        alive = np.arange(len(records))
    _, first = np.unique(seqs[alive], return_index=True)
    kept = records[alive[np.sort(first)]]
    return kept.tobytes(), len(records) - len(kept)


async def reconcile(graph: Any) -> int:
    """Claims left unsettled by a writer that died between numbering its chunks and settling
    them, resolved against the graph: a chunk there keeps its number; one whose chunk and
    memory are both gone is forgotten (its writer, if alive, would find nothing to write
    to). A claim whose memory is there but not yet its chunk is a writer's at work: left.
    A page of ``pend`` a call, from a cursor kept in ``stats``. How many were forgotten."""
    keys = prefix(graph.key)
    cursor = int(await answer(graph.raw.hget(keys + "stats", "pending")) or 0)
    cursor, found = await answer(graph.raw.hscan(keys + "pend", cursor, count=PEND_PAGE))
    await answer(graph.raw.hset(keys + "stats", "pending", cursor))  # the next page's
    numbers = [int(number) for number in found][:PEND_PAGE]
    if not numbers:
        return 0
    pipe = graph.raw.pipeline(transaction=False)
    for number in numbers:
        pipe.getrange(keys + "chunks", number * SLOT, number * SLOT + SLOT - 1)
    ids = [raw.rstrip(b"\0").decode() for raw in await answer(pipe.execute())]
    rows = await run(graph, cypher_memories.PENDING_WRITTEN, {"rows": [
        {"chunk": chunk, "memory": chunk.rsplit(":", 1)[0]} for chunk in ids]}, read_only=True)
    there = {chunk: (bool(has_chunk), bool(has_memory)) for chunk, has_chunk, has_memory in rows}
    args: list[Any] = ["settle"]
    for number, chunk in zip(numbers, ids, strict=True):
        has_chunk, has_memory = there.get(chunk, (False, False))
        if has_chunk or not has_memory:
            args += [chunk, number, int(has_chunk)]
    return int(await call(graph, "postings_forget", args)) if len(args) > 1 else 0


async def needs_work(graph: Any) -> bool:
    """Unsettled claims, a pass under way or one due (two reads)."""
    stats = await stats_of(graph)
    return stats.passing or due(stats) or bool(
        await answer(graph.raw.hlen(prefix(graph.key) + "pend")))


async def seed(graph: Any) -> int:
    """Version 6's step (shared/store/migrate.py): terms written before junk was counted
    may hold records of chunks deleted then, so each counts as holding junk once (the first
    pass reads every one), and the totals are counted from what is there. Runs again from
    the start if cut short. A namespace with no number dead (new, or never deleted from)
    has no such records: its terms are not scanned for (SCAN walks the server's every key).
    The terms seen."""
    keys = prefix(graph.key)
    records = terms = 0
    dead = int(await answer(graph.raw.bitcount(keys + "dead")))
    if dead:
        page: list[bytes] = []
        async for key in graph.raw.scan_iter(match=_glob(keys) + "t:*", count=SEED_PAGE):
            page.append(key)
            if len(page) == SEED_PAGE:
                records += await _seed_page(graph, page)
                terms, page = terms + len(page), []
        records += await _seed_page(graph, page)
        terms += len(page)
    live = 0
    async for _, count in graph.raw.hscan_iter(keys + "df", count=SEED_PAGE):
        live += int(count)
    await answer(graph.raw.hset(keys + "stats", mapping={
        "live": live, "junk": max(0, records - live), "dead": dead}))
    return terms


async def _seed_page(graph: Any, page: list[bytes]) -> int:
    """Each term of the page counted as holding junk (once); their records."""
    if not page:
        return 0
    keys = prefix(graph.key)
    pipe = graph.raw.pipeline(transaction=False)
    for key in page:
        pipe.strlen(key)
        pipe.hsetnx(keys + "junk", key.decode()[len(keys) + 2:], 1)
    sizes = (await answer(pipe.execute()))[::2]
    return sum(int(size) // RECORD.itemsize for size in sizes)


def _glob(text: str) -> str:
    """``text`` matched literally by SCAN's MATCH (a namespace's name may hold * ? [ ] \\)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)

