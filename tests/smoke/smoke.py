"""Smoke test of an installed Zapomni: `zapomni up` on free ports, add a memory over MCP (the
fastmcp client), wait for its task, find it by search, then Ctrl-C (SIGINT) and check that
every process the stack started has ended and its ports are free.

.ci/package runs it with the python of a fresh virtualenv into which only the built wheel was
installed, from a directory outside the checkout (``python -I``: the checkout is not on
sys.path), so it checks the package as a user gets it. It imports nothing from tests/ and is
not collected by pytest: it needs that wheel and virtualenv, which the suite does not build.

    python -I tests/smoke/smoke.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastmcp import Client

TEXT = ("The lighthouse keeper of Vardø logs the barometer at six every morning and rings "
        "the fog bell when visibility drops below two nautical miles.")
QUERY = "when does the Vardø lighthouse keeper ring the fog bell?"
started = time.monotonic()


def say(message: str) -> None:
    print(f"smoke [{time.monotonic() - started:5.1f}s] {message}", flush=True)


def fail(message: str, output: Path | None = None) -> None:
    if output is not None and output.exists():
        print(output.read_text(errors="replace"), file=sys.stderr)
    raise SystemExit(f"smoke: FAILED: {message}")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_free(port: int) -> bool:
    """Nothing listens on it (connections closing in TIME_WAIT do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def children_of(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def check_installed() -> None:
    import zapomni.shared

    where = Path(zapomni.shared.__file__).resolve()
    if not where.is_relative_to(Path(sys.prefix).resolve()):
        fail(f"zapomni was imported from {where}, not from the environment {sys.prefix}")
    say(f"zapomni imported from {where.parent}")


def start(data_dir: Path, ports: list[int], output: Path) -> subprocess.Popen:
    zapomni = Path(sys.executable).parent / "zapomni"
    command = [str(zapomni), "up", "--workers", "1", "--data-dir", str(data_dir),
               "--mcp-port", str(ports[0]), "--query-port", str(ports[1]),
               "--falkordb-port", str(ports[2]), "--metrics-port", str(ports[3])]
    with output.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "Zapomni is up." not in output.read_text(errors="replace"):
        if process.poll() is not None:
            fail(f"zapomni up exited with code {process.returncode}", output)
        if time.monotonic() > deadline:
            process.kill()
            fail("zapomni up did not say 'Zapomni is up.' within 300 s", output)
        time.sleep(0.2)
    return process


async def call(client: Client, tool: str, **arguments) -> dict:
    """A tool's answer as JSON, as the README's example reads it (.data would be dataclasses
    built from the tool's output schema)."""
    return (await client.call_tool(tool, arguments)).structured_content


async def add_and_find(url: str) -> None:
    async with Client(url) as client:
        receipt = await call(client, "add_memory", text=TEXT)
        say(f"added memory {receipt['memory_id']}, task {receipt['task_id']}")
        deadline = time.monotonic() + 300
        while True:
            status = await call(client, "graph_status", task_id=receipt["task_id"])
            if status["state"] == "done":
                break
            if status["state"] in ("failed", "cancelled") or time.monotonic() > deadline:
                fail(f"the add's task did not finish: {status}")
            await asyncio.sleep(0.3)
        say("its task is done")
        found = await call(client, "search_memory", query=QUERY, limit=3)
        ids = [hit["memory_id"] for hit in found["results"]]
        if not ids or ids[0] != receipt["memory_id"]:
            fail(f"search did not find the memory first: {found}")
        say("search finds it first")


def stop(process: subprocess.Popen, family: set[int], ports: list[int], output: Path) -> None:
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(90)
    except subprocess.TimeoutExpired:
        process.kill()
        fail("zapomni up did not stop within 90 s of SIGINT", output)
    if code != 0 or "zapomni: stopped" not in output.read_text(errors="replace"):
        fail(f"zapomni up exited with code {code} after SIGINT", output)
    deadline = time.monotonic() + 30  # children already waited for; init reaps the rest
    while (left := [pid for pid in family if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        fail(f"processes left running after zapomni up stopped: {left}", output)
    busy = [port for port in ports if not port_free(port)]
    if busy:
        fail(f"ports still in use after zapomni up stopped: {busy}", output)
    say(f"zapomni up stopped cleanly (exit 0); none of its {len(family)} processes is left")


def main() -> None:
    check_installed()
    with tempfile.TemporaryDirectory(prefix="zapomni-smoke-") as tmp:
        data_dir, output = Path(tmp) / "data", Path(tmp) / "zapomni-up.out"
        ports = free_ports(4)
        process = start(data_dir, ports, output)
        family = children_of(process.pid)  # FalkorDB, query, worker, front
        say(f"zapomni up is up with {len(family)} child processes")
        if len(family) < 4:
            process.kill()
            fail(f"expected FalkorDB, query, a worker and the front; found {family}", output)
        try:
            asyncio.run(add_and_find(f"http://127.0.0.1:{ports[0]}/mcp"))
        except BaseException:
            process.kill()
            for pid in family:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            print(output.read_text(errors="replace"), file=sys.stderr)
            raise
        stop(process, family, ports, output)
    say("passed")


if __name__ == "__main__":
    main()
