"""Forgetting: memories past their expires_at are deleted through the ordinary delete path.

Search, context and listing stop returning a memory the moment it expires (cypher_search.VISIBLE);
this part of the periodic sweep (workers/sweep.py) then deletes it, each with a delete task
whose message says when it expired (shared/store/deletes.py: the same steps as delete_memory).
Bounded: a page of expired memories at a time, by id, and at most ``MAX_EXPIRED_PER_RUN``
deletes queued per run over all namespaces; the rest wait for the next run. Never swept: a
pinned memory, one still being ingested (it waits for its ingest to end), one already being
deleted, and one whose text was added again since it was read (a newer ingest owns it).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from arq.connections import ArqRedis

from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_lists, deletes
from zapomni.shared.store.graphstore import GraphStore, run

log = logging.getLogger(__name__)

EXPIRY_PAGE = 200  # expired memories read per query
MAX_EXPIRED_PER_RUN = 5_000  # deletes queued per sweep run, over every namespace


def expiry_text(expires_at: float) -> str:
    return "expired at " + datetime.fromtimestamp(float(expires_at), UTC).isoformat(
        timespec="seconds").replace("+00:00", "Z")


async def sweep_expired(redis: ArqRedis, store: GraphStore, settings: Settings,
                        namespaces: list[str], now: float) -> int:
    """Queue a delete for every memory of ``namespaces`` expired at ``now`` (within the
    run's bound); how many were queued."""
    queued = 0
    for namespace in namespaces:
        if queued >= MAX_EXPIRED_PER_RUN:
            log.info("expiry sweep: %d deletes queued, the rest wait for the next run",
                     queued)
            break
        queued += await expire_namespace(redis, store, settings, namespace, now,
                                         MAX_EXPIRED_PER_RUN - queued)
    return queued


async def expire_namespace(redis: ArqRedis, store: GraphStore, settings: Settings,
                           namespace: str, now: float, budget: int) -> int:
    graph = store.graph(namespace)
    after = ""
    queued = 0
    while queued < budget:
        limit = min(EXPIRY_PAGE, budget - queued)
        rows = await run(graph, cypher_lists.EXPIRED, {"now": now, "after": after, "limit": limit},
                         read_only=True)
        for memory_id, task_id, expires_at in rows:
            why = expiry_text(expires_at)
            delete = await deletes.queue_delete(
                redis, settings, namespace, memory_id, f"waiting for a worker ({why})",
                seen=task_id, reason=why)
            queued += delete.new
        if len(rows) < limit:
            break
        after = rows[-1][0]
    return queued
