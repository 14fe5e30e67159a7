"""Fusion of the signals' ranked lists (standardised scores), folding of
overlapping chunks of one memory, and the per-result "why"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from zapomni.shared.protocol.answers import SignalMatch


@dataclass
class Candidate:
    row: list[Any]  # the hit row of the signal that found it first (see cypher_search._HIT)
    score: float = 0.0
    why: dict[str, SignalMatch] = field(default_factory=dict)
    also_matched: int = 0
    more: list[Candidate] = field(default_factory=list)  # its memory's matches past the cap
    outdated_by: str = ""  # a newer statement of the same thing (services/query/timeline.py)

    @property
    def memory_id(self) -> str:
        return self.row[0]

    @property
    def span(self) -> tuple[int, int]:
        return int(self.row[4]), int(self.row[5])


Ranked = dict[str, list[tuple[list[Any], float]]]


def gather(ranked: Ranked) -> dict[str, Candidate]:
    """Every chunk any signal found, with the rank and score each signal gave it."""
    by_chunk: dict[str, Candidate] = {}
    for signal, rows in ranked.items():
        for rank, (row, signal_score) in enumerate(rows, start=1):
            candidate = by_chunk.setdefault(row[1], Candidate(row=row))
            candidate.why[signal] = SignalMatch(rank=rank, score=round(signal_score, 6))
    return by_chunk


def ordered(by_chunk: dict[str, Candidate]) -> list[Candidate]:
    return sorted(by_chunk.values(), key=lambda c: (-c.score, c.row[1]))


@dataclass
class Context:
    """Conversation order around the candidates (services/query/search.py, context): for
    each candidate's memory, the memories added just before and after it to its thread;
    rows of such neighbours no signal found; and the weight of a neighbour's score."""

    links: dict[str, list[str]]
    rows: list[list[Any]]
    weight: float


def fuse_scores(ranked: Ranked, weights: dict[str, float], head: int,
                context: Context | None = None) -> list[Candidate]:
    """Score fusion: each signal's scores are standardised (z-score) over its best ``head``
    candidates; a chunk a signal ranked lower or did not return gets the z of that head's
    last one. The weighted mean of the z-scores goes through the normal CDF: 0.5 is an
    average candidate, 0.84 one standard deviation above. Unlike rank fusion this keeps how
    far apart the scores are, so a signal that is sure (one chunk far ahead) outweighs one
    that is not; the fixed head keeps the top of the list the same whatever the limit.
    With a ``context``, a chunk also gets ``context.weight`` times how far its best
    neighbour stands above the floor (an answer is found through the question before it)."""
    by_chunk = gather(ranked)
    total = sum(weights.get(signal, 1.0) for signal in ranked) or 1.0
    floor_total = 0.0
    for signal, rows in ranked.items():
        z, floor = standardise([score for _, score in rows[:head]])
        share = weights.get(signal, 1.0) / total
        floor_total += share * floor
        found = {row[1]: value for (row, _), value in zip(rows, z, strict=False)}
        for chunk_id, candidate in by_chunk.items():
            candidate.score += share * found.get(chunk_id, floor)
    if context is not None:
        add_context(by_chunk, context, floor_total)
    for candidate in by_chunk.values():
        candidate.score = round(0.5 * (1 + math.erf(candidate.score / math.sqrt(2))), 6)
    return ordered(by_chunk)


def add_context(by_chunk: dict[str, Candidate], context: Context, floor: float) -> None:
    """Raise each chunk by its best neighbour's lead over ``floor``, the score of a chunk no
    signal found. Neighbours' scores are read before any is raised: one step, no chains."""
    for row in context.rows:
        by_chunk.setdefault(row[1], Candidate(row=row, score=floor))
    rank: dict[str, int] = {}
    best: dict[str, float] = {}
    for position, candidate in enumerate(ordered(by_chunk), start=1):
        rank.setdefault(candidate.memory_id, position)
        best.setdefault(candidate.memory_id, candidate.score)
    lifts = {}
    for chunk_id, candidate in by_chunk.items():
        near = [m for m in context.links.get(candidate.memory_id, []) if best.get(m, floor) > floor]
        if near:
            neighbour = max(near, key=lambda m: best[m])
            lifts[chunk_id] = (context.weight * (best[neighbour] - floor), rank[neighbour])
    for chunk_id, (lift, neighbour_rank) in lifts.items():
        candidate = by_chunk[chunk_id]
        candidate.score += lift
        candidate.why["context"] = SignalMatch(rank=neighbour_rank, score=round(lift, 6))


def standardise(scores: list[float]) -> tuple[list[float], float]:
    """z-scores of one signal's candidates, and the value for a chunk it did not return."""
    if not scores:
        return [], 0.0
    # plain floats: statistics.pstdev is exact (Fractions) and cost ~1.5 ms per search
    mean = math.fsum(scores) / len(scores)
    spread = math.sqrt(math.fsum((score - mean) ** 2 for score in scores) / len(scores))
    if spread <= 1e-12 * max(1.0, abs(mean)):  # one candidate, or all tied: found beats
        return [1.0] * len(scores), -1.0      # not found, nothing more
    z = [(score - mean) / spread for score in scores]
    return z, min(z)


def single(signal: str, rows: list[tuple[list[Any], float]]) -> list[Candidate]:
    """One signal alone: its own order and score."""
    return [Candidate(row=row, score=round(score, 6),
                      why={signal: SignalMatch(rank=rank, score=round(score, 6))})
            for rank, (row, score) in enumerate(rows, start=1)]


def collapse(candidates: list[Candidate]) -> list[Candidate]:
    """Keep the best of overlapping chunks of one memory, as copies that count the ones
    folded into them (``also_matched``; a candidate whose count is already that is kept as it
    is: a copy costs ~7 µs, most candidates fold nothing, and a fused candidate is not changed
    after fusion). The candidates themselves are left as they are: search folds the same list
    more than once (graph seeds, context, the final list)."""
    kept: list[Candidate] = []
    folded: list[int] = []
    spans: dict[str, list[int]] = {}  # memory -> positions in kept
    for candidate in candidates:
        start, end = candidate.span
        holder = next((i for i in spans.get(candidate.memory_id, [])
                       if start < kept[i].span[1] and kept[i].span[0] < end), None)
        if holder is not None:
            folded[holder] += 1
            continue
        spans.setdefault(candidate.memory_id, []).append(len(kept))
        kept.append(candidate)
        folded.append(0)
    return [c if c.also_matched == n else replace(c, also_matched=n)
            for c, n in zip(kept, folded, strict=True)]


MORE_PER_HIT = 20  # further matches of one memory listed under its best result, at most


def share_page(candidates: list[Candidate], cap: int) -> list[Candidate]:
    """At most ``cap`` results per memory (0: no cap), so one big memory on the question's
    topic does not fill the page: its further matches are listed under its best result
    (``more``, in rank order) and the other memories move up. A best that gets such matches
    is a copy (with a list of its own to hold them), as in ``collapse``; the rest are kept as
    they are."""
    if cap <= 0:
        return candidates
    kept: list[Candidate] = []
    first: dict[str, int] = {}  # memory -> its best's position in kept
    count: dict[str, int] = {}
    for candidate in candidates:
        memory = candidate.memory_id
        seen = count.get(memory, 0)
        count[memory] = seen + 1
        if seen < cap:
            first.setdefault(memory, len(kept))
            kept.append(candidate)
            continue
        at = first[memory]
        if seen == cap:  # its first match past the cap
            kept[at] = replace(kept[at], more=[])
        if len(kept[at].more) < MORE_PER_HIT:
            kept[at].more.append(candidate)
    return kept
