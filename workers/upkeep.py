"""The periodic jobs, arq cron jobs that run one at a time over all workers:

- ``sweep_memories`` (every SWEEP_MINUTES): tasks whose job is gone are failed; memories left
  not searchable by a task that has ended are removed; expired memories are deleted.
- ``fold_access`` (every FOLD_SECONDS): search's access events into each memory's
  ``access_count`` and ``accessed_at``.
- ``compact_postings`` (each minute): the keyword postings' upkeep (shared/store/compaction.py).

The sweep and the compaction go round the namespaces in name order from where their last run
stopped (a cursor key), so every namespace is reached however many there are.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix

from zapomni.shared import metrics
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.store import access, compaction, cypher_lists, cypher_memories, deletes
from zapomni.shared.store.graphstore import (
    GRAPH_PREFIX,
    GraphStore,
    list_graphs,
    namespace_exists,
    run,
)
from zapomni.shared.tasks import capacity, tasks
from zapomni.workers.outcome import fail_task
from zapomni.workers.resources import Resources, resources
from zapomni.workers.store import undo_memory

log = logging.getLogger(__name__)

SWEEP = "sweep_memories"
SWEEP_PAGE = 500  # not-ready memories read per query (one page held at a time)
# namespaces swept per run: two reads each when there is nothing to do (~1 ms each), so a
# run of 10,000 stays well inside a job's time limit; the next run takes the next 10,000
MAX_NAMESPACES = 10_000
CURSOR_KEY = "zapomni:sweep:after"  # the namespace the last run ended at
EXPIRY_PAGE = 200  # expired memories read per query
MAX_EXPIRED_PER_RUN = 5_000  # deletes queued per sweep run, over every namespace


async def sweep_memories(ctx: dict) -> str:
    """An ingest or an import undoes its own writes when it fails or loses its memory, not
    when its worker dies at the wrong moment and its task then ends without another run: the
    sweep pages through each namespace's not-ready memories (every page: live ingests cannot
    hide ended ones behind them) and undoes those whose writing task has ended."""
    res = resources(ctx)
    jobless = await sweep_jobless(res)
    if jobless:
        log.warning("sweep failed %d tasks whose job was gone", jobless)
    names = await namespaces_after(res, CURSOR_KEY, MAX_NAMESPACES)
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
            f"{expired} deletes of expired memories; failed {jobless} tasks without a job")


async def namespaces_after(res: Resources, cursor_key: str, most: int | None = None
                           ) -> list[str]:
    """The namespaces in name order after the one ``cursor_key`` names, wrapping round."""
    names = sorted(name[len(GRAPH_PREFIX):] for name in await list_graphs(res.store)
                   if name.startswith(GRAPH_PREFIX))
    after = await res.redis.get(cursor_key)
    start = bisect.bisect_right(names, after.decode()) if after else 0
    return (names[start:] + names[:start])[:most]


async def sweep_namespace(res: Resources, namespace: str) -> int:
    graph = res.store.graph(namespace)
    before, after, removed = time.time(), "", 0
    while True:
        rows = await run(graph, cypher_memories.UNREADY, {"before": before, "after": after,
                                                          "limit": SWEEP_PAGE}, read_only=True)
        for memory_id, task_id in rows:
            record = await tasks.get_task(res.redis, task_id)
            if record is None or record.state in tasks.TERMINAL:  # ended, or expired
                await undo_memory(graph, memory_id, task_id)
                removed += 1
        if len(rows) < SWEEP_PAGE:
            return removed
        after = rows[-1][0]


# ---- tasks whose job is gone ----
# issue 51: 16 ingest tasks stayed "running ... retrying in 4s" for 55 minutes with an empty
# queue, after arq's own time limit ended their jobs. Whatever ends a job without its task
# (arq's limits, a worker dead on its last try, a job lost with Redis' data), this finds it.

# seconds since a task's last sign of life (created, started, a heartbeat) before it may be
# judged jobless: a job is enqueued in the step that writes its task, or, for the few written
# first (an update taken over, then read), within a request's time
JOBLESS_GRACE = 120
# an import's batches are queued by `zapomni import` as the queue makes room, and its graph
# once the memories are written: between the two it may hold no job for a while
DRIVEN_GRACE = {"import": 900}
JOBLESS_PAGE = 500  # active tasks read per round trip
MAX_JOBLESS_CHECKED = 50_000  # active tasks checked per sweep (the oldest first)
AGAIN = {"ingest": "add the text again", "delete": "delete the memory again",
         "update": "update the memory again", "graph": "call build_graph again",
         "files": "call ingest_path again", "import": "run zapomni import again",
         "reembed": "call reembed again"}


async def sweep_jobless(res: Resources) -> int:
    """Fail every active task that no job holds, twice in a row, whose last sign of life is
    older than its grace (an ingest's writes undone: the text may be added again); how
    many. A job's bytes stay reserved while arq holds it (shared/tasks/capacity.py), so the
    reservations name every live job, and a job's id names its task."""
    candidates = await jobless(res, await quiet_tasks(res))
    if candidates:  # a second look: a job handing its task on to the next while we read
        candidates = await jobless(res, candidates)
    for record in candidates:
        again = AGAIN.get(record.kind, "start it again")
        await fail_task(res, record.task_id, record.namespace, record.memory_id,
                        "its job is gone (it ended without finishing the task: a time limit, "
                        "a worker that stopped on every try, or a queue that lost it); "
                        f"{again}")
    return len(candidates)


async def quiet_tasks(res: Resources) -> list[TaskRecord]:
    """The queued and running tasks (oldest change first) whose last sign of life is older
    than their grace."""
    now, found = time.time(), []
    for state in tasks.ACTIVE:
        key, offset = tasks.state_key("*", state), 0
        while offset < MAX_JOBLESS_CHECKED:
            ids = await res.redis.zrangebyscore(key, "-inf", now - JOBLESS_GRACE,
                                                start=offset, num=JOBLESS_PAGE)
            async with res.redis.pipeline(transaction=False) as pipe:
                for task_id in ids:
                    pipe.hgetall(tasks.task_key(tasks.as_text(task_id)))
                raws = await pipe.execute()
            for raw in raws:
                record = tasks.record_of(raw)
                grace = DRIVEN_GRACE.get(record.kind, JOBLESS_GRACE) if record else 0
                if record is not None and record.state in tasks.ACTIVE and max(
                        record.created_at, record.started_at, record.heartbeat_at) < now - grace:
                    found.append(record)
            if len(ids) < JOBLESS_PAGE:
                break
            offset += JOBLESS_PAGE
    return found


async def jobless(res: Resources, records: list[TaskRecord]) -> list[TaskRecord]:
    """Those of ``records`` that no job holds: every reservation whose job arq still has
    names its task (the job id is the task's, or it and a suffix: a part, a continuation),
    and a batch of adds its members. A reservation whose job is gone holds nothing."""
    if not records:
        return []
    held: set[str] = set()
    cursor = 0
    while True:
        cursor, page = await res.redis.hscan(capacity.BYTES_KEY, cursor,
                                             count=capacity.PAGE)
        ids = [tasks.as_text(job_id) for job_id in page]
        async with res.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.exists(job_key_prefix + job_id)
                pipe.hkeys(capacity.BATCH_PREFIX + job_id)
            replies = await pipe.execute()
        for job_id, alive, members in zip(ids, replies[::2], replies[1::2], strict=True):
            if alive:
                held.add(job_id.split(":", 1)[0])
                held.update(tasks.as_text(member) for member in members)
        if not cursor:
            return [r for r in records if r.task_id not in held]


# ---- forgetting: memories past their expires_at ----

def expiry_text(expires_at: float) -> str:
    return "expired at " + datetime.fromtimestamp(float(expires_at), UTC).isoformat(
        timespec="seconds").replace("+00:00", "Z")


async def sweep_expired(redis: ArqRedis, store: GraphStore, settings: Settings,
                        namespaces: list[str], now: float) -> int:
    """Queue a delete task, saying when it expired, for every memory of ``namespaces``
    expired at ``now`` (search stops returning it the moment it expires:
    cypher_search.VISIBLE); how many. A page at a time, by id, at most MAX_EXPIRED_PER_RUN a
    run; the rest wait for the next. Never swept: a pinned memory, one still being ingested
    or being deleted, one whose text was added again since it was read."""
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
        rows = await run(graph, cypher_lists.EXPIRED, {"now": now, "after": after,
                                                       "limit": limit}, read_only=True)
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


# ---- the access fold ----
# The oldest events are read in batches (XRANGE), each namespace's share written in one
# statement (cypher_memories.FOLD_ACCESS), then what was read trimmed. Events, not consumer
# groups: a fold that dies after its write and before its trim leaves the events to the next
# run, and the namespace's watermark, moved by the statement that counts, makes that run skip
# what was counted; two folds at once count each event once for the same reason. Nothing is
# lost but what the stream's cap drops while no fold runs (STREAM_MAX, services/query/rank.py).

FOLD = "fold_access"
MAX_BATCHES = 20  # batches per run: a backlog is worked off over several runs
# a run every 30 s (a divisor of 60: evenly spaced runs): frequency counts are at most half a
# minute behind, and a fold is one statement per namespace and batch
FOLD_SECONDS = 30
FOLD_BATCH = 1000  # events read and written per fold step (up to MAX_BATCHES steps a run)


async def fold_access(ctx: dict) -> str:
    res = resources(ctx)
    folded = 0
    for _ in range(MAX_BATCHES):
        entries = await res.redis.xrange(access.STREAM, count=FOLD_BATCH)
        if not entries:
            break
        await fold_events(res, entries)
        await res.redis.xtrim(access.STREAM, minid=access.after(entries[-1][0]),
                              approximate=False)
        folded += len(entries)
        if len(entries) < FOLD_BATCH:
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


# ---- the keyword postings' upkeep ----
# In each namespace the claims a dead writer left unsettled are resolved against the graph,
# then the compaction runs its steps while the run has time. A cron, not a step after each
# delete: a pass rewrites every term holding junk, so its cost follows the namespace's
# vocabulary, not the delete at hand; on a timer it runs when due and in one place, deletes
# stay as fast, and the claims a dead writer leaves (which no later write may see) are found.

COMPACT = "compact_postings"
COMPACT_SECOND = 23  # each minute at this second (the sweep runs at 7, the fold every 30 s)
# seconds of work a run, at most: far below the job's time limit (120 s), and a minute's
# runs at most half of it (a pass's work comes in steps of a few ms to tens of ms)
RUN_SECONDS = 30.0
COMPACT_CURSOR_KEY = "zapomni:compact:after"  # the namespace the last run stopped at


async def compact_postings(ctx: dict) -> str:
    res = resources(ctx)
    deadline = time.monotonic() + RUN_SECONDS
    settled = steps = 0
    for name in await namespaces_after(res, COMPACT_CURSOR_KEY):
        if time.monotonic() >= deadline:
            break
        graph = res.store.graph(name)
        if not await compaction.needs_work(graph):
            continue
        settled += await compaction.reconcile(graph)
        steps += await compaction.compact(graph, seconds=deadline - time.monotonic())
        if time.monotonic() >= deadline:
            break  # the next run begins with this one again: its pass may not be done
        await res.redis.set(COMPACT_CURSOR_KEY, name)
    if settled or steps:
        log.info("postings upkeep: %d unsettled claims forgotten, %d compaction steps",
                 settled, steps)
    return f"{settled} unsettled claims forgotten, {steps} compaction steps"
