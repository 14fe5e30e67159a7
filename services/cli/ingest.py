"""``zapomni ingest PATH...``: files and folders into memory, through the running MCP front.

For each root: list what is stored from it (list_memories, metadata ``root``, paged), walk
it (shared/text/files.py), skip a file whose bytes hash as stored (``file_sha256``), and send the
rest with add_memories in batches bounded by count and bytes. A changed file is added anew
and its old memory deleted (a file's memory mirrors the file; versions of files belong in
git, and superseded versions kept by update_memory would grow with every edit). ``--prune``
deletes the memories of files that are gone (not those the filters leave out). Then it
follows the tasks with graph_status until all are done and prints a summary. A file whose
text another holds (stored before, or read in this run) is one memory: it is skipped and
says whose text it is.

Ctrl-C stops the command, not its tasks: what was queued is stored by the workers all the
same (cancelling would undo it, and a changed file's old memory may be deleted already, so
stopping halfway could lose a file's text), and the line it prints says how many were
queued and how many ended. The same command run again follows the ones still queued.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import tenacity
from fastmcp import Client
from fastmcp.exceptions import ToolError
from mcp import MCPError

from zapomni.services.cli.progress import Progress
from zapomni.shared.protocol.errors import UNAUTHORIZED_CODE
from zapomni.shared.text.files import (
    Loaded,
    Selection,
    Skipped,
    load_file,
    root_key,
    selected,
    walk_files,
)

BATCH_ITEMS = 64  # files per add_memories call
BATCH_CHARS = 4_000_000  # characters per call (add_memories takes 10,000,000)
LIST_PAGE = 200
RETRIES = 8  # a full queue is retried with backoff this many times
POLL_SECONDS = 0.5
FOLLOW_AHEAD = 8  # tasks polled past the oldest each round while it waits
ACTIVE = ("queued", "running")
DEFAULT_SELECTION = Selection()


class Tally(msgspec.Struct, kw_only=True):
    added: int = 0
    unchanged: int = 0
    replaced: int = 0
    pruned: int = 0
    skipped: list[Skipped] = []
    failed: list[Skipped] = []
    sending: int = 0  # files in the add_memories call under way
    same: int = 0  # files whose text another file holds (stored, or read in this run)
    ended: int = 0  # tasks followed to their end
    following: bool = False  # every file read and sent: the tasks are followed
    kept: set[str] = set()  # memories that hold the text of a file found (--prune keeps them)
    tasks: dict[str, str] = {}  # task id -> source, to follow
    sources: dict[str, str] = {}  # memory id -> the source of the file it holds (this root's)


def _queue_full(exc: BaseException) -> bool:
    return isinstance(exc, ToolError) and str(exc).startswith("temporarily unavailable")


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool call; a full queue ("temporarily unavailable") is tried again after 1, 2, 4...
    up to 30 s, ``RETRIES`` times in all."""
    retrying = tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(_queue_full), reraise=True,
        stop=tenacity.stop_after_attempt(RETRIES), wait=tenacity.wait_exponential(max=30))
    return (await retrying(client.call_tool, tool, arguments)).structured_content


async def stored_files(client: Client, namespace: str, key: str, cap: int) -> dict[str, dict]:
    """The memories ingested from the root ``key``: source -> the listed memory."""
    found: dict[str, dict] = {}
    cursor = None
    while len(found) <= cap:
        page = await call(client, "list_memories", namespace=namespace, limit=LIST_PAGE,
                          filters={"metadata": {"root": key}}, cursor=cursor)
        found.update((m["source"], m) for m in page["memories"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return found


def batches(items: Iterator[tuple[Loaded, dict | None]]
            ) -> Iterator[list[tuple[Loaded, dict | None]]]:
    batch: list[tuple[Loaded, dict | None]] = []
    chars = 0
    for item in items:
        if batch and (len(batch) >= BATCH_ITEMS or chars + len(item[0].text) > BATCH_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(item)
        chars += len(item[0].text)
    if batch:
        yield batch


def lead(root: Path) -> str:
    """What a folder's sources begin with: its own name, so that files of two roots differ
    (``json/__init__.py``, ``asyncio/__init__.py``) and source_prefix tells them apart, and
    a file keeps its source whatever else a run names (a file root's source is its name)."""
    name = root.resolve().name
    return f"{name}/" if name and root.is_dir() else ""


def changed_files(root: Path, selection: Selection, stored: dict[str, dict],
                  seen: set[str], tally: Tally, progress: Progress
                  ) -> Iterator[tuple[Loaded, dict | None]]:
    """The files to send, with the memory each replaces; the rest are counted here."""
    key, prefix = root_key(root), lead(root)
    for found in walk_files(root, selection):
        found = msgspec.structs.replace(found, source=prefix + found.source)
        seen.add(found.source)
        item = found if isinstance(found, Skipped) else \
            load_file(found, key, selection.max_bytes)
        progress.update(progress.done + 1)
        if isinstance(item, Skipped):
            tally.skipped.append(item)
            continue
        old = stored.get(item.source)
        if old and old["metadata"].get("file_sha256") == item.metadata["file_sha256"]:
            tally.unchanged += 1
            continue
        yield item, old


async def send(client: Client, namespace: str, batch: list[tuple[Loaded, dict | None]],
               tally: Tally, progress: Progress) -> None:
    items = [{"text": loaded.text, "metadata": loaded.metadata} for loaded, _ in batch]
    tally.sending = len(batch)
    answer = await call(client, "add_memories", items=items, namespace=namespace)
    tally.sending = 0
    for (loaded, old), result in zip(batch, answer["results"], strict=True):
        if result.get("stored") is False:
            tally.failed.append(Skipped(loaded.source, result["reason"]))
        elif result["duplicate"] and (old is None or old["memory_id"] == result["memory_id"]):
            same_text(loaded.source, result, tally)
        else:
            await queued(client, namespace, loaded.source, old, result, tally)
    progress.update(progress.done, note=queued_note(tally))


def same_text(source: str, result: dict, tally: Tally) -> None:
    """A file whose text a memory holds already: one memory, so the file is skipped, naming
    the file whose text it is (stored, or read in this run), else the memory. A memory still
    being written for an earlier run (stopped with Ctrl-C) is followed here as this file's."""
    mid = result["memory_id"]
    tally.kept.add(mid)
    twin = tally.sources.get(mid)
    if twin is None and result["status"] in ACTIVE:
        tally.sources[mid] = tally.tasks[result["task_id"]] = source
        tally.added += 1
        return
    tally.same += 1
    held = twin or f"memory {mid}, stored already"  # from another root, or not from a file
    tally.skipped.append(Skipped(source, f"the same text as {held}: one memory holds both"))


def queued_note(tally: Tally) -> str:
    same = (f"; {tally.same:,} " + ("file holds" if tally.same == 1 else "files hold")
            + " the text of another") if tally.same else ""
    return f"{len(tally.tasks):,} tasks queued{same}"


async def queued(client: Client, namespace: str, source: str, old: dict | None,
                 result: dict, tally: Tally) -> None:
    """A file queued as a memory of its own; a changed file's old memory is deleted."""
    tally.sources[result["memory_id"]] = tally.tasks[result["task_id"]] = source
    if old is None:
        tally.added += 1
        return
    deleted = await call(client, "delete_memory", memory_id=old["memory_id"],
                         namespace=namespace)
    tally.tasks[deleted["task_id"]] = source
    tally.replaced += 1


async def prune(client: Client, namespace: str, stored: dict[str, dict], seen: set[str],
                selection: Selection, tally: Tally, prefix: str) -> None:
    """Delete the memories of files that are gone; a file this run's --include/--exclude
    leave out is not gone, so its memory stays, nor is one whose text a file found holds (a
    file renamed: its text is a duplicate of the old name's memory)."""
    for source, memory in stored.items():
        if source not in seen and selected(selection, source.removeprefix(prefix)) and \
                memory["memory_id"] not in tally.kept:
            deleted = await call(client, "delete_memory", memory_id=memory["memory_id"],
                                 namespace=namespace)
            tally.tasks[deleted["task_id"]] = source
            tally.pruned += 1


async def ingest_root(client: Client, root: Path, namespace: str, selection: Selection,
                      pruning: bool, tally: Tally, progress: Progress) -> None:
    stored = await stored_files(client, namespace, root_key(root), selection.max_files)
    for source, memory in stored.items():
        tally.sources.setdefault(memory["memory_id"], source)
    seen: set[str] = set()
    for batch in batches(changed_files(root, selection, stored, seen, tally, progress)):
        await send(client, namespace, batch, tally, progress)
    if pruning:
        await prune(client, namespace, stored, seen, selection, tally, lead(root))


async def follow(client: Client, tally: Tally, progress: Progress) -> None:
    """Poll graph_status until every task has ended. Oldest first (workers take them about
    in that order, so a round reads a record or two), and while the oldest waits, up to
    FOLLOW_AHEAD more, so that the count moves with every task that ends behind it. The note
    says what the oldest waits for (no worker yet, or its worker's words: chunking, the
    first model load, a retry...) and, once its words have stood for a while, since when:
    a record's words hold until its worker writes again."""
    pending = list(tally.tasks)
    said, since = "", time.monotonic()
    while pending:
        waiting = None
        for task_id in pending[:1 + FOLLOW_AHEAD]:
            status = await call(client, "graph_status", task_id=task_id)
            if status["state"] in ACTIVE:
                if waiting is None:
                    waiting = status
                    continue
                break  # the tasks behind a second one waiting are left for a later round
            pending.remove(task_id)
            tally.ended += 1
            if status["state"] != "done":
                reason = status["error"] or status["message"] or status["state"]
                tally.failed.append(Skipped(tally.tasks[task_id], f"{status['state']}: {reason}"))
        if waiting is None:
            progress.update(tally.ended, note="")
            continue
        note = f"waiting for workers: {len(pending):,} queued" \
            if waiting["state"] == "queued" else waiting["message"] or "running"
        if note != said:
            said, since = note, time.monotonic()
        progress.update(tally.ended, note=aged(note, time.monotonic() - since))
        await asyncio.sleep(POLL_SECONDS)


def aged(note: str, seconds: float) -> str:
    """A note as shown: after a minute unchanged, with how long it has stood."""
    return note if seconds < 60 else f"{note}; unchanged for {seconds / 60:.0f} min"


async def ingest(target: Any, roots: list[Path], *, namespace: str = "default",
                 selection: Selection = DEFAULT_SELECTION, pruning: bool = False,
                 token: str = "", show: bool = False, tally: Tally | None = None) -> Tally:
    """Ingest ``roots`` through the front at ``target`` (a URL, or a server in process):
    files read and queued, then the tasks embedded and written, each shown with ``show``.
    ``tally``: where the counts go as they are made (what an interrupted run did)."""
    tally = Tally() if tally is None else tally
    async with Client(target, auth=token or None) as client:
        with Progress("ingest", 0, ("file read", "files read"), quiet=not show) as reading:
            for root in roots:
                await ingest_root(client, root, namespace, selection, pruning, tally, reading)
        tally.following = True
        with Progress("ingest", len(tally.tasks), ("task embedded and written",
                      "tasks embedded and written"), quiet=not show) as writing:
            await follow(client, tally, writing)
    return tally


def summary(tally: Tally, shown: int = 50) -> str:
    lines = [f"added {tally.added}, unchanged {tally.unchanged}, replaced {tally.replaced}, "
             f"pruned {tally.pruned}, skipped {len(tally.skipped)}, "
             f"failed {len(tally.failed)}"]
    for label, items in (("skipped", tally.skipped), ("failed", tally.failed)):
        lines += [f"  {label} {s.source}: {s.reason}" for s in items[:shown]]
        if len(items) > shown:
            lines.append(f"  ... and {len(items) - shown} more {label}")
    return "\n".join(lines)


def interrupted(tally: Tally) -> str:
    """What a run stopped with Ctrl-C did, and that its tasks go on."""
    sending = (f" (and maybe the {tally.sending:,} files being sent when it stopped)"
               if tally.sending else "")
    queued = (f"{len(tally.tasks):,} tasks were queued{sending} and go on in the workers "
              "(nothing queued is undone)")
    if not tally.tasks and not tally.sending:
        return "zapomni ingest: interrupted; nothing was queued"
    if not tally.following:
        return (f"zapomni ingest: interrupted while reading files; {queued}; run the same "
                "command again to send the rest and follow them")
    return (f"zapomni ingest: interrupted; {queued}, {tally.ended:,} of them ended; run the "
            "same command again to follow the rest")


def front_refusal(url: str, exc: MCPError) -> str:
    """One line for an error the front answered outside a tool (the connection refused):
    a token missing or not accepted says which to pass with --token (services/mcp/http.py
    sends the parts in the error's data)."""
    data = exc.data if isinstance(exc.data, dict) else {}
    if exc.code == UNAUTHORIZED_CODE and {"reason", "accepted"} <= set(data):
        return (f"the MCP front at {url} {data['reason']}; pass --token (default: "
                f"ZAPOMNI_MCP_TOKEN) with {data['accepted']}")
    return f"the MCP front at {url} answered: {exc.message}"


def check_roots(paths: list[str]) -> list[Path]:
    roots = []
    for path in paths:
        root = Path(path)
        if not root.exists():
            raise SystemExit(f"zapomni ingest: {path}: no such file or folder")
        roots.append(root)
    return roots


def run(args: Any, url: str, token: str, max_bytes: int) -> int:
    """The subcommand (services/cli/moves.py parses the arguments)."""
    roots = check_roots(args.paths)
    selection = Selection(include=tuple(args.include), exclude=tuple(args.exclude),
                          max_bytes=max_bytes)
    tally = Tally()
    try:
        asyncio.run(ingest(url, roots, namespace=args.namespace, selection=selection,
                           pruning=args.prune, token=token, show=True, tally=tally))
    except KeyboardInterrupt:
        print(interrupted(tally), file=sys.stderr, flush=True)
        return 130
    except ToolError as exc:
        raise SystemExit(f"zapomni ingest: the front refused: {exc}") from None
    except MCPError as exc:
        raise SystemExit(f"zapomni ingest: {front_refusal(url, exc)}") from None
    except (OSError, RuntimeError, ExceptionGroup) as exc:
        raise SystemExit(f"zapomni ingest: cannot talk to the MCP front at {url} "
                         f"({type(exc).__name__}); start it with `zapomni up`, or pass "
                         "--mcp-url and --token") from None
    print(summary(tally))
    return 1 if tally.failed else 0
