"""Reciprocal rank fusion of the signals' ranked lists, folding of overlapping chunks of one
memory, and the per-result "why"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.messages import SignalMatch


@dataclass
class Candidate:
    row: list[Any]  # the hit row of the signal that found it first (see cypher._HIT)
    score: float = 0.0
    why: dict[str, SignalMatch] = field(default_factory=dict)
    also_matched: int = 0

    @property
    def memory_id(self) -> str:
        return self.row[0]

    @property
    def span(self) -> tuple[int, int]:
        return int(self.row[4]), int(self.row[5])


def fuse(ranked: dict[str, list[tuple[list[Any], float]]], weights: dict[str, float],
         k: int) -> list[Candidate]:
    """RRF: each signal adds weight / (k + rank). The result is scaled so that 1.0 means
    "ranked first by every signal that ran"."""
    by_chunk: dict[str, Candidate] = {}
    for signal, rows in ranked.items():
        weight = weights.get(signal, 1.0)
        for rank, (row, signal_score) in enumerate(rows, start=1):
            candidate = by_chunk.setdefault(row[1], Candidate(row=row))
            candidate.score += weight / (k + rank)
            candidate.why[signal] = SignalMatch(rank=rank, score=round(signal_score, 6))
    best = sum(weights.get(signal, 1.0) for signal in ranked) / (k + 1) or 1.0
    for candidate in by_chunk.values():
        candidate.score = round(candidate.score / best, 6)
    return sorted(by_chunk.values(), key=lambda c: (-c.score, c.row[1]))


def single(signal: str, rows: list[tuple[list[Any], float]]) -> list[Candidate]:
    """One signal alone: its own order and score."""
    return [Candidate(row=row, score=round(score, 6),
                      why={signal: SignalMatch(rank=rank, score=round(score, 6))})
            for rank, (row, score) in enumerate(rows, start=1)]


def collapse(candidates: list[Candidate]) -> list[Candidate]:
    """Keep the best of overlapping chunks of one memory; count the ones folded into it."""
    kept: list[Candidate] = []
    spans: dict[str, list[Candidate]] = {}
    for candidate in candidates:
        start, end = candidate.span
        holder = next((k for k in spans.get(candidate.memory_id, [])
                       if start < k.span[1] and k.span[0] < end), None)
        if holder is not None:
            holder.also_matched += 1
            continue
        spans.setdefault(candidate.memory_id, []).append(candidate)
        kept.append(candidate)
    return kept
