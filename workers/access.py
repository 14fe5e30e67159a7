"""The access fold: search's access events (shared/store/access.py) into each memory's
``access_count`` and ``accessed_at``.

An arq cron job (one run per tick over all workers, every FOLD_SECONDS) reads
the oldest events in batches (XRANGE, at most FOLD_BATCH at a time), writes
each namespace's share in one statement (cypher_memories.FOLD_ACCESS), then trims what it
read. Events, not consumer groups: a fold that dies after its write and before its trim
leaves the events to the next run, and the namespace's watermark, moved by the same
statement that counts, makes that run skip what was already counted; two folds at once
(a slow one overlapping the next tick) count each event once for the same reason. Nothing
is lost but what the stream's cap drops while no fold runs (STREAM_MAX, services/query/rank.py).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from zapomni.shared import metrics
from zapomni.shared.store import access, cypher_memories
from zapomni.shared.store.graphstore import namespace_exists, run
from zapomni.workers.resources import Resources, hook_for_tests, resources

log = logging.getLogger(__name__)

FOLD = "fold_access"
MAX_BATCHES = 20  # batches per run: a backlog is worked off over several runs
# a run every 30 s (a divisor of 60: evenly spaced runs): frequency counts are at most half a
# minute behind, and a fold is one statement per namespace and batch
FOLD_SECONDS = 30
FOLD_BATCH = 1000  # events read and written per fold step (up to MAX_BATCHES steps a run)


async def fold_access(ctx: dict) -> str:
    res = resources(ctx)
    batch = FOLD_BATCH
    folded = 0
    for _ in range(MAX_BATCHES):
        entries = await res.redis.xrange(access.STREAM, count=batch)
        if not entries:
            break
        await fold_events(res, entries)
        await hook_for_tests(res, "access_folded", entries)  # tests: a fold that dies here
        await res.redis.xtrim(access.STREAM, minid=access.after(entries[-1][0]),
                              approximate=False)
        folded += len(entries)
        if len(entries) < batch:
            break
    metrics.ACCESS_FOLDED.inc(folded)
    return f"folded {folded} access events"


async def fold_events(res: Resources, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> int:
    """Write one batch, a statement per namespace; returns the memories updated. A
    namespace that no longer exists is skipped (the statement would create its graph)."""
    by_namespace: dict[str, list[list[Any]]] = defaultdict(list)
    unreadable = 0
    for entry_id, fields in entries:
        event = access.decode_event(entry_id, fields)
        if event is None:
            unreadable += 1
            continue
        by_namespace[event.namespace].append([event.key, event.memory_ids, event.at])
    if unreadable:
        log.warning("access fold: %d stream entries were not access events; skipped",
                    unreadable)
    updated = 0
    for namespace, events in by_namespace.items():
        if await namespace_exists(res.store, namespace):
            rows = await run(res.store.graph(namespace), cypher_memories.FOLD_ACCESS,
                             {"events": events})
            updated += int(rows[0][0]) if rows else 0
    return updated
