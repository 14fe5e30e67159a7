"""``zapomni-worker``: an arq worker for ingest, fan-out parts, deletes and graph tasks."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys

from arq.cron import cron
from arq.worker import Worker, func
from prometheus_client import start_http_server

from zapomni.shared.embedding import checksums
from zapomni.shared.logs import configure_logging
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, queue
from zapomni.workers import edits, files, graph, ingest, moves, outcome, upkeep
from zapomni.workers.__main__ import alive_here
from zapomni.workers.arq_internals import (
    JOB_LEASE,
    ZapomniWorker,
    job_started,
    set_claim_seconds,
    start_leases,
)
from zapomni.workers.extract import ModelMissing, check_model
from zapomni.workers.resources import (
    close_models,
    close_resources,
    open_resources,
    reads_first,
    resources,
)

log = logging.getLogger(__name__)


# seconds between a worker's polls of the queue: arq's 0.5 s default throttled throughput
# (a job waited up to half a second for its turn)
POLL_DELAY = 0.05
# how often a worker sweeps memories left unfinished by tasks that ended, and expired ones
SWEEP_MINUTES = 5


JOBS = [
    func(ingest.ingest_batch, name=queue.INGEST_BATCH),
    func(ingest.embed_part, name=queue.EMBED_PART),
    func(edits.delete_memory, name=queue.DELETE),
    func(graph.build_graph, name=queue.BUILD_GRAPH),
    func(graph.graph_part, name=queue.GRAPH_PART),
    func(edits.update_memory, name=queue.UPDATE),
    func(files.ingest_files, name=queue.FILES),
    func(moves.import_batch, name=queue.IMPORT),
    func(edits.reembed_chunks, name=queue.REEMBED),
]


def make_worker(settings: Settings, *, burst: bool = False, handle_signals: bool = True
                ) -> Worker:
    """The arq Worker with every value chosen on purpose (docs/configuration.md, "Values chosen
    by measurement")."""
    worker = ZapomniWorker(
        functions=JOBS,
        # one sweep at a time over all workers (arq's cron jobs have derived job ids)
        cron_jobs=[cron(upkeep.sweep_memories, name=upkeep.SWEEP, unique=True,
                        run_at_startup=False, minute=set(range(0, 60, SWEEP_MINUTES)), second=7),
                   cron(upkeep.fold_access, name=upkeep.FOLD, unique=True, run_at_startup=False,
                        second=set(range(0, 60, upkeep.FOLD_SECONDS))),
                   cron(upkeep.compact_postings, name=upkeep.COMPACT, unique=True,
                        run_at_startup=False, second=upkeep.COMPACT_SECOND)],
        redis_pool=queue.connect_queue(settings, max_connections=settings.max_jobs * 2 + 4),
        queue_name=capacity.QUEUE_NAME,
        job_serializer=queue.serialize,
        job_deserializer=queue.deserialize,
        on_startup=functools.partial(startup, settings=settings),
        on_shutdown=close_resources,
        on_job_start=job_started,
        after_job_end=release_job,
        burst=burst,
        handle_signals=handle_signals,
        max_jobs=settings.max_jobs,
        job_timeout=outcome.JOB_CEILING,  # ours fires first (workers/outcome.py)
        # one run more than ours: a job whose worker died on every try still reaches our
        # code once, which fails its task (outcome.py) instead of leaving it "running"
        max_tries=outcome.MAX_TRIES + 1,
        poll_delay=POLL_DELAY,
        keep_result=60,  # our task registry keeps outcomes; results hold whole payloads
        allow_abort_jobs=True,
        health_check_interval=10,
    )
    set_claim_seconds(worker, JOB_LEASE)  # a lease, renewed (workers/arq_internals.py)
    return worker


async def startup(ctx: dict, settings: Settings) -> None:
    await open_resources(ctx, settings)
    start_leases(resources(ctx))


async def release_job(ctx: dict) -> None:
    """arq's after_job_end: free the job's bytes in the queue once arq no longer holds it
    (a job that will run again keeps them)."""
    await capacity.release_quietly(ctx["redis"], ctx["job_id"])


def serve_metrics(settings: Settings) -> None:
    if not settings.worker_metrics_port:
        return
    try:
        start_http_server(settings.worker_metrics_port, addr=settings.worker_metrics_host)
    except OSError as exc:
        raise SystemExit(f"zapomni-worker: cannot serve metrics on port "
                         f"{settings.worker_metrics_port} ({exc.strerror}); set "
                         "ZAPOMNI_WORKER_METRICS_PORT to a free port, or 0") from None


def stop_surely(worker: Worker, grace: float = 10.0) -> None:
    """SIGTERM/SIGINT: arq's handler, then no new jobs, and the cancel of arq's main loop
    repeated every second until it ends; after ``grace`` seconds the process leaves anyway
    (jobs are idempotent; arq runs an interrupted one again). Measured: with a job starting
    as the signal lands, arq 0.28 sometimes swallows the cancel and polls on."""
    loop = worker.loop

    def on_signal(signum: int) -> None:
        worker.allow_pick_jobs = False
        worker.handle_sig(signum)
        deadline = loop.time() + grace

        def again() -> None:
            if worker.main_task is None or worker.main_task.done():
                return
            if loop.time() > deadline:
                log.error("the worker did not stop within %.0f s; leaving", grace)
                os._exit(1)
            worker.main_task.cancel()
            loop.call_later(1.0, again)

        loop.call_later(1.0, again)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zapomni-worker", description=__doc__)
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    parser.add_argument("--check", action="store_true",
                        help="exit 0 if a worker on this host is alive, else 1")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.check:
        sys.exit(0 if asyncio.run(alive_here(settings)) else 1)
    try:
        check_model(settings.spacy_model)
        checksums.check_models(settings.spacy_model)
    except (ModelMissing, checksums.ModelMismatch) as exc:
        raise SystemExit(f"zapomni-worker: {exc}") from None
    configure_logging("worker", settings.log_level)
    reads_first()
    serve_metrics(settings)
    worker = make_worker(settings, burst=args.burst)
    stop_surely(worker)
    try:
        worker.run()
    except asyncio.CancelledError:  # arq 0.28 lets a job cancelled by the stop out of run()
        log.info("stopped; the job cancelled on the way runs again (jobs are idempotent)")
    finally:
        close_models()


if __name__ == "__main__":
    main()
