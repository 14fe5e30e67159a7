"""Ranking beyond relevance, and the record of use it needs.

``AccessLog``: after a search that returned something, one entry on the access stream
(shared/store/access.py) names the memories returned and the time. It is written by a task of its
own: the answer never waits for it and never fails because of it (a failure is counted and
logged at most once a minute). Workers fold the stream into each memory's ``access_count``
and ``accessed_at`` (workers/access.py): the query service never writes FalkorDB.

``rank="memory"``: the best candidates by relevance (more than asked for) are re-scored as
a weighted sum of four parts, each 0-1:

- relevance: the mode's score; hybrid is already 0-1, vector is a cosine (clamped), keyword
  and graph scores are divided by the best of the candidates;
- recency: 0.5 ** (age / half-life), the age counted from its event time (occurred_at: when
  what it says happened, by default when it was added) to the question's as_of (default
  now); a memory from after as_of is as recent as one from then. When a memory was last
  returned would favour an old fact returned often;
- frequency: how often search has returned it, count / (count + 5), saturating;
- importance: its metadata ``importance``, 0.5 when it has none.

The weights (WEIGHTS, shares that sum to 1) and each part's points are in
every hit's ``rank_parts``; the points sum to the score.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from falkordb.asyncio.graph import AsyncGraph
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from zapomni.services.query.fusion import Candidate
from zapomni.shared import metrics
from zapomni.shared.protocol.answers import RankPart
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.settings import Settings
from zapomni.shared.store import access, cypher_lists
from zapomni.shared.store.graphstore import run

log = logging.getLogger(__name__)

MAX_PENDING = 100  # access writes in flight (a connection each); past it, dropped and counted
QUIET_SECONDS = 60.0  # a failing access stream is logged at most once in this time
POOL = 30  # rank="memory" re-scores the best max(POOL, 3 x limit) candidates
FREQUENT = 5  # times returned at which frequency is 0.5
# rank="memory": shares of the score, and the days in which recency halves: a statement 30
# days older loses 0.15 of the score, which put the current of two kept facts first 0.913 of
# the time against relevance's 0.446 (docs/benchmarks.md, "Knowledge updates")
WEIGHTS = {"relevance": 0.4, "recency": 0.3, "frequency": 0.2, "importance": 0.1}
HALF_LIFE_DAYS = 30.0
# access events kept until a worker folds them (an entry of 10 ids takes about 0.3 KB: 6 MB);
# older ones are dropped when no fold runs for long
STREAM_MAX = 20_000
DAY = 86400.0


class AccessLog:
    """Writes access events to the stream, off the search's path; holds the writes in
    flight so that none is lost to the garbage collector and shutdown can wait for them."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.on = settings.access_tracking
        self.cap = STREAM_MAX
        self.pending: set[asyncio.Task] = set()
        self.failed = 0  # failures since the last one logged
        self.quiet_until = 0.0

    def record(self, namespace: str, memory_ids: list[str]) -> None:
        """Note that search returned these memories; returns at once."""
        if not self.on or not memory_ids:
            return
        if len(self.pending) >= MAX_PENDING:
            metrics.ACCESS_EVENTS.labels("dropped").inc()
            return
        task = asyncio.create_task(self.write(namespace, memory_ids, time.time()))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def write(self, namespace: str, memory_ids: list[str], at: float) -> None:
        try:
            await self.redis.xadd(access.STREAM, access.encode_event(namespace, memory_ids, at),
                                  maxlen=self.cap, approximate=True)
        except (redis_errors.RedisError, OSError) as exc:
            metrics.ACCESS_EVENTS.labels("failed").inc()
            self.complain(exc)
        else:
            metrics.ACCESS_EVENTS.labels("recorded").inc()

    def complain(self, exc: BaseException) -> None:
        self.failed += 1
        now = time.monotonic()
        if now < self.quiet_until:
            return
        log.warning("access tracking: %d search(es) not recorded (%s: %s); searches answer "
                    "as usual", self.failed, type(exc).__name__, str(exc)[:200])
        self.failed = 0
        self.quiet_until = now + QUIET_SECONDS

    async def aclose(self, grace: float = 2.0) -> None:
        """Let the writes in flight finish (at most ``grace`` seconds), cancel the rest."""
        if not self.pending:
            return
        _, late = await asyncio.wait(set(self.pending), timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)


def relevances(mode: str, candidates: list[Candidate]) -> list[float]:
    """Each candidate's relevance on 0-1: hybrid's score is, vector's cosine is clamped;
    keyword (BM25) and graph scores are divided by the best of the candidates."""
    if mode in ("hybrid", "vector"):
        return [min(1.0, max(0.0, c.score)) for c in candidates]
    best = max((c.score for c in candidates), default=0.0)
    return [max(0.0, c.score) / best if best > 0 else 0.0 for c in candidates]


def memory_parts(relevance: float, score: float, memory: list[Any], now: float,
                 half_life: float, weights: dict[str, float]) -> dict[str, RankPart]:
    """The four parts of one candidate. ``memory``: RANK_FIELDS' columns after the id;
    ``now``: the question's as_of."""
    occurred, importance, count = memory[4], memory[6], int(memory[7] or 0)
    age = max(0.0, now - float(occurred if occurred is not None else now))
    values = {"relevance": (relevance, score), "recency": (0.5 ** (age / half_life), age / DAY),
              "frequency": (count / (count + FREQUENT), count),
              "importance": (0.5 if importance is None else min(1.0, max(0.0, importance)),
                             importance)}
    return {name: RankPart(value=round(value, 6), weight=round(weights[name], 6),
                           points=round(weights[name] * value, 6),
                           basis=None if basis is None else round(float(basis), 6))
            for name, (value, basis) in values.items()}


def rank_pool(candidates: list[Candidate], limit: int) -> list[Candidate]:
    """The candidates rank="memory" re-scores: the best by relevance, more than asked for."""
    return candidates[:max(POOL, 3 * limit)]


async def read_memories(graph: AsyncGraph, pool: list[Candidate]) -> dict[str, list[Any]]:
    """The pool's memories: what shaping needs (MEMORY_FIELDS), then importance,
    access_count and accessed_at, in one read."""
    if not pool:
        return {}
    rows = await run(graph, cypher_lists.RANK_FIELDS, {"ids": sorted({c.memory_id for c in pool})},
                     read_only=True)
    return {row[0]: row[1:] for row in rows}


def rank_by_memory(pool: list[Candidate], memories: dict[str, list[Any]],
                   request: SearchRequest, now: float | None = None
                   ) -> tuple[list[Candidate], dict[str, dict[str, RankPart]]]:
    """The best ``request.limit`` of the pool re-scored (ties: the more relevant first),
    with each one's parts by chunk id. A candidate whose memory is gone is left out."""
    weights, half_life = WEIGHTS, HALF_LIFE_DAYS * DAY
    now = (request.as_of or time.time()) if now is None else now
    scored = []
    for candidate, relevance in zip(pool, relevances(request.mode, pool), strict=True):
        if candidate.memory_id not in memories:
            continue
        parts = memory_parts(relevance, candidate.score, memories[candidate.memory_id], now,
                             half_life, weights)
        score = round(sum(part.points for part in parts.values()), 6)
        scored.append((replace(candidate, score=score), parts, relevance))
    scored.sort(key=lambda item: (-item[0].score, -item[2], item[0].row[1]))
    kept = scored[:request.limit]
    return [c for c, _, _ in kept], {c.row[1]: parts for c, parts, _ in kept}
