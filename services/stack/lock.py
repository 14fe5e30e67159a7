"""One stack per data directory: ``zapomni up`` holds an exclusive lock on a file in it.

Two FalkorDB servers saving into the same files corrupt each other's data without a word,
so a second ``zapomni up`` on a directory in use stops at once and says who holds it. The
lock (``flock``) is the kernel's: it goes when the holder's process ends, however it ends, so
a stack killed with SIGKILL never leaves a stale lock behind. The FalkorDB server the stack
starts inherits it, so the directory stays locked until that server has flushed and exited.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = "zapomni.lock"


def lock_data_dir(data_dir: Path) -> int:
    """Lock ``data_dir`` for this process; the lock file's descriptor (keep it open, and
    pass it to children that must keep the lock). SystemExit if another process holds it."""
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise SystemExit(in_use(data_dir, holder)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def in_use(data_dir: Path, holder: int | None) -> str:
    who = f"PID {holder}" if holder else "a process whose PID is not known"
    stop = f"stop it (Ctrl-C where it runs, or kill {holder})" if holder else "stop it"
    return (f"zapomni: the data directory {data_dir} is in use by another Zapomni stack "
            f"({who}); two stacks on one directory would corrupt its data. Either {stop}, "
            "or give this one its own directory with --data-dir or ZAPOMNI_DATA_DIR")


def _holder(fd: int) -> int | None:
    """The PID the holder wrote into the lock file, if it did."""
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
