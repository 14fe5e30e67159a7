"""The keyword pool: the chunks with the highest sum over the pool's terms of idf x FalkorDB's
term score, best first, ties by chunk id (what the pool query summed in FalkorDB), found
without reading every posting of every term with its score.

FalkorDB's full-text procedure has no top-k to push down: db.idx.fulltext.queryNodes takes a
label and a query and yields every match in the index's own order. So a term with more
postings than FIRST_READ is read best score first (ORDER BY score DESC LIMIT n: FalkorDB
sorts, n rows cross the wire) and only as deep as the pool needs, beside its members (the
node ids of all its postings, one string: ~0.1 us a posting to parse against ~5 us for a row
of cells). This is Fagin's threshold algorithm without random access (NRA), with the random
access FalkorDB does offer for the few chunks it must settle. The last score read of a term
bounds every posting of it not read; a chunk's sum has a known part and a bound (the bounds
of the terms it is a member of but whose prefix misses it), and a chunk no prefix holds is
bounded by the sum of the open terms' bounds. The pool is final when the ``over``-th best
known part is above that sum, and every chunk whose bound reaches it is known to the last
term (one a prefix misses is probed: its score in that term). Otherwise the prefixes that
bound too high are read four times deeper. Each chunk of the pool is summed in the terms'
order from the same scores, so the pool is the exhaustive sum's to the bit and the tie.

What is read is cached per (namespace, term) behind the namespace's write stamp (as
document frequencies are: services/query/frequencies.py), bounded in bytes. Then one query
reads the rows of the chosen chunks. A search with filters still sums in FalkorDB."""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

import numpy as np
from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.frequencies import StampedCache
from zapomni.shared.store import cypher_search
from zapomni.shared.store.graphstore import run_cells

# bytes held over all terms, oldest terms out first: a posting read with its score ~110 B
# (node id, chunk id, score), a member 4 (as much as 2M postings read whole took before)
CACHED_BYTES = 220_000_000
ROW_BYTES = 110
# a term's first read: its best postings; a term with fewer is read whole
FIRST_READ = 1_000
DEEPER = 4  # a prefix that bounds too high is read this many times deeper
# chunks probed in a term at once (a probe walks the term's postings once per chunk asked:
# FalkorDB's IN over a list); more: its prefix is read deeper instead
PROBED_AT_MOST = 64
# bounds are compared with this margin over the float sums (32 terms' rounding is < 1e-14)
MARGIN = 1e-9
Chosen = tuple[str, int, float, list[str]]  # chunk id, node id, sum, the pool terms it holds


class TermTop:
    """A term's postings read so far, best first (node ids, chunk ids, scores, aligned),
    whether that is all of them, the node ids of all its postings (its members, sorted), and
    its score in chunks probed beyond the prefix (None: it has none)."""

    __slots__ = ("chunk_ids", "complete", "members", "node_ids", "probed", "scores")

    def __init__(self, node_ids: np.ndarray, chunk_ids: np.ndarray, scores: np.ndarray,
                 complete: bool, members: np.ndarray | None = None,
                 probed: dict[int, tuple[str, float] | None] | None = None) -> None:
        self.node_ids, self.chunk_ids, self.scores = node_ids, chunk_ids, scores
        self.complete = complete
        self.members = np.sort(node_ids) if complete or members is None else members
        self.probed = probed or {}

    @property
    def bound(self) -> float:
        """No posting not read scores more."""
        return 0.0 if self.complete or not len(self.scores) else float(self.scores[-1])

    def with_probes(self, found: dict[int, tuple[str, float] | None]) -> TermTop:
        return TermTop(self.node_ids, self.chunk_ids, self.scores, self.complete,
                       self.members, self.probed | found)

    def size(self) -> int:
        return ROW_BYTES * (len(self.node_ids) + len(self.probed)) + (
            0 if self.complete else self.members.nbytes)


class Needs(NamedTuple):
    """What the pool waits for: terms to read deeper, chunks (node ids) to probe per term."""
    deeper: list[str]
    probes: dict[str, list[int]]


# (namespace, term) -> TermTop, bounded by the bytes held
CACHE = StampedCache(CACHED_BYTES, size=TermTop.size)


async def keyword_pool(graph: AsyncGraph, namespace: str, stamp: str,
                       weighted: list[list[Any]], df: dict[str, int], over: int,
                       cache: StampedCache = CACHE) -> list[Chosen]:
    """The first ``over`` chunks by sum of idf x score over the ``weighted`` [term, idf]
    pairs, at ``stamp`` (read before: a write in between leaves what is read under the old
    stamp); ``df``: each term's postings (a term with no more than FIRST_READ is read whole
    at once). Each round reads deeper or probes, and each grows what is known; after ROUNDS
    the terms still open are read whole, and the pool is then the sum over every posting."""
    words = [term for term, _ in weighted]
    tops = cache.get(namespace, stamp, words)
    read = await read_tops(graph, {w: FIRST_READ if df.get(w, 0) > FIRST_READ else None
                                   for w in words if w not in tops})
    tops |= read
    changed = set(read)
    for _ in range(ROUNDS):
        chosen, needs = top_pool(weighted, tops, over)
        if not needs.deeper and not needs.probes:
            break
        fetched = await settle(graph, tops, needs)
        tops |= fetched
        changed |= set(fetched)
    else:
        tops |= await read_tops(graph, {t: None for t in words if not tops[t].complete}, tops)
        changed = set(words)
        chosen, _ = top_pool(weighted, tops, over)
    cache.put(namespace, stamp, {t: tops[t] for t in changed})
    return chosen


async def settle(graph: AsyncGraph, tops: dict[str, TermTop], needs: Needs
                 ) -> dict[str, TermTop]:
    """Reads what ``needs`` asks: deeper prefixes, and probes; a term with more than
    PROBED_AT_MOST chunks to probe is read deeper instead."""
    probes = {t: nodes for t, nodes in needs.probes.items() if len(nodes) <= PROBED_AT_MOST}
    deeper = [*needs.deeper, *(t for t in needs.probes if t not in probes)]
    reading = read_tops(graph, {t: min(EVERY, DEEPER * len(tops[t].scores)) for t in deeper},
                        tops)
    if not probes:
        return await reading
    fetched, probed = await asyncio.gather(reading, probe(
        graph, {t: tops[t] for t in probes}, probes))
    return fetched | probed


# rounds of deeper reads and probes before the open terms are read whole (the exhaustive
# sum): SciFact's 300 questions at 100k chunks took 0-3 (1 for 80%), with every term or not
ROUNDS = 16
EVERY = 1 << 30  # a limit no term reaches (FalkorDB keeps a LIMIT's low 32 bits: 2^40 is 0)


async def read_tops(graph: AsyncGraph, limits: dict[str, int | None],
                    held: dict[str, TermTop] | None = None) -> dict[str, TermTop]:
    """Each term's best ``limit`` postings (None: all), one query a term, at once, and its
    members where ``held`` does not have them yet (a prefix that is not all of it)."""
    terms = list(limits)
    held = held or {}
    prefixes = [run_cells(graph, cypher_search.KEYWORD_TOP, {
        "term": t, "limit": EVERY if limits[t] is None else limits[t] + 1}) for t in terms]
    listed = [t for t in terms if t not in held and limits[t] is not None]
    lists = [run_cells(graph, cypher_search.KEYWORD_MEMBERS, {"term": t}) for t in listed]
    found = await asyncio.gather(*prefixes, *lists)
    members = {t: held[t].members for t in terms if t in held} | {
        t: as_members(rows) for t, rows in zip(listed, found[len(terms):], strict=True)}
    tops = {t: as_top(rows, limits[t], members.get(t))
            for t, rows in zip(terms, found[: len(terms)], strict=True)}
    for t in held.keys() & tops.keys():
        tops[t].probed = held[t].probed  # what was probed beyond the prefix stays known
    return tops


def as_top(rows: list[list[Any]], limit: int | None,
           members: np.ndarray | None = None) -> TermTop:
    """Rows of (node id, chunk id, score), best first; one more than ``limit`` says more."""
    complete = limit is None or len(rows) <= limit
    rows = rows if complete else rows[:limit]
    if not rows:
        return TermTop(np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0), complete)
    node, chunk, score = zip(*rows, strict=True)
    return TermTop(np.array(node, np.int64), np.array(chunk, object),
                   np.array(score, np.float64), complete, members)


def as_members(rows: list[list[Any]]) -> np.ndarray:
    """KEYWORD_MEMBERS' node ids, one string of decimals joined by commas, sorted (in 32
    bits where they fit: half the cache)."""
    text = rows[0][0] if rows else ""
    members = np.sort(np.array(text.split(","), np.int64)) if text else np.zeros(0, np.int64)
    return members.astype(np.int32) if len(members) and members[-1] < 1 << 31 else members


async def probe(graph: AsyncGraph, tops: dict[str, TermTop], probes: dict[str, list[int]]
                ) -> dict[str, TermTop]:
    """Each term's score in the chunks (node ids) asked, and none for those it is not in."""
    rows = await run_cells(graph, cypher_search.KEYWORD_PROBE, {
        "probes": [[term, nodes] for term, nodes in probes.items()]})
    found: dict[str, dict[int, tuple[str, float] | None]] = {
        term: dict.fromkeys(nodes) for term, nodes in probes.items()}
    for term, node, chunk_id, score in rows:
        found[term][node] = (chunk_id, score)
    return {term: tops[term].with_probes(found[term]) for term in probes}


class Known(NamedTuple):
    """What is known of the chunks any term's prefix or probe holds: their node ids (sorted),
    chunk ids, idf x score per term (0 where none or not known), where a term holds them
    (its members) and where its score there is known."""
    nodes: np.ndarray
    chunk_ids: np.ndarray
    parts: np.ndarray
    present: np.ndarray
    known: np.ndarray


def known_parts(weighted: list[list[Any]], tops: dict[str, TermTop]) -> Known:
    nodes, chunks, scores, columns = [], [], [], []
    for column, (term, _) in enumerate(weighted):
        top = tops[term]
        hits = [(n, v) for n, v in top.probed.items() if v is not None]
        nodes += [top.node_ids, np.array([n for n, _ in hits], np.int64)]
        chunks += [top.chunk_ids, np.array([v[0] for _, v in hits], object)]
        scores += [top.scores, np.array([v[1] for _, v in hits], np.float64)]
        columns.append(np.full(len(top.node_ids) + len(hits), column, np.int64))
    every, first, inverse = np.unique(np.concatenate(nodes), return_index=True,
                                      return_inverse=True)
    column = np.concatenate(columns)
    idf = np.array([weight for _, weight in weighted], np.float64)
    parts = np.zeros((len(every), len(weighted)))
    parts[inverse, column] = np.concatenate(scores) * idf[column]
    known = np.zeros(parts.shape, bool)
    known[inverse, column] = True
    present = known.copy()
    for column, (term, _) in enumerate(weighted):
        held = holds(tops[term].members, every)
        present[:, column] |= held
        known[:, column] |= ~held | tops[term].complete
        known[among(every, [n for n, v in tops[term].probed.items() if v is None]),
              column] = True
    return Known(every, np.concatenate(chunks)[first], parts, present, known)


def holds(members: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Which of ``nodes`` are in ``members`` (sorted)."""
    at = np.minimum(np.searchsorted(members, nodes), max(len(members) - 1, 0))
    return members[at] == nodes if len(members) else np.zeros(len(nodes), bool)


def among(every: np.ndarray, nodes: list[int]) -> np.ndarray:
    """Where those of ``nodes`` that are in ``every`` (sorted) are in it."""
    wanted = np.array(nodes, np.int64)
    return np.searchsorted(every, wanted)[holds(every, wanted)]


def top_pool(weighted: list[list[Any]], tops: dict[str, TermTop], over: int
             ) -> tuple[list[Chosen], Needs]:
    """The pool if what is read settles it, else what to read: see the module's text."""
    k = known_parts(weighted, tops)
    sums = np.zeros(len(k.nodes))
    for column in range(len(weighted)):  # in the terms' order, as FalkorDB sums them
        sums += k.parts[:, column]
    bounds = np.array([weight * tops[term].bound for term, weight in weighted])
    upper = (sums + (~k.known) @ bounds) * (1 + MARGIN)
    floor = np.partition(sums, len(sums) - over)[len(sums) - over] if len(sums) >= over else 0.0
    open_terms = [i for i, (term, _) in enumerate(weighted) if not tops[term].complete]
    if open_terms and (bounds[open_terms].sum() * (1 + MARGIN) >= floor or floor == 0):
        return [], Needs(deeper_terms(weighted, bounds, open_terms, floor), {})
    contenders = np.flatnonzero(upper >= floor)
    unsure = contenders[(~k.known[contenders]).any(axis=1)]
    if len(unsure):
        # the highest bounds first, ``over`` at most: once known, they raise the floor
        unsure = unsure[np.argsort(-upper[unsure], kind="stable")[:over]]
        unknown = ~k.known[unsure]
        return [], Needs([], {weighted[column][0]: k.nodes[unsure[unknown[:, column]]]
                              .tolist() for column in np.flatnonzero(unknown.any(axis=0))})
    best = sorted(zip((-sums[contenders]).tolist(), k.chunk_ids[contenders].tolist(),
                      contenders.tolist(), strict=True))[:over]
    return [(cid, int(k.nodes[at]), -neg, [weighted[c][0] for c in np.flatnonzero(
        k.present[at])]) for neg, cid, at in best], Needs([], {})


def deeper_terms(weighted: list[list[Any]], bounds: np.ndarray, open_terms: list[int],
                 floor: float) -> list[str]:
    """The open terms, highest bound first, until the bounds of the rest are below the
    floor: those must be read deeper for a chunk no prefix holds to be ruled out."""
    rest = bounds[open_terms].sum()
    chosen = []
    for i in sorted(open_terms, key=lambda i: -bounds[i]):
        chosen.append(weighted[i][0])
        rest -= bounds[i]
        if rest * (1 + MARGIN) < floor:
            break
    return chosen


def pool_rows(chosen: list[Chosen], rows: list[list[Any]], pool: int) -> list[list[Any]]:
    """The first ``pool`` chosen chunks that KEYWORD_POOL_ROWS found visible, in the chosen
    order, as the pool query returns them: memory id, chunk id, text, score, offsets, the
    terms matched, the stored word count. A row whose node now holds another chunk (freed by
    a delete since the postings were read, and reused) is left out."""
    found = {row[0]: row for row in rows}
    out = []
    for chunk_id, node, score, matched in chosen:
        row = found.get(node)
        if row is not None and row[2] == chunk_id:
            out.append([row[1], chunk_id, row[3], score, row[4], row[5], matched, row[6]])
            if len(out) == pool:
                break
    return out
