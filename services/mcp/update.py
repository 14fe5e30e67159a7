"""update_memory at the front: read the memory through the query service, then change its
metadata in place (an update task) or store a new text as a new version (an ingest task that
supersedes it). The front never touches FalkorDB.

Metadata is a JSON merge patch at the top level (merge_metadata, below): each
key given replaces that key, a key set to null is removed, and the memory's metadata that
results is checked as add_memory checks it. The update task owns the memory while it runs
(shared/tasks/tasks.py): while another task writes, updates or deletes that memory the update is
refused with the task to wait for; a delete accepted later cancels it and wins.

A new text is added the way add_memory adds it (claim, capacity, thread), with the old
memory's metadata (patched) and ``supersedes``; the old version stays searchable until the
new one is, then search leaves it out (workers/ingest.py). It keeps the old version's event
time (``occurred_at``) unless the patch gives one: a correction of what a memory says does
not move when that happened, so history, recency and currency see the corrected turn where
the old one was (in a thread it is still added after the newest turn, the neighbour search
reads beside it); a fact that changed now is said with ``occurred_at``, or added as a new
memory, which currency orders by its time.

No change of the old version lands while its new version is made, or it would be lost (the
new version carries the metadata read before it): the new version takes the memory over, as
an update does, while it reads it and adds the new text, and leaves the new text's ingest
task under ``zapomni:version:{ns}:{memory_id}`` before it gives the memory back. Until that
task has ended, every update of the old version is refused with the task to wait for; once
it is done, the old version is superseded and refused as such. A delete still wins.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front, redis_call
from zapomni.shared.protocol.answers import MemoryRecord, Refused
from zapomni.shared.protocol.api import AddMemory, MemoryRef, UpdateMemory, UpdateReceipt
from zapomni.shared.protocol.errors import InvalidInput, Unavailable, shown
from zapomni.shared.protocol.ids import memory_id, new_task_id
from zapomni.shared.protocol.jobs import UpdateJob
from zapomni.shared.protocol.metadata import memory_metadata, metadata_digest
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.tasks import takeover, tasks
from zapomni.shared.tasks.queue import enqueue_update

BUSY = {"ingest": "written", "delete": "deleted", "update": "updated"}


async def update_memory(front: Front, request: UpdateMemory) -> UpdateReceipt:
    if request.text is not None and \
            memory_id(request.namespace, request.content_hash) != request.memory_id:
        return await new_version(front, request)
    if request.patch is None:  # the same text, nothing else: nothing to do
        current = await read_memory(front, request)
        return unchanged(current, "the text is the memory's own; nothing was changed")
    return await change_metadata(front, request)


async def read_memory(front: Front, request: UpdateMemory) -> MemoryRecord:
    """The memory as stored (NotFound: 'memory_id: ... not found in namespace ...')."""
    ref = MemoryRef(memory_id=request.memory_id, namespace=request.namespace)
    return await front.query.call("/v1/memory", ref, MemoryRecord)


def check_current(memory: MemoryRecord) -> None:
    """Only the current, searchable version of a memory is updated."""
    if memory.superseded_by:
        raise InvalidInput(f"memory_id: {memory.memory_id} is an older version, replaced by "
                           f"{memory.superseded_by}; update that one instead")
    if memory.status == "expired":
        raise InvalidInput(f"memory_id: {memory.memory_id} has expired (metadata expires_at "
                           f"{memory.metadata.get('expires_at')}) and is deleted soon; add the "
                           "text again to keep it")
    if memory.status != "ready":
        raise InvalidInput(f"memory_id: {memory.memory_id} is not searchable (its ingest did "
                           "not finish); add the text again instead")


def busy(memory: str, owner: str, kind: str) -> Unavailable:
    return Unavailable(f"memory {memory} is being {BUSY.get(kind, 'changed')} by task "
                       f"{owner}; nothing was changed. Try again once graph_status({owner}) "
                       "says done")


def merged_fields(memory: MemoryRecord, patch: dict[str, Any] | None) -> dict[str, Any]:
    """AddMemory's metadata fields for the memory's metadata with ``patch`` applied."""
    return memory_metadata(merge_metadata(memory.tags, memory.source, memory.metadata, patch))


def merge_metadata(tags: list[str], source: str, other: dict[str, Any],
                   patch: dict[str, Any] | None) -> dict[str, Any]:
    """A memory's metadata (tags, source, the other keys) with ``patch`` applied as a JSON
    merge patch at the top level: each key given replaces that key, a key set to null is
    removed. The thread cannot change: a memory's turn in its conversation stays where it
    is."""
    current = dict(other)
    if tags:
        current["tags"] = list(tags)
    if source:
        current["source"] = source
    merged = dict(current)
    if "expires_in" in (patch or {}):  # a new expiry, given as seconds from now
        merged.pop("expires_at", None)
    for key, value in (patch or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if merged.get("thread") != current.get("thread"):
        thread = current.get("thread")
        raise InvalidInput("metadata.thread: the thread of a memory cannot be changed (it is "
                           f"{shown(thread) if thread else 'none'}); add the text to the "
                           "other thread with add_memory")
    return merged


def unchanged(memory: MemoryRecord, message: str) -> UpdateReceipt:
    return UpdateReceipt(memory_id=memory.memory_id, task_id=None, status="unchanged",
                         namespace=memory.namespace, message=message)


# ---- a new text: a new version ----


def update_record(request: UpdateMemory, message: str) -> TaskRecord:
    """The task record with which an update takes its memory over."""
    return TaskRecord(task_id=new_task_id(), kind="update", namespace=request.namespace,
                      memory_id=request.memory_id, total=1, created_at=time.time(),
                      message=message)


def version_key(namespace: str, memory_id: str) -> str:
    """The ingest task of the new version being made of a memory (expires with the task
    records: a task that has ended, or is gone, holds nothing)."""
    return f"zapomni:version:{namespace}:{memory_id}"


async def new_version(front: Front, request: UpdateMemory) -> UpdateReceipt:
    """Take the memory over (as a metadata update does), read it, add the new text, leave
    the new text's task as the version under way, give the memory back."""
    hold = update_record(request, "making a new version")
    previous = await take(front, request, hold)
    try:
        old = await read_memory(front, request)
        check_current(old)
        # a new text corrects what the memory says: what it says happened when the old one
        # said (its event time), unless the patch says when. Taking the update's time made
        # an old fact corrected today the thread's newest turn (issue 51)
        # (given at add: in the metadata, exact; else it was the time added, to the second)
        kept = {} if "occurred_at" in old.metadata else {"occurred_at": old.occurred_at or None}
        patch = {**kept, **(request.patch or {})}
        memory = AddMemory(text=request.text or "", content_hash=request.content_hash,
                           namespace=request.namespace, supersedes=request.memory_id,
                           line_offset=request.line_offset, **merged_fields(old, patch))
        receipt = await ops.add_memory(front, memory)
        if not isinstance(receipt, Refused) and not receipt.duplicate:
            await redis_call(front, front.redis.set(
                version_key(request.namespace, request.memory_id), receipt.task_id,
                ex=front.task_ttl))
    finally:
        await untake_quietly(front, hold, previous)
    if isinstance(receipt, Refused):  # the namespace's write policy: nothing was stored
        return UpdateReceipt(memory_id=request.memory_id, task_id=None, status="refused",
                             namespace=request.namespace, message=receipt.reason)
    if receipt.duplicate:
        return UpdateReceipt(
            memory_id=receipt.memory_id, task_id=receipt.task_id, status=receipt.status,
            namespace=request.namespace, duplicate=True,
            message=f"this text is stored already (or being stored) as memory "
                    f"{receipt.memory_id}; no new version was made of {request.memory_id}")
    return UpdateReceipt(memory_id=receipt.memory_id, task_id=receipt.task_id,
                         status=receipt.status, namespace=request.namespace,
                         supersedes=request.memory_id)


async def version_under_way(front: Front, request: UpdateMemory) -> TaskRecord | None:
    """The ingest of a new version of the memory, while it runs."""
    task_id = await redis_call(front, front.redis.get(version_key(request.namespace,
                                                                  request.memory_id)))
    record = await redis_call(front, tasks.get_task(front.redis, task_id.decode())) \
        if task_id else None
    return record if record is not None and record.state in tasks.ACTIVE else None


# ---- metadata in place ----


async def change_metadata(front: Front, request: UpdateMemory) -> UpdateReceipt:
    """Take the memory over, read it (after taking it: no other update can land between
    the read and this one's write), patch its metadata and enqueue the job. Refused at any
    step: the memory goes back to its owner and nothing is left."""
    record = update_record(request, "waiting for a worker")
    previous = await take(front, request, record)
    try:
        current = await read_memory(front, request)
        check_current(current)
        fields = merged_fields(current, request.patch)
        digest = metadata_digest(fields["tags"], fields["source"], fields["metadata_json"])
        if digest == metadata_digest(current.tags, current.source, current.metadata):
            await redis_call(front, takeover.untake(front.redis, record, previous))
            return unchanged(current, "the memory has this metadata already; nothing was "
                                      "changed")
        await redis_call(front, tasks.move(front.redis, record.task_id, ttl=front.task_ttl,
                                           allowed=("queued",), meta_hash=digest))
        await redis_call(front, enqueue_update(front.redis, front.settings, update_job(
            record, fields)))
    except BaseException:
        await untake_quietly(front, record, previous)
        raise
    return UpdateReceipt(memory_id=request.memory_id, task_id=record.task_id,
                         status="queued", namespace=request.namespace)


async def take(front: Front, request: UpdateMemory, record: TaskRecord) -> str:
    """Make the update the memory's owner; return the task it was taken from. A memory
    nobody owns is read first (NotFound when it is not stored)."""
    taken = await redis_call(front, takeover.take_for_update(front.redis, record, front.task_ttl))
    if taken.code == 2:
        await read_memory(front, request)
        taken = await redis_call(front, takeover.take_for_update(front.redis, record,
                                                              front.task_ttl, unclaimed=True))
    if taken.code == 0:
        raise busy(request.memory_id, taken.owner, taken.kind)
    try:  # taken: a new version cannot start meanwhile, so this answer holds
        version = await version_under_way(front, request)
    except BaseException:
        await untake_quietly(front, record, taken.owner)
        raise
    if version is not None:
        await untake_quietly(front, record, taken.owner)
        raise Unavailable(
            f"memory {request.memory_id} is being replaced by a new version (memory "
            f"{version.memory_id}, task {version.task_id}); nothing was changed. Once "
            f"graph_status({version.task_id}) says done, update {version.memory_id} instead")
    return taken.owner


async def untake_quietly(front: Front, record: TaskRecord, previous: str) -> None:
    # Redis gone: the update's job was never enqueued, so it changes nothing
    with contextlib.suppress(Unavailable):
        await redis_call(front, takeover.untake(front.redis, record, previous))


def update_job(record: TaskRecord, fields: dict) -> UpdateJob:
    return UpdateJob(task_id=record.task_id, memory_id=record.memory_id,
                     namespace=record.namespace, tags=fields["tags"], source=fields["source"],
                     metadata_json=fields["metadata_json"], importance=fields.get("importance"),
                     memory_type=fields.get("memory_type", ""),
                     pinned=fields.get("pinned", False),
                     expires_at=fields.get("expires_at", 0.0),
                     occurred_at=fields.get("occurred_at"), role=fields.get("role", ""))

