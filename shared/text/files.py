"""Walking files and folders to ingest (``zapomni ingest`` and the ingest_path tool).

``walk_files(root, selection)`` streams what it finds, depth first in name order (a folder's
files, then its folders: ``walk_key``): a ``Found`` file to read, or a ``Skipped`` one with
the reason, one line a user can act on. It can start after a given file (a continuation).
It honours ``.gitignore`` files (each applies to its own folder and below; the last matching
line wins; ``!`` re-includes; pathspec reads them as git does), never enters ``.git``,
caches or installed packages (``NEVER_ENTER``), follows symbolic links but not into a
folder it has already entered (a loop), and stops after ``max_files`` files. ``read_file``
reads one file whole, or says why not (too big, unreadable, binary). With ``within`` (the
ingest_path tool), every file and folder is opened through shared/text/roots.py: only inside
those roots, never through a link swapped in after the walk, never a hard link.

``source`` is the file's path relative to the root given, with ``/`` separators; a root that
is a file is its own name.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pathspec

from zapomni.shared.text.extract_text import Unreadable, extract
from zapomni.shared.text.roots import OUTSIDE, Refused, check_regular, inside, open_inside

SNIFF_BYTES = 8192  # a NUL byte in the first 8 KiB: binary (git's own test)
# of a .gitignore, read: real ones are a few KiB (git's own has no limit; a file this big
# named .gitignore is no list of patterns)
MAX_GITIGNORE_BYTES = 1 << 20
BINARY_KINDS = (".pdf", ".docx")  # binary formats read by shared/text/extract_text.py
# folders of tools, never a user's text: version control, caches and installed packages (a
# walk of a Python tree read 38 .pyc files from __pycache__ as "binary" lines)
NEVER_ENTER = frozenset((".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache",
                         ".ruff_cache", ".tox", ".venv", "node_modules"))
READ_ANY = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # zapomni ingest: links followed

# files one run reads at most (zapomni ingest, ingest_path): a bound on what one run enqueues
# and lists; a larger tree is ingested a folder at a time
MAX_FILES = 100_000


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    include: tuple[str, ...] = ()  # globs; none: every file
    exclude: tuple[str, ...] = ()
    max_bytes: int = 10_000_000
    max_files: int = MAX_FILES
    within: tuple[str, ...] = ()  # resolved roots a symbolic link may lead into; () any


class Found(msgspec.Struct, frozen=True):
    path: str  # where to read it
    source: str  # relative to the root, posix
    within: tuple[str, ...] = ()  # the roots it is read inside (shared/text/roots.py); () any


class Skipped(msgspec.Struct, frozen=True):
    source: str
    reason: str


class Rule(msgspec.Struct, frozen=True):
    spec: pathspec.GitIgnoreSpec  # one .gitignore's lines, as git reads them (pathspec)
    base: str  # the folder of the .gitignore, relative to the root ('' = the root)


def parse_gitignore(text: str, base: str) -> list[Rule]:
    """The rules of one .gitignore in the folder ``base`` (relative to the root)."""
    spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
    return [Rule(spec, base)] if len(spec) else []


def ignored(rules: list[Rule], source: str, is_dir: bool) -> bool:
    """Whether the .gitignore files in force ignore ``source``: the deepest one with a
    matching line decides (within one, the last matching line; ``!`` re-includes)."""
    verdict = False
    for rule in rules:
        if rule.base and not source.startswith(rule.base + "/"):
            continue
        relative = source[len(rule.base) + 1:] if rule.base else source
        include = rule.spec.check_file(relative + "/" if is_dir else relative).include
        if include is not None:
            verdict = include
    return verdict


def glob_match(globs: tuple[str, ...], source: str) -> bool:
    """A glob without ``/`` matches the file name at any depth; one with ``/`` the whole
    relative path (``*`` then crosses folders)."""
    name = source.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(source if "/" in g else name, g) for g in globs)


def _load_rules(folder: Path, base: str, within: tuple[str, ...]) -> list[Rule]:
    path = folder / ".gitignore"
    try:
        if not path.is_file():
            return []
        fd = open_inside(str(path), within) if within else os.open(path, READ_ANY)
        with os.fdopen(fd, "rb") as handle:
            check_regular(handle.fileno())
            text = handle.read(MAX_GITIGNORE_BYTES).decode(errors="replace")
    except (OSError, Refused):
        return []
    return parse_gitignore(text, base)


def walk_files(root: Path, selection: Selection, after: str = "",
               counted: int = 0) -> Iterator[Found | Skipped]:
    """Every file under ``root`` that the selection keeps, or the reason it was skipped, in
    the order of ``walk_key``. ``after``: only what comes after the file with that source (a
    continuation: folders wholly before it are not entered); ``counted``: the files found
    before it, which the limit of files per run counts too."""
    if not root.is_dir():
        if not after:
            yield Found(str(root), root.name, selection.within)
        return
    cursor = walk_key(after) if after else None
    seen: set[tuple[int, int]] = set()
    # the stack holds (folder, its source, the rules that apply in it)
    stack: list[tuple[Path, str, list[Rule]]] = [(root, "", [])]
    count = counted
    while stack:
        folder, base, rules = stack.pop()
        subfolders: list[tuple[Path, str, list[Rule]]] = []
        for item in _folder(folder, base, rules, seen, selection, subfolders):
            if cursor is not None and _behind(item.source, base, cursor):
                continue
            if isinstance(item, Found):
                count += 1
                if count > selection.max_files:
                    yield Skipped(item.source, f"over the limit of {selection.max_files:,} "
                                  "files per run; ingest a subfolder")
                    return
            yield item
        stack.extend(reversed([entry for entry in subfolders
                               if cursor is None or not _before(entry[1], cursor)]))


def walk_key(source: str) -> tuple[tuple[int, str], ...]:
    """Where a file comes in the walk: each folder's files in name order, then its folders
    in name order, each whole (depth first). A continuation's cursor is compared by it."""
    parts = source.split("/")
    return (*((1, part) for part in parts[:-1]), (0, parts[-1]))


def _folder_key(source: str) -> tuple[tuple[int, str], ...]:
    return tuple((1, part) for part in source.split("/")) if source else ()


def _behind(source: str, base: str, cursor: tuple[tuple[int, str], ...]) -> bool:
    """Whether a continuation has passed this item already. Not what is said of the folder
    being walked itself (unreadable, a loop): a folder a continuation walks lies on the
    cursor's path or after it, so that is news."""
    return source not in (base, base or ".") and walk_key(source) <= cursor


def _before(folder: str, cursor: tuple[tuple[int, str], ...]) -> bool:
    """Whether everything in ``folder`` comes before the cursor (it was walked already)."""
    key = _folder_key(folder)
    return key < cursor and cursor[:len(key)] != key


def _folder(folder: Path, base: str, rules: list[Rule], seen: set[tuple[int, int]],
            selection: Selection, subfolders: list[tuple[Path, str, list[Rule]]]
            ) -> Iterator[Found | Skipped]:
    """One folder's files (its folders go to ``subfolders``), unless entered already."""
    try:
        info = folder.stat()
    except OSError as exc:
        yield Skipped(base or ".", _os_reason(exc))
        return
    if (info.st_dev, info.st_ino) in seen:
        yield Skipped(base, "a symbolic link loop (this folder was entered already)")
        return
    seen.add((info.st_dev, info.st_ino))
    rules = rules + _load_rules(folder, base, selection.within)
    for item, source, is_dir in _entries(folder, base, selection.within):
        if isinstance(item, Skipped):
            yield item
        elif item.name in NEVER_ENTER or ignored(rules, source, is_dir):
            continue
        elif selection.within and item.is_symlink() and \
                not inside(item.resolve(), selection.within):
            yield Skipped(source, OUTSIDE)
        elif is_dir:
            if not glob_match(selection.exclude, source):
                subfolders.append((item, source, rules))
        elif selected(selection, source):
            yield Found(str(item), source, selection.within)


def selected(selection: Selection, source: str) -> bool:
    """Whether --include/--exclude take this file (its path relative to its root)."""
    if selection.include and not glob_match(selection.include, source):
        return False
    return not glob_match(selection.exclude, source)


def _entries(folder: Path, base: str, within: tuple[str, ...]
             ) -> Iterator[tuple[Path | Skipped, str, bool]]:
    """A folder's entries in name order: (path, source, is a folder), or a Skipped."""
    try:
        names = sorted(_names(folder, within))
    except Refused as exc:
        yield Skipped(base or ".", exc.reason), base, False
        return
    except OSError as exc:
        yield Skipped(base or ".", _os_reason(exc)), base, False
        return
    for name in names:
        path = folder / name
        source = f"{base}/{name}" if base else name
        try:
            is_dir = path.is_dir()
            if not is_dir and not path.is_file():
                if path.is_symlink() and not path.exists():
                    yield Skipped(source, _link_reason(path)), source, False
                continue  # sockets, fifos, devices
        except OSError as exc:
            yield Skipped(source, _os_reason(exc)), source, False
            continue
        yield path, source, is_dir


def _names(folder: Path, within: tuple[str, ...]) -> list[str]:
    """The names in a folder; ``within``: of the folder inside those roots, listed through a
    descriptor opened without following any link."""
    if not within:
        return os.listdir(folder)
    fd = open_inside(str(folder), within, folder=True)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def _link_reason(path: Path) -> str:
    try:
        path.stat()
    except OSError as exc:
        return _os_reason(exc)
    return "a broken symbolic link"


def _os_reason(exc: OSError) -> str:
    if exc.errno == 40:  # ELOOP
        return "a symbolic link loop"
    if isinstance(exc, PermissionError):
        return "unreadable: permission denied"
    if isinstance(exc, FileNotFoundError):
        return "a broken symbolic link, or the file is gone"
    return f"unreadable: {exc.strerror or 'an I/O error'}"


def read_file(found: Found, max_bytes: int) -> bytes | Skipped:
    """The file's bytes, or why it is skipped: too big, unreadable, binary; with
    ``found.within``, out of those roots, a link, or a hard link (shared/text/roots.py)."""
    try:
        fd = open_inside(found.path, found.within) if found.within else \
            os.open(found.path, READ_ANY)
        with os.fdopen(fd, "rb") as handle:
            check_regular(handle.fileno())
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                return Skipped(found.source, f"too big: {size:,} bytes, over the limit of "
                               f"{max_bytes:,} (ZAPOMNI_INGEST_MAX_FILE_BYTES)")
            data = handle.read(max_bytes + 1)
    except Refused as exc:
        return Skipped(found.source, exc.reason)
    except OSError as exc:
        return Skipped(found.source, _os_reason(exc))
    if len(data) > max_bytes:  # it grew since stat
        return Skipped(found.source, f"too big: over the limit of {max_bytes:,} bytes "
                       "(ZAPOMNI_INGEST_MAX_FILE_BYTES)")
    if found.source.lower().endswith(".gz"):
        data = gunzip(found.source, data, max_bytes)
        if isinstance(data, Skipped):
            return data
    if not inner_name(found.source).lower().endswith(BINARY_KINDS) and b"\0" in data[:SNIFF_BYTES]:
        return Skipped(found.source, "binary (not text, PDF or DOCX)")
    return data


def inner_name(source: str) -> str:
    """The name a file's text is read by: a gzip file's name without ``.gz``."""
    return source[:-3] if source.lower().endswith(".gz") else source


def gunzip(source: str, data: bytes, max_bytes: int) -> bytes | Skipped:
    """A gzip file's content (Debian's /usr/share/doc is mostly changelog.gz, NEWS.gz...),
    at most ``max_bytes`` of it: a larger one is skipped as too big, not read whole."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as handle:
            inner = handle.read(max_bytes + 1)
    except (OSError, EOFError, zlib.error):
        return Skipped(source, "a corrupt gzip file")
    if len(inner) > max_bytes:
        return Skipped(source, f"too big: over {max_bytes:,} bytes uncompressed "
                       "(ZAPOMNI_INGEST_MAX_FILE_BYTES)")
    return inner


class Loaded(msgspec.Struct, frozen=True):
    """A file ready to add: its text and metadata (``file_sha256``: of its bytes, what a
    re-run compares; ``root``: the root it was found under, what --prune lists)."""

    source: str
    text: str
    metadata: dict


def load_file(found: Found, root_key: str, max_bytes: int) -> Loaded | Skipped:
    """Read and extract one file (shared/text/extract_text.py), or say why it is skipped."""
    data = read_file(found, max_bytes)
    if isinstance(data, Skipped):
        return data
    try:
        extracted = extract(inner_name(found.source), data)
    except Unreadable as exc:
        return Skipped(found.source, exc.reason)
    if not extracted.text.strip():
        return Skipped(found.source, "no text in it (empty)")
    metadata = {"source": found.source, "type": extracted.type, "title": extracted.title,
                "file_sha256": hashlib.sha256(data).hexdigest(), "root": root_key}
    if extracted.language:
        metadata["language"] = extracted.language
    return Loaded(found.source, extracted.text, metadata)


def root_key(root: Path) -> str:
    """How memories remember the root they came from: its resolved path, posix."""
    return root.resolve().as_posix()
