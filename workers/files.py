"""ingest_path's files task: walk the path, read each file, and add it the way every add is
queued (shared/tasks/adds.py), with the rules of ``zapomni ingest``: a file whose bytes are stored
already for its source (metadata ``file_sha256`` of a memory from the same root) is left
alone; a changed one is added anew and its old memory deleted.

A job reads files for SLICE_SECONDS, then passes the rest on to a continuation
that walks on after the last file it read (a cursor in the walk's fixed order, not a
position: folders before it are not walked again, and files added or removed behind it
move nothing ahead of it) with the counts so far; so a slice that runs again writes the
same counts, and adds what it adds again as duplicates (no-ops). A file added behind the
cursor is left to the next run, as one added to a folder the walk has passed. The record
shows files done of found and the counts (FileCounts); a cancel is seen before the next
file.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import msgspec

from zapomni.shared.protocol import policy
from zapomni.shared.protocol.api import AddMemory
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.jobs import MAX_SKIPS_SHOWN, FileCounts, FilesJob, SkippedFile
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.store import deletes
from zapomni.shared.store.graphstore import meta_pair, namespace_exists, run
from zapomni.shared.tasks import adds, tasks
from zapomni.shared.tasks.queue import FILES, enqueue_files
from zapomni.shared.text.files import (
    MAX_FILES,
    Found,
    Loaded,
    Selection,
    Skipped,
    load_file,
    root_key,
    walk_files,
)
from zapomni.shared.text.roots import allowed_roots, inside
from zapomni.workers.outcome import SLICE_SECONDS, JobRun, progressed, task_job
from zapomni.workers.resources import Resources

# the current memories ingested from one root (meta_kv holds "root=<JSON path>"), by id
FILE_MEMORIES = """
MATCH (m:Memory) WHERE $root IN m.meta_kv AND m.superseded_by IS NULL AND m.id > $after
RETURN m.id, m.source, m.metadata ORDER BY m.id LIMIT $limit
"""
# whether a memory is stored whole: searchable (ready), or its ingest has not finished
MEMORY_READY = "MATCH (m:Memory {id: $id}) RETURN m.ready"
PAGE = 1000
PROGRESS_EVERY = 20  # files between progress writes


@task_job(FILES, FilesJob)
async def ingest_files(res: Resources, run: JobRun, job: FilesJob) -> str:
    run.outcome = await walk_slice(res, job)
    return run.outcome


async def walk_slice(res: Resources, job: FilesJob) -> str:
    roots = allowed_roots(res.settings.ingest_roots)
    root = Path(job.path)
    if not inside(root.resolve(), roots):  # the roots changed since the front checked
        return await end(res, job, job.counts, "failed", error="the path is no longer "
                         "inside ZAPOMNI_INGEST_ROOTS; nothing more was read")
    selection = Selection(include=tuple(job.include), exclude=tuple(job.exclude),
                          max_bytes=res.settings.ingest_max_file_bytes, within=roots)
    stored = await stored_files(res, job.namespace, root_key(root))
    counts, walked, started = job.counts, job.walked, time.monotonic()
    budget = SLICE_SECONDS
    for item in walk_files(root, selection, after=job.after, counted=job.walked):
        counts = await add_file(res, job, root_key(root), item, stored, counts)
        progressed()
        if counts.found % PROGRESS_EVERY == 0 and not await record(res, job, counts):
            return "cancelled"
        if isinstance(item, Found):  # a slice ends after a file: the cursor is its source
            walked += 1
            if time.monotonic() - started > budget:
                await enqueue_files(res.redis, res.settings, msgspec.structs.replace(
                    job, after=item.source, walked=walked, counts=counts))
                await record(res, job, counts)
                return "continued"
    return await end(res, job, counts, "done")


async def stored_files(res: Resources, namespace: str, key: str) -> dict[str, tuple[str, str]]:
    """source -> (memory id, file_sha256) of the memories from this root, paged by id."""
    if not await namespace_exists(res.store, namespace):
        return {}
    graph, found, after = res.store.graph(namespace), {}, ""
    while len(found) < MAX_FILES:
        rows = await run(graph, FILE_MEMORIES, {"root": meta_pair("root", key),
                                                "after": after, "limit": PAGE},
                         read_only=True)
        for memory_id, source, metadata in rows:
            sha = msgspec.json.decode(metadata or "{}").get("file_sha256", "")
            found[source] = (memory_id, sha)
        if len(rows) < PAGE:
            break
        after = rows[-1][0]
    return found


async def add_file(res: Resources, job: FilesJob, key: str, item: object,
                   stored: dict[str, tuple[str, str]], counts: FileCounts) -> FileCounts:
    counts = msgspec.structs.replace(counts, found=counts.found + 1)
    if not isinstance(item, Skipped):
        item = await asyncio.to_thread(load_file, item, key, res.settings.ingest_max_file_bytes)
    if isinstance(item, Skipped):
        return skip(counts, item.source, item.reason)
    assert isinstance(item, Loaded)
    old_id, old_sha = stored.get(item.source, ("", ""))
    if old_sha == item.metadata["file_sha256"]:
        return msgspec.structs.replace(counts, unchanged=counts.unchanged + 1)
    try:
        memory = decode_add_memory(item.text, item.metadata, job.namespace)
    except InvalidInput as exc:
        return skip(counts, item.source, exc.message)
    refused = refusal(res, memory)
    if refused:
        return skip(counts, item.source, refused)
    record, claim = await adds.claim_and_enqueue(res.redis, res.settings, memory)
    if claim.owner and not claim.state and not await stored_whole(res, record):
        # the task that claimed it is gone and left nothing searchable: take it over
        record, claim = await adds.claim_and_enqueue(res.redis, res.settings, memory,
                                                     gone=claim.owner)
    if claim.owner and (not old_id or old_id == record.memory_id):
        return skip(counts, item.source, "the same text as a file stored already (memory "
                                         f"{record.memory_id})")
    if not old_id:
        return msgspec.structs.replace(counts, added=counts.added + 1)
    await deletes.queue_delete(res.redis, res.settings, job.namespace, old_id,
                               f"waiting for a worker (replaced by {item.source} changed)")
    return msgspec.structs.replace(counts, replaced=counts.replaced + 1)


async def stored_whole(res: Resources, record: TaskRecord) -> bool:
    if not await namespace_exists(res.store, record.namespace):
        return False
    rows = await run(res.store.graph(record.namespace), MEMORY_READY,
                     {"id": record.memory_id}, read_only=True)
    return bool(rows) and rows[0][0] is True


def refusal(res: Resources, memory: AddMemory) -> str:
    """Why the namespace's write policy refuses the file, as it would at the front (a file
    has no thread: only a required or minimum confidence applies)."""
    rule = policy.rule_for(res.settings.write_policy, memory.namespace)
    return policy.judge_confidence(rule, memory) if rule is not None else ""


def skip(counts: FileCounts, source: str, reason: str) -> FileCounts:
    skips = counts.skips if len(counts.skips) >= MAX_SKIPS_SHOWN else \
        [*counts.skips, SkippedFile(source=source, reason=reason)]
    return msgspec.structs.replace(counts, skipped=counts.skipped + 1, skips=skips)


async def record(res: Resources, job: FilesJob, counts: FileCounts) -> bool:
    """Progress: files done of found so far; False once the task has ended (cancelled)."""
    moved = await tasks.move(res.redis, job.task_id, ttl=res.task_ttl, allowed=("running",),
                             done=counts.found, total=counts.found,
                             files=msgspec.json.encode(counts).decode(),
                             heartbeat_at=time.time(),
                             message=f"reading files: {counts.found} so far")
    return moved.ok


async def end(res: Resources, job: FilesJob, counts: FileCounts, state: str,
              error: str = "") -> str:
    summary = (f"{counts.found} files: {counts.added} added, {counts.unchanged} unchanged, "
               f"{counts.replaced} replaced, {counts.skipped} skipped; the memories are "
               "searchable once their ingest tasks are done (list_memories shows their state)")
    moved = await tasks.move(res.redis, job.task_id, state, ttl=res.task_ttl,
                             allowed=("running",), done=counts.found, total=counts.found,
                             files=msgspec.json.encode(counts).decode(),
                             finished_at=time.time(), message=summary, error=error)
    return state if moved.ok else "cancelled"
