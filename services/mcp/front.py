"""What the front does for each tool: validate (already done by the caller), enqueue writes,
read task records, forward reads. No model, no FalkorDB, no heavy work."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import msgspec
import redis.exceptions

from zapomni.services.mcp.forward import QueryClient
from zapomni.shared import metrics
from zapomni.shared.protocol import policy
from zapomni.shared.protocol.answers import MemoryRecord, PartsDone, Refused
from zapomni.shared.protocol.api import (
    AddMemory,
    AddReceipt,
    BuildGraph,
    DeleteReceipt,
    MemoryRef,
    TaskReceipt,
)
from zapomni.shared.protocol.errors import InvalidInput, NotFound, Unavailable
from zapomni.shared.protocol.ids import new_task_id
from zapomni.shared.protocol.jobs import GraphJob, IngestJob
from zapomni.shared.protocol.metadata import metadata_digest
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.settings import Settings
from zapomni.shared.store import deletes
from zapomni.shared.store.graphstore import refuses_writes
from zapomni.shared.tasks import adds, capacity, queue, tasks
from zapomni.shared.tasks.queue import BUILD_GRAPH, connect_queue

T = TypeVar("T")
REDIS_DOWN = "the queue (Redis) is unreachable; nothing was stored. Retry in a few seconds"
REDIS_FULL = ("the queue (Redis) cannot write: its disk is full or its memory limit is "
              "reached; nothing was stored. Retry once it has room")


class Front:
    """The front's live resources: a Redis pool for the queue and a query-service client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.redis = connect_queue(settings)
        self.query = QueryClient(settings.query_url, settings.request_timeout,
                                 settings.query_secret)
        self.task_ttl = tasks.TASK_TTL

    async def aclose(self) -> None:
        await self.query.aclose()
        await self.redis.aclose()


async def redis_call(front: Front, call: Awaitable[T]) -> T:
    """One bounded Redis round trip: down or slow Redis is a retryable error, not a hang."""
    try:
        async with asyncio.timeout(front.settings.request_timeout):
            return await call
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, TimeoutError,
            OSError):
        raise Unavailable(REDIS_DOWN) from None
    except redis.exceptions.ResponseError as exc:
        if refuses_writes(exc):
            raise Unavailable(REDIS_FULL) from None
        raise


async def check_capacity(front: Front, memories: list[AddMemory]) -> None:
    """Room for these adds' text in the queue, and for a job: a call of several adds is
    refused whole, before any is claimed (each add is checked again by the step that queues
    it: shared/tasks/adds.py)."""
    settings = front.settings
    depth = await redis_call(front, tasks.queue_depth(front.redis))
    queued = await redis_call(front, capacity.queued_bytes(front.redis))
    incoming = sum(len(m.text.encode()) + len(m.metadata_json) for m in memories)
    if depth + 1 > settings.max_queue_depth or queued + incoming > settings.max_queue_bytes:
        raise capacity.refusal(settings, [0 if depth + 1 > settings.max_queue_depth else -1,
                                          queued, depth])


async def add_memory(front: Front, memory: AddMemory) -> AddReceipt | Refused:
    """Queue ``memory`` for ingest, unless the namespace's write policy refuses it
    (shared/protocol/policy.py): then Refused, with no task and nothing queued. The thread's window
    counts only adds that are stored: one refused after it was counted gives its place
    back, and so does a duplicate."""
    rule = policy.rule_for(front.settings.write_policy, memory.namespace)
    if rule is None:
        return await store_memory(front, memory)
    ticket = new_task_id()
    reason = policy.judge_confidence(rule, memory) or await redis_call(
        front, policy.count_write(front.redis, rule, memory, ticket))
    if reason:
        metrics.REFUSALS.labels("policy").inc()
        return Refused(reason=reason, namespace=memory.namespace)
    try:
        receipt = await store_memory(front, memory)
    except BaseException:
        await _refund(front, rule, memory, ticket)
        raise
    if receipt.duplicate:
        await _refund(front, rule, memory, ticket)
    return receipt


async def _refund(front: Front, rule: policy.Rule, memory: AddMemory, ticket: str) -> None:
    """Give the thread's window its place back, bounded as every Redis call of the front;
    Redis away or slow: the place stays taken until the window passes (the add's own
    answer, or error, is what the client sees)."""
    with contextlib.suppress(Unavailable):
        await redis_call(front, policy.refund(front.redis, rule, memory, ticket))


async def store_memory(front: Front, memory: AddMemory) -> AddReceipt:
    now = time.time()
    record, claim = await redis_call(front, adds.claim_and_enqueue(front.redis, front.settings,
                                                                   memory))
    stored = None
    if claim.owner and not claim.state:  # the task that claimed it is gone
        stored = await _stored(front, MemoryRef(memory_id=record.memory_id,
                                                namespace=memory.namespace))
        if stored is None:  # and left nothing searchable: this add takes the memory over
            record, claim = await redis_call(front, adds.claim_and_enqueue(
                front.redis, front.settings, memory, gone=claim.owner))
    if claim.owner:
        return await _duplicate(front, memory, record.memory_id, claim, stored)
    metrics.ENQUEUE_SECONDS.observe(time.time() - now)
    return AddReceipt(memory_id=record.memory_id, task_id=record.task_id, status="queued",
                      duplicate=False, namespace=memory.namespace)


async def _stored(front: Front, ref: MemoryRef) -> MemoryRecord | None:
    """The memory as stored, if it is (searchable, or expired but not yet deleted); None
    when it is not, or only partly written."""
    try:
        found = await front.query.call("/v1/memory", ref, MemoryRecord)
    except NotFound:
        return None
    return None if found.status == "ingesting" else found


async def _duplicate(front: Front, memory: AddMemory, mid: str, claim: tasks.Claim,
                     stored: MemoryRecord | None) -> AddReceipt:
    """The text was added before: answered with the task that owns it, and nothing else
    happens (what is stored, or queued to be, is never changed or run again by a duplicate;
    a task and its job are one step, shared/tasks/adds.py, so there is no lost job to bring
    back). While a delete of it is under way, the add is refused until the delete is done.
    ``stored``: the memory, read already."""
    if claim.kind == "delete" and claim.state in tasks.ACTIVE:
        raise Unavailable(f"memory {mid} is being deleted (task {claim.owner}); nothing was "
                          "stored. Add it again once that task is done, in a few seconds")
    found = await redis_call(front, tasks.get_task(front.redis, claim.owner))
    state = found.state if found else "done"
    receipt = AddReceipt(memory_id=mid, task_id=claim.owner, duplicate=True, status=state,
                         namespace=memory.namespace)
    if await _metadata_differs(front, memory, mid, found, stored):
        return msgspec.structs.replace(receipt, metadata_changed=True, message=KEPT_METADATA)
    return receipt


KEPT_METADATA = ("this text is stored already; the stored metadata was kept. Call "
                 "update_memory(memory_id, metadata=...) to change it")


async def _metadata_differs(front: Front, memory: AddMemory, mid: str,
                            owner: TaskRecord | None, stored: MemoryRecord | None) -> bool:
    """Whether the metadata of an add differs from the stored memory's: the digest its
    ingest (or an update) recorded, or, once that record has expired, the memory as read
    (``stored``, when read already). Unknown (not yet written, or unreadable now): no."""
    if owner is not None and owner.meta_hash:
        return owner.meta_hash != adds.digest(memory)
    if stored is not None:
        return metadata_digest(stored.tags, stored.source, stored.metadata) != \
            adds.digest(memory)
    try:
        stored = await front.query.call("/v1/memory", MemoryRef(memory_id=mid,
                                                                 namespace=memory.namespace),
                                        MemoryRecord)
    except (NotFound, Unavailable):
        return False
    return metadata_digest(stored.tags, stored.source, stored.metadata) != adds.digest(memory)


async def add_memories(front: Front, memories: list[AddMemory],
                       progress: Callable[[int], Awaitable[None]] | None = None
                       ) -> list[AddReceipt | Refused]:
    """Queue each memory in turn; ``progress(n)`` after each (n answered so far)."""
    await check_capacity(front, memories)
    receipts: list[AddReceipt | Refused] = []
    for memory in memories:
        receipts.append(await add_memory(front, memory))
        if progress is not None:
            await progress(len(receipts))
    return receipts


async def task_status(front: Front, task_id: str) -> TaskRecord:
    record = await redis_call(front, tasks.get_task(front.redis, task_id))
    if record is None:
        raise unknown_task(front, task_id)
    return record


def unknown_task(front: Front, task_id: str) -> NotFound:
    """The answer for a task id with no record, and for one outside the caller's scope
    (services/mcp/scope.py): the same words."""
    return NotFound(f"task_id: {task_id} not found (task records are kept "
                    f"{tasks.TASK_TTL_DAYS} days)")


async def get_memory(front: Front, ref: MemoryRef) -> MemoryRecord:
    """The memory as stored, or, before its ingest has written it (queued, or being
    chunked), as added: from its task record and the job arq holds (Redis only). Not found
    when no ingest of it is under way."""
    try:
        return await front.query.call("/v1/memory", ref, MemoryRecord)
    except NotFound:
        record = await _owning_ingest(front, ref)
        if record is not None and record.state == "done":  # written meanwhile: read again
            return await front.query.call("/v1/memory", ref, MemoryRecord)
        job = None
        if record is not None and record.state in tasks.ACTIVE:
            job = await redis_call(front, adds.pending_job(front.redis, record))
        if record is None or job is None:
            raise
        return pending_memory(record, job)


async def _owning_ingest(front: Front, ref: MemoryRef) -> TaskRecord | None:
    owner = await redis_call(front, tasks.owner_task(front.redis, ref.namespace,
                                                     ref.memory_id))
    record = await redis_call(front, tasks.get_task(front.redis, owner)) if owner else None
    return record if record is not None and record.kind == "ingest" else None


def pending_memory(record: TaskRecord, job: IngestJob) -> MemoryRecord:
    """A memory not written yet, as get_memory shows it: status "queued" until a worker
    takes its job, then "ingesting"; its parts once it is split into more than one."""
    parts = (PartsDone(done=record.done, total=record.total)
             if record.parts_at and record.total > 1 else msgspec.UNSET)
    return MemoryRecord(
        memory_id=job.memory_id, namespace=job.namespace, text=job.text, tags=job.tags,
        source=job.source, metadata=msgspec.json.decode(job.metadata_json),
        created_at=iso_seconds(job.created_at),
        occurred_at=iso_seconds(job.created_at if job.occurred_at is None else job.occurred_at),
        chunk_count=record.chunks, status="queued" if record.state == "queued" else "ingesting",
        parts=parts, task_id=record.task_id)


def iso_seconds(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


async def delete_memory(front: Front, ref: MemoryRef) -> DeleteReceipt:
    owner = await redis_call(front, tasks.owner_task(front.redis, ref.namespace, ref.memory_id))
    if owner is None:
        try:
            await front.query.call("/v1/memory", ref, dict)
        except NotFound:  # a delete again (the tool is idempotent): nothing changes
            return DeleteReceipt(
                memory_id=ref.memory_id, task_id=None, status="gone", namespace=ref.namespace,
                message=f"{ref.memory_id} is not stored in namespace '{ref.namespace}' "
                        "(deleted already, or never added); nothing to delete")
    task_id, state = await queue_delete(front, ref.namespace, ref.memory_id,
                                        "waiting for a worker")
    return DeleteReceipt(memory_id=ref.memory_id, task_id=task_id, status=state,
                         namespace=ref.namespace)


async def queue_delete(front: Front, namespace: str, memory_id: str, message: str, *,
                       cancelling: str = "") -> tuple[str, str]:
    """Take the memory over for a delete task and enqueue its job (shared/store/deletes.py):
    (task id, state). An ingest under way is cancelled in the same step (``cancelling``:
    only that ingest; then the task id is '' when it no longer owns the memory). A delete
    already under way is answered instead of a second one."""
    queued = await redis_call(front, deletes.queue_delete(
        front.redis, front.settings, namespace, memory_id, message, cancelling=cancelling))
    return queued.task_id, queued.state


async def build_graph(front: Front, request: BuildGraph) -> TaskReceipt:
    """Enqueue a graph task; the worker picks the chunks (the front never reads the graph).
    Its reservation checks the queue's limits (jobs and bytes) before anything is written."""
    now = time.time()
    scope = f"{len(request.memory_ids)} memories" if request.memory_ids else "the namespace"
    record = TaskRecord(task_id=new_task_id(), kind="graph", namespace=request.namespace,
                        created_at=now, message=f"waiting for a worker ({scope}"
                                                f"{', rebuild' if request.rebuild else ''})")
    job = GraphJob(task_id=record.task_id, namespace=request.namespace,
                   memory_ids=request.memory_ids, rebuild=request.rebuild)
    return await queue_task(front, record, BUILD_GRAPH, job)


async def queue_task(front: Front, record: TaskRecord, function: str, job: object
                     ) -> TaskReceipt:
    """A task the front starts with one job (graph, files, reembed): its record, its job
    under the task's id and the job's bytes, checked against the queue's limits, in one step
    (refused, retryable, with nothing written; shared/tasks/queue.py)."""
    await redis_call(front, queue.queue_task(front.redis, front.settings, record, function,
                                             job, bounded=True))
    return TaskReceipt(task_id=record.task_id, status="queued", namespace=record.namespace)


async def cancel_task(front: Front, task_id: str) -> TaskRecord:
    """Stop a queued or running task. A graph task stops before its next batch (what it
    wrote stays: whole batches). An ingest task is undone: a delete takes its memory over
    (in the same step that cancels it) and removes what its workers wrote, so the text can
    be added again. Deletes cannot be cancelled."""
    record = await task_status(front, task_id)
    if record.state not in tasks.ACTIVE:
        return record
    if record.kind == "delete":
        raise InvalidInput("task_id: a delete cannot be cancelled once accepted")
    if record.kind == "update":
        raise InvalidInput("task_id: an update cannot be cancelled once accepted (it is one "
                           "short write); update the memory again to change it back")
    if record.kind == "ingest":
        await queue_delete(front, record.namespace, record.memory_id,
                           "waiting for a worker (undoing a cancelled ingest)",
                           cancelling=task_id)
    else:
        await redis_call(front, tasks.move(front.redis, task_id, "cancelled",
                                           ttl=front.task_ttl, finished_at=time.time(),
                                           message="cancelled by request"))
    return await task_status(front, task_id)


async def ready(front: Front) -> bool:
    """Redis answers and so does the query service."""
    try:
        async with asyncio.timeout(front.settings.request_timeout):
            await front.redis.ping()
    except (redis.exceptions.RedisError, TimeoutError, OSError):
        return False
    return await front.query.healthy()
