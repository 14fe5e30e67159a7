"""The folders ingest_path may read (ZAPOMNI_INGEST_ROOTS): the paths it is given are
checked against them (check_ingest_path), and files and folders are opened only inside them,
whatever happened to them between the walk that found them and the read (open_inside).

The walk checks a symbolic link when it meets one, but a file can be swapped for a link
after that, and a hard link is a second name of a file that may sit anywhere. So a file
(or a folder to list) is opened here: its real path is resolved and must be inside the
roots, then it is opened one part at a time from ``/``, each part relative to the folder
opened before it and without following a link (``openat`` with ``O_NOFOLLOW``): what is
opened is the file at that real path, never what a link swapped in since points to (that
open fails, and the file is skipped). An opened file with more than one name (a hard link)
is refused: a hard link has no target to check, its other names are the file itself as
much as this one, and they could be found only by searching the whole file system, so
ingest_path cannot tell whether they lie inside the roots.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

from zapomni.shared.protocol.errors import InvalidInput

FOLLOWS_NO_LINK = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
OUTSIDE = "a symbolic link out of the allowed roots (ZAPOMNI_INGEST_ROOTS)"


class Refused(Exception):
    """The file is not read; ``reason`` says why, in a line a user can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def inside(path: Path, roots: tuple[str, ...]) -> bool:
    return any(path == Path(root) or Path(root) in path.parents for root in roots)


def allowed_roots(setting: str) -> tuple[str, ...]:
    """ZAPOMNI_INGEST_ROOTS, resolved (symbolic links followed), as posix paths."""
    return tuple(Path(r.strip()).resolve().as_posix()
                 for r in setting.split(os.pathsep) if r.strip())


def check_ingest_path(path: str, roots: tuple[str, ...]) -> Path:
    """The path ingest_path may read, resolved: '..' and symbolic links are followed first,
    so neither leads out of the allowed roots."""
    if not roots:
        raise InvalidInput("path: ingest_path is off on this server; set ZAPOMNI_INGEST_ROOTS to "
                           f"the folders it may read (separated by '{os.pathsep}') and "
                           "restart it; or run `zapomni ingest PATH` on the machine")
    if "\0" in path or not os.path.isabs(path):
        raise InvalidInput(f"path: give an absolute path under one of {', '.join(roots)}")
    resolved = Path(path).resolve()
    shown = json.dumps(path[:200]) + ("..." if len(path) > 200 else "")
    if not inside(resolved, roots):
        raise InvalidInput(f"path: {shown} is outside the folders ingest_path may read "
                           f"({', '.join(roots)}: ZAPOMNI_INGEST_ROOTS)")
    if not resolved.exists():
        raise InvalidInput(f"path: {shown}: no such file or folder")
    return resolved


def open_inside(path: str, roots: tuple[str, ...], *, folder: bool = False) -> int:
    """A descriptor of the regular file (``folder``: the folder) at ``path``, opened as
    above; Refused when it is out of the roots, turned into a link meanwhile, not a regular
    file, or a hard link (OSError: the system's own reasons, such as gone)."""
    real = os.path.realpath(path, strict=True)
    if not inside(Path(real), roots):
        raise Refused(OUTSIDE)
    fd = _open_no_links(Path(real).parts, folder)
    try:
        if not folder:
            check_regular(fd, single=True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_no_links(parts: tuple[str, ...], folder: bool) -> int:
    last = FOLLOWS_NO_LINK | (os.O_DIRECTORY if folder else os.O_NONBLOCK)
    if len(parts) == 1:  # the root of the file system itself
        return os.open(parts[0], last)
    at = os.open(parts[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[1:-1]:
            step = _open_at(part, FOLLOWS_NO_LINK | os.O_DIRECTORY, at)
            os.close(at)
            at = step
        return _open_at(parts[-1], last, at)
    finally:
        os.close(at)


def _open_at(name: str, flags: int, at: int) -> int:
    try:
        return os.open(name, flags, dir_fd=at)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link where a folder or file was
            raise Refused("changed into a symbolic link after it was found; not followed "
                          "(ZAPOMNI_INGEST_ROOTS)") from None
        raise


def check_regular(fd: int, *, single: bool = False) -> None:
    """Refused unless the open file is a regular file (``single``: with one name only)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise Refused("not a regular file (a device, pipe or socket)")
    if single and info.st_nlink > 1:
        raise Refused(f"a hard link (the file has {info.st_nlink} names): ingest_path cannot "
                      "tell whether the others are inside ZAPOMNI_INGEST_ROOTS, so it reads "
                      "no hard-linked file; copy the file into the folder instead")
