"""The keyword postings' upkeep in the background (shared/store/compaction.py): an arq cron
job, one run at a time over all workers, that goes round the namespaces in name order from
where the last run stopped (``CURSOR_KEY``): in each, the claims a dead writer left unsettled
are resolved against the graph, then the compaction runs its steps while the run has time.

Why a cron and not a step after each delete: a pass rewrites every term holding junk, so its
cost follows the namespace's vocabulary, not the delete at hand; on a timer it runs when it
is due and in one place, deletes stay as fast as before, and the unsettled claims a dead
writer leaves (which no later write of that namespace may come to see) are found too.
"""

from __future__ import annotations

import bisect
import logging
import time

from zapomni.shared.store import compaction
from zapomni.shared.store.graphstore import GRAPH_PREFIX, list_graphs
from zapomni.workers.resources import resources

log = logging.getLogger(__name__)

COMPACT = "compact_postings"
COMPACT_SECOND = 23  # each minute at this second (the sweep runs at 7, the fold every 30 s)
# seconds of work a run, at most: far below the job's time limit (120 s), and a minute's
# runs at most half of it (a pass's work comes in steps of a few ms to tens of ms)
RUN_SECONDS = 30.0
CURSOR_KEY = "zapomni:compact:after"  # the namespace the last run stopped at


async def compact_postings(ctx: dict) -> str:
    res = resources(ctx)
    names = sorted(name[len(GRAPH_PREFIX):] for name in await list_graphs(res.store)
                   if name.startswith(GRAPH_PREFIX))
    after = await res.redis.get(CURSOR_KEY)
    start = bisect.bisect_right(names, after.decode()) if after else 0
    deadline = time.monotonic() + RUN_SECONDS
    settled = steps = 0
    for name in names[start:] + names[:start]:
        if time.monotonic() >= deadline:
            break
        graph = res.store.graph(name)
        if not await compaction.needs_work(graph):
            continue
        settled += await compaction.reconcile(graph)
        steps += await compaction.compact(graph, seconds=deadline - time.monotonic())
        if time.monotonic() >= deadline:
            break  # the next run begins with this one again: its pass may not be done
        await res.redis.set(CURSOR_KEY, name)
    if settled or steps:
        log.info("postings upkeep: %d unsettled claims forgotten, %d compaction steps",
                 settled, steps)
    return f"{settled} unsettled claims forgotten, {steps} compaction steps"
