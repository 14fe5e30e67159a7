"""The periodic sweep: memories left not searchable by a task that has ended, and memories
past their expires_at.

An ingest or an import undoes its own writes when it fails or loses its memory, but not
when its worker dies at the wrong moment and its task then fails or expires without another
run. The sweep (an arq cron job, one run at a time over all workers) pages through each
namespace's not-ready memories, by id, and removes those whose writing task (the ingest or
import named on the memory) has ended or expired, with the same conditional undo an ingest
uses: a newer ingest of the same text that took the memory over keeps it. Then it queues a
delete task for each expired memory (workers/expiry.py).

Bounded: a page of ``SWEEP_PAGE`` memories at a time (every page is read: live ingests at
the front of the order cannot hide ended ones behind them), and ``MAX_NAMESPACES``
namespaces per run, in name order from where the last run ended (``CURSOR_KEY``), round
and round: every namespace is swept, however many there are.
"""

from __future__ import annotations

import bisect
import logging
import time

from zapomni.shared.store import cypher_memories
from zapomni.shared.store.graphstore import GRAPH_PREFIX, list_graphs, run
from zapomni.shared.tasks import tasks
from zapomni.workers.expiry import sweep_expired
from zapomni.workers.resources import Resources, resources
from zapomni.workers.store import undo_memory

log = logging.getLogger(__name__)

SWEEP = "sweep_memories"
SWEEP_PAGE = 500  # not-ready memories read per query (one page held at a time)
# namespaces swept per run: two reads each when there is nothing to do (~1 ms each), so a
# run of 10,000 stays well inside a job's time limit; the next run takes the next 10,000
MAX_NAMESPACES = 10_000
CURSOR_KEY = "zapomni:sweep:after"  # the namespace the last run ended at


async def sweep_memories(ctx: dict) -> str:
    res = resources(ctx)
    names = await namespaces_due(res)
    removed = 0
    for namespace in names:
        removed += await sweep_namespace(res, namespace)
    if removed:
        log.info("sweep removed %d memories left unfinished by ended tasks", removed)
    expired = await sweep_expired(res.redis, res.store, res.settings, names, time.time())
    if expired:
        log.info("sweep queued the delete of %d expired memories", expired)
    if names:
        await res.redis.set(CURSOR_KEY, names[-1])
    return (f"removed {removed} of {len(names)} namespaces' unfinished memories; queued "
            f"{expired} deletes of expired memories")


async def namespaces_due(res: Resources) -> list[str]:
    """The next ``MAX_NAMESPACES`` namespaces in name order after the one the last run
    ended at, wrapping round to the first."""
    names = sorted(name[len(GRAPH_PREFIX):] for name in await list_graphs(res.store)
                   if name.startswith(GRAPH_PREFIX))
    after = await res.redis.get(CURSOR_KEY)
    start = bisect.bisect_right(names, after.decode()) if after else 0
    return (names[start:] + names[:start])[:MAX_NAMESPACES]


async def sweep_namespace(res: Resources, namespace: str) -> int:
    graph = res.store.graph(namespace)
    before, after, removed = time.time(), "", 0
    while True:
        rows = await run(graph, cypher_memories.UNREADY, {"before": before, "after": after,
                                                 "limit": SWEEP_PAGE}, read_only=True)
        for memory_id, task_id in rows:
            if await ended(res, task_id):
                await undo_memory(graph, memory_id, task_id)
                removed += 1
        if len(rows) < SWEEP_PAGE:
            return removed
        after = rows[-1][0]


async def ended(res: Resources, task_id: str) -> bool:
    """The memory's writer has ended (or its record expired)."""
    record = await tasks.get_task(res.redis, task_id)
    return record is None or record.state in tasks.TERMINAL
