"""`zapomni up` as the README starts it, on free ports, for the e2e tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fastmcp.client.transports import StdioTransport

from zapomni.services.stack.falkordb import free_port


def free_run(count: int) -> int:
    """The first of ``count`` consecutive free ports (worker i listens on first + i)."""
    while True:
        first = free_port()
        if first + count <= 65535 and all(is_free(first + i) for i in range(1, count)):
            return first


def is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Stack:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = {"--mcp-port": free_port(), "--query-port": free_port(),
                      "--falkordb-port": free_port(), "--metrics-port": free_run(4)}
        self.process: subprocess.Popen | None = None
        self.output = data_dir / "zapomni-up.out"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['--mcp-port']}/mcp"

    def start(self, workers: int = 2, env: dict[str, str] | None = None,
              timeout: float = 180.0) -> None:
        """``env``: ZAPOMNI_* settings for this stack, over the test process's environment;
        ``timeout``: seconds to wait for it to be up (a large data directory replays first)."""
        command = [str(Path(sys.executable).parent / "zapomni"), "up", "--workers", str(workers),
                   "--data-dir", str(self.data_dir)]
        for flag, port in self.ports.items():
            command += [flag, str(port)]
        seen = self.output.read_text().count("Zapomni is up.") if self.output.exists() else 0
        with self.output.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=out,
                                            env={**os.environ, **(env or {})})
        deadline = time.monotonic() + timeout
        while self.output.read_text().count("Zapomni is up.") == seen:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"zapomni up did not start:\n{self.output.read_text()}")
            time.sleep(0.2)

    @property
    def query_secret(self) -> str:
        """The front's credential on the query service's /v1 calls, which `zapomni up` keeps in
        its data directory."""
        return (self.data_dir / "query-secret").read_text().strip()

    def stdio_front(self) -> StdioTransport:
        """The stdio front against this stack, configured as the printed snippet says."""
        env = {"ZAPOMNI_REDIS_URL": f"redis://127.0.0.1:{self.ports['--falkordb-port']}/0",
               "ZAPOMNI_QUERY_URL": f"http://127.0.0.1:{self.ports['--query-port']}",
               "ZAPOMNI_QUERY_SECRET": self.query_secret}
        return StdioTransport(command=str(Path(sys.executable).parent / "zapomni-mcp"),
                              args=["--stdio"], env=env)

    def workers(self) -> list[int]:
        """The PIDs of the stack's worker processes (children of `zapomni up`; Linux /proc)."""
        assert self.process is not None
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                command = (stat.parent / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue  # a process that ended meanwhile
            if parent == self.process.pid and b"zapomni.workers" in command:
                found.append(int(stat.parent.name))
        return found

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
