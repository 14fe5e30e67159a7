"""The periodic sweep: tasks whose job is gone, memories left not searchable by a task that
has ended, and memories past their expires_at.

A task whose job is gone is failed with a reason that says what to do (issue 51: 16 ingest
tasks stayed "running ... retrying in 4s" for 55 minutes with an empty queue, after arq's
own time limit ended their jobs). A job's bytes stay reserved while arq holds it
(shared/tasks/capacity.py), so the reservations name every live job, and a job's id names its
task (the task's id, or the id and a suffix: a part, a continuation; a batch of adds holds
its members' tasks beside it). An active task that no reservation names, twice in a row,
whose last sign of life is older than ``JOBLESS_GRACE``, has no job: failed, and an ingest's
writes undone (the text may be added again). Whatever ends a job without its task
(arq's limits, a worker dead on its last try, a job expired or lost with Redis' data), this
finds it within one sweep.

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

from arq.constants import job_key_prefix

from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.store import cypher_memories
from zapomni.shared.store.graphstore import GRAPH_PREFIX, list_graphs, run
from zapomni.shared.tasks import capacity, tasks
from zapomni.workers.expiry import sweep_expired
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


async def sweep_memories(ctx: dict) -> str:
    res = resources(ctx)
    jobless = await sweep_jobless(res)
    if jobless:
        log.warning("sweep failed %d tasks whose job was gone", jobless)
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
            f"{expired} deletes of expired memories; failed {jobless} tasks without a job")


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
    """Fail every active task that no job holds (see the module's docstring); how many."""
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
    """Those of ``records`` that no job holds."""
    if not records:
        return []
    held = await held_tasks(res)
    return [r for r in records if r.task_id not in held]


async def held_tasks(res: Resources) -> set[str]:
    """The task ids the jobs arq holds carry: every reservation whose job arq still has
    names its task, and a batch of adds its members (as many as the queue's limits allow:
    a bounded read). A reservation whose job is gone (arq ended it without our code: it
    expired, or its tries were spent) holds nothing."""
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
            return held


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
