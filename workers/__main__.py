"""``zapomni-worker`` and ``python -m zapomni.workers``. ``--check``: a worker on this host has
a live heartbeat (a container's health check); it imports only the settings and the
heartbeat, anything else goes on to the worker (workers/main.py). Importing the worker itself
(onnxruntime, spaCy) took 17 s in a compose worker on a loaded 2-core host (2026-12-01,
tests/compose), past compose's 5 s timeout, and the check runs at the worker's low CPU
weight."""

from __future__ import annotations

import asyncio
import socket
import sys

from redis.asyncio import Redis

from zapomni.shared.settings import Settings
from zapomni.shared.tasks import heartbeat


async def alive_here(settings: Settings) -> bool:
    """A worker on this host has a live heartbeat."""
    redis = Redis.from_url(settings.redis_url, socket_timeout=settings.request_timeout,
                           socket_connect_timeout=min(settings.request_timeout, 3.0))
    try:
        here = f"{socket.gethostname()}-"
        return any(i.startswith(here) for i in await heartbeat.alive_ids(redis))
    finally:
        await redis.aclose()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        sys.exit(0 if asyncio.run(alive_here(Settings.from_env())) else 1)
    from zapomni.workers.main import main as run_worker

    run_worker(args)


if __name__ == "__main__":
    main()
