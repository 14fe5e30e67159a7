"""``zapomni``: the whole stack on one machine, no Docker.

    zapomni setup                 build the embedded FalkorDB server once (cached)
    zapomni up [--workers N] ...  start FalkorDB (also the queue's Redis), the query service,
                                  N workers and the MCP front; Ctrl-C stops them all
    zapomni ingest PATH... ...    add files and folders through the running MCP front
    zapomni export|import|reembed|migrate   move a namespace (services/cli/moves.py)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from zapomni.services.cli.moves import add_commands
from zapomni.services.stack.falkordb import (
    default_dir,
    ensure_binaries,
    port_free,
    start_server,
    stop_process,
)
from zapomni.services.stack.lock import lock_data_dir
from zapomni.shared.embedding import checksums
from zapomni.shared.settings import Settings, without_password

SECRET_FILE = "query-secret"  # in the data directory: the query service's credential
RESTART_LIMIT = 5  # restarts of one child within RESTART_WINDOW before giving up
RESTART_WINDOW = 60.0


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the supervisor dies, even by SIGKILL (Linux)."""
    try:
        import ctypes  # Linux only, and only in a child process: loaded where it is used

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Child:
    """One supervised process, its log file and its restart history."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_dir: Path):
        self.name, self.command, self.env = name, command, env
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None
        self.restarts: list[float] = []

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here on
        try:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_parent)
        finally:
            log.close()


def wait_http(url: str, child: Child, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.process is not None and child.process.poll() is not None:
            raise SystemExit(f"zapomni: {child.name} exited during start-up; see "
                             f"{child.log_path}")
        try:
            if httpx2.get(url, timeout=1.0).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"zapomni: {child.name} did not become ready within {timeout:.0f}s")


def query_secret(data_dir: Path, given: str) -> str:
    """The credential the front shows the query service: ZAPOMNI_QUERY_SECRET when set, else
    one made for this data directory on its first start and kept in it (mode 0600), so the
    stdio front configured from the banner keeps working after a restart."""
    if given:
        return given
    path = data_dir / SECRET_FILE
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        return kept
    made = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(made + "\n")
    return made


def child_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAPOMNI_")}
    env.update(settings.to_env())
    return env


def header(settings: Settings) -> str:
    """The header `claude mcp add` needs with auth on: a reference to the token, never the
    token (the banner goes to a terminal or a log file)."""
    if settings.mcp_token:
        token = "$ZAPOMNI_MCP_TOKEN"
    elif settings.mcp_tokens:
        token = "<a token of ZAPOMNI_MCP_TOKENS>"
    elif settings.mcp_jwt:
        token = "<a JWT of your identity provider>"
    else:
        return ""
    return f' --header "Authorization: Bearer {token}"'


def banner(settings: Settings, workers: int, data_dir: Path, log_dir: Path,
           metrics_port: int) -> str:
    mcp_url = f"http://{settings.mcp_host}:{settings.mcp_port}/mcp"
    embedder = (f"Ollama {settings.ollama_model} at {settings.ollama_url}" if settings.ollama_url
                else "in-process all-MiniLM-L6-v2 (ONNX)")
    desktop = {"mcpServers": {"zapomni": {
        "command": str(Path(sys.executable).parent / "zapomni-mcp"),
        "args": ["--stdio"],
        "env": {"ZAPOMNI_REDIS_URL": settings.redis_url,
                "ZAPOMNI_QUERY_URL": settings.query_url,
                "ZAPOMNI_QUERY_SECRET": settings.query_secret},
    }}}
    return "\n".join([
        "",
        "Zapomni is up.",
        f"  MCP (streamable HTTP)  {mcp_url}",
        f"  query service          {settings.query_url}",
        f"  FalkorDB + queue       {without_password(settings.falkordb_url)}",
        f"  workers                {workers} (embedder: {embedder})",
        f"  metrics                {mcp_url[:-4]}/metrics, {settings.query_url}/metrics, "
        f"workers on 127.0.0.1:{metrics_port}-{metrics_port + workers - 1}",
        f"  data                   {data_dir}",
        f"  logs                   {log_dir}",
        "",
        "Claude Code:   claude mcp add --transport http zapomni " + mcp_url + header(settings),
        "Claude Desktop (claude_desktop_config.json; stdio front against this stack):",
        json.dumps(desktop, indent=2),
        "",
        "Ctrl-C stops everything; data stays in the data directory.",
        "",
    ])


def supervise(children: list[Child], falkordb: subprocess.Popen, stop: list[bool]) -> int:
    """Restart children that die (a few times); stop everything if FalkorDB dies."""
    while not stop:
        if falkordb.poll() is not None:
            say(f"zapomni: FalkorDB exited with code {falkordb.returncode}; stopping")
            return 1
        for child in children:
            if child.process is None or child.process.poll() is None:
                continue
            now = time.monotonic()
            child.restarts = [t for t in child.restarts if now - t < RESTART_WINDOW] + [now]
            if len(child.restarts) > RESTART_LIMIT:
                say(f"zapomni: {child.name} keeps exiting; see {child.log_path}; stopping")
                return 1
            say(f"zapomni: {child.name} exited with code {child.process.returncode}; "
                "restarting")
            child.start()
        time.sleep(0.5)
    return 0


def up(args: argparse.Namespace) -> int:
    base = Settings.from_env()
    data_dir = Path(args.data_dir or base.data_dir or default_dir("XDG_DATA_HOME",
                                                                  ".local/share")).resolve()
    log_dir = data_dir / "logs"
    with removed_if_refused(data_dir):
        log_dir.mkdir(parents=True, exist_ok=True)
        lock, settings = prepare(args, base, data_dir)
    return run_stack(args, settings, data_dir, log_dir, lock)


@contextlib.contextmanager
def removed_if_refused(data_dir: Path) -> Iterator[None]:
    """A start refused (a busy port, a bind without a token...) leaves no data directory
    behind: the directories this run created are removed, never one that was there."""
    new = next((d for d in (*reversed(data_dir.parents), data_dir) if not d.exists()), None)
    try:
        yield
    except SystemExit:
        if new is not None:
            shutil.rmtree(new, ignore_errors=True)
        raise


def prepare(args: argparse.Namespace, base: Settings, data_dir: Path) -> tuple[int, Settings]:
    """The data directory locked, the stack's settings, and its ports checked free."""
    lock = lock_data_dir(data_dir)  # held until this process and its FalkorDB have exited
    db_url = f"redis://127.0.0.1:{args.falkordb_port}"
    settings = Settings.from_env(
        redis_url=f"{db_url}/0", falkordb_url=db_url,
        query_url=f"http://127.0.0.1:{args.query_port}", query_host="127.0.0.1",
        query_port=args.query_port, mcp_port=args.mcp_port, mcp_host=args.host,
        data_dir=str(data_dir), query_secret=query_secret(data_dir, base.query_secret))
    settings.check_mcp_bind()
    ports = [(args.query_port, "--query-port"), (args.mcp_port, "--mcp-port"),
             *((args.metrics_port + i, "--metrics-port") for i in range(args.workers))]
    for port, flag in ports:
        if not port_free(port):
            raise SystemExit(f"zapomni: port {port} is in use; pass {flag} with another port")
    return lock, settings


def run_stack(args: argparse.Namespace, settings: Settings, data_dir: Path, log_dir: Path,
              lock: int) -> int:
    binaries = ensure_binaries(say=say)
    stop: list[bool] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))
    say(f"zapomni: starting FalkorDB on port {args.falkordb_port} (data in {data_dir})")
    falkordb = start_server(binaries, args.falkordb_port, data_dir / "falkordb",
                            start_new_session=True, preexec_fn=_die_with_parent,
                            pass_fds=(lock,))
    env = child_env(settings)
    py = sys.executable
    query = Child("query", [py, "-m", "zapomni.services.query"], env, log_dir)
    workers = [Child(f"worker-{i + 1}", [py, "-m", "zapomni.workers"],
                     {**env, "ZAPOMNI_WORKER_METRICS_PORT": str(args.metrics_port + i)},
                     log_dir)
               for i in range(args.workers)]
    mcp = Child("mcp", [py, "-m", "zapomni.services.mcp"], env, log_dir)
    children = [query, *workers, mcp]
    code = 1
    try:
        for child in children:
            child.start()
        wait_http(f"{settings.query_url}/readyz", query)
        wait_http(f"http://{settings.mcp_host}:{settings.mcp_port}/healthz", mcp)
        say(banner(settings, args.workers, data_dir, log_dir, args.metrics_port))
        code = supervise(children, falkordb, stop)
    finally:
        say("zapomni: stopping")
        for child in [mcp, query, *workers]:  # front first: no new work comes in
            if child.process is not None and child.process.poll() is None:
                child.process.terminate()
        for child in children:
            if child.process is not None:
                stop_process(child.process)
        stop_process(falkordb, timeout=60)  # SIGTERM: FalkorDB flushes its AOF and exits
        say("zapomni: stopped")
    return code


def setup(settings: Settings) -> None:
    """Build the FalkorDB server (once) and check every model file against its pin."""
    ensure_binaries(say=say)
    try:
        count = checksums.check_models(settings.spacy_model)
    except checksums.ModelMismatch as exc:
        raise SystemExit(f"zapomni: {exc}") from None
    say(f"zapomni: the model files match their pinned sha256 ({count} files)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zapomni", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="build the embedded FalkorDB server (once; cached)")
    run = sub.add_parser("up", help="start the whole stack; Ctrl-C stops it")
    run.add_argument("--workers", type=int, default=2, help="arq worker processes (2)")
    run.add_argument("--data-dir", default="", help="where data and logs live")
    run.add_argument("--host", default="127.0.0.1",
                     help="MCP bind address; beyond loopback needs ZAPOMNI_MCP_TOKEN")
    run.add_argument("--mcp-port", type=int, default=8765)
    run.add_argument("--query-port", type=int, default=8766)
    run.add_argument("--falkordb-port", type=int, default=6479)
    run.add_argument("--metrics-port", type=int, default=9470,
                     help="worker i serves /metrics on this port + i")
    add_commands(sub)
    args = parser.parse_args(argv)
    if hasattr(args, "run"):
        sys.exit(args.run(args))
    if args.command == "setup":
        setup(Settings.from_env())
        return
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    sys.exit(up(args))


if __name__ == "__main__":
    main()
