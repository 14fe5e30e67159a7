"""The live resources of one worker process, built at arq start-up and closed at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from arq.connections import ArqRedis

from zapomni.shared.embedding.embed import (
    CACHE_DAYS,
    CACHE_MAX,
    CachedEmbedder,
    Embedder,
    make_embedder,
)
from zapomni.shared.protocol.errors import ZapomniError
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import migrate_store
from zapomni.shared.tasks import capacity, heartbeat, tasks
from zapomni.shared.text.chunking import Chunker, chunker_for
from zapomni.workers.extract import NICE, EntityModel

log = logging.getLogger(__name__)
# CPU priority of a worker process below the query service and the front: reads first.
# 50 clients searching while abstracts are added (./dev bench load, 2026-11-27): searches a
# second 11.9 at nice 0 -> 20.7 at 10 (25.3 idle), chunks written a second meanwhile 9.6 ->
# 5.7; at 19 ingest starved (0.4 chunks a second). docs/reliability.md, "Load"
WORKER_NICE = 10


@dataclass
class Resources:
    settings: Settings
    redis: ArqRedis
    store: GraphStore
    embedder: Embedder
    chunker: Chunker
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    heartbeat: asyncio.Task | None = None
    leases: asyncio.Task | None = None
    running: set[str] = field(default_factory=set)  # arq job ids this worker runs now

    @property
    def task_ttl(self) -> int:
        return tasks.TASK_TTL

    async def entity_model(self) -> EntityModel:
        """The spaCy pipeline, loaded on the first graph job (about a second), once per
        process; a worker that only embeds never pays for it."""
        which = self.settings.spacy_model
        async with _MODEL_LOCK:
            if which not in _MODELS:
                _MODELS[which] = await in_daemon_thread(EntityModel, which, NICE)
        return _MODELS[which]


_MODELS: dict[str, EntityModel] = {}


async def in_daemon_thread(fn, *args):
    """``asyncio.to_thread`` on a daemon thread: a worker told to stop while spaCy loads
    (seconds on a cold, busy machine) exits instead of waiting for the load."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(setter, value) -> None:
        if not future.done():
            setter(value)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(settle, future.set_exception, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, future.set_result, result)

    threading.Thread(target=run, name="zapomni-ner-load", daemon=True).start()
    return await future
_MODEL_LOCK = asyncio.Lock()


def reads_first(nice: int = WORKER_NICE) -> None:
    """Lower this worker process's CPU priority by ``nice``. Linux's autogroup scheduling (on
    by default) ranks a process's nice only against the processes of its own session, and
    `zapomni up` starts each child in a session of its own: a session's CPU share is set by its
    autogroup's nice, so that is set too, where this process leads its session (never a
    shell's, whose other programs would slow down with it)."""
    with contextlib.suppress(OSError):
        os.nice(nice)
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text(f"{nice}\n")


def resources(ctx: dict) -> Resources:
    return ctx["res"]


async def open_resources(ctx: dict, settings: Settings) -> None:
    embedder = CachedEmbedder(make_embedder(settings, worker=True),  # one thread a run
                              ctx["redis"], CACHE_DAYS * 86400, CACHE_MAX)
    res = Resources(
        settings=settings,
        redis=ctx["redis"],
        store=GraphStore(settings, max_connections=settings.max_jobs * 2 + 2),
        embedder=embedder,
        chunker=chunker_for(settings),
    )
    res.heartbeat = asyncio.create_task(beat(res), name="zapomni-worker-heartbeat")
    ctx["res"] = res
    try:  # what an older version stored, in the current shape (shared/store/migrate.py)
        migrated = await migrate_store(res.store)
    except ZapomniError as exc:  # FalkorDB away: each namespace is migrated before a write
        log.warning("could not migrate the stored namespaces at start-up: %s", exc.message)
    else:
        if migrated:
            log.info("migrated %d namespace(s) to the current stored shape", len(migrated))
    log.info("worker %s ready: embedder %s, queue %s", res.worker_id, embedder.name,
             capacity.QUEUE_NAME)


async def close_resources(ctx: dict) -> None:
    res: Resources | None = ctx.get("res")
    if res is None:
        return
    for loop_task in (res.heartbeat, res.leases):
        if loop_task is not None:
            loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_task
    with contextlib.suppress(Exception):
        await heartbeat.leave(res.redis, res.worker_id)
    await res.embedder.aclose()
    await res.store.aclose()


def close_models() -> None:
    """At process exit: stop NER between paragraphs, so exiting does not wait for it. (The
    model outlives one arq run: tests run many short-lived workers in one process.)"""
    for model in _MODELS.values():
        model.close()
    _MODELS.clear()


async def beat(res: Resources) -> None:
    """Keep this worker counted alive (shared/tasks/heartbeat.py) while it lives, and about once a
    minute (one worker of all) free the queue bytes of jobs that are gone
    (shared/tasks/capacity.py)."""
    while True:
        try:
            await heartbeat.beat(res.redis, res.worker_id)
            await capacity.reconcile(res.redis, gated=True, gate_seconds=60)
        except Exception as exc:  # Redis away: keep beating, counted again when it is back
            log.warning("worker heartbeat failed: %s", type(exc).__name__)
        await asyncio.sleep(heartbeat.WORKER_TTL / 3)
