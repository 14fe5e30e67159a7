"""Large document benchmark: one ~1.6 MB text through `zapomni up` and a real MCP client, timed
until its first part is found, its last part is found and its task is done.

    ./dev bench large [--mb 1.6] [--workers 2] [--source /usr/share/doc/git/RelNotes]

The text: git's release notes (Debian's /usr/share/doc/git/RelNotes, real text nobody here
wrote), in version order, joined until --mb megabytes. Starts the stack as the README does
(`zapomni up`, default settings) with --workers workers, waits until every worker has loaded
its model (the stack idle), then calls add_memory through fastmcp's client and polls, every
0.25 s, graph_status of its task and search_memory for a line of the first release note (in
the first part) and a line of the last one: seconds from add_memory until each is found (a
result of this memory whose passage, or a further match listed under it, holds part of that
line) and until the task is done. Prints what the task said as it went (state, progress,
message, ETA) and a table; writes tests/bench/results/large.json. Not part of the test
suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import tempfile
import time
from pathlib import Path

from fastmcp import Client

from tests.bench.files import wait_ready
from tests.support.mcp import call
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path("/usr/share/doc/git/RelNotes")
POLL_S = 0.25


def version_key(path: Path) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path.stem)]


def joined(source: Path, mb: float) -> tuple[str, int]:
    """The notes in version order, joined until ``mb`` MB; and where the last one starts."""
    notes = [p.read_text(errors="replace").strip()
             for p in sorted(source.glob("*.txt"), key=version_key)]
    text, last = "", 0
    for note in notes:
        if len(text.encode()) >= mb * 1_000_000:
            break
        last = len(text) + 2 if text else 0
        text = f"{text}\n\n{note}" if text else note
    return text, last


def a_line(text: str) -> str:
    """The first line of ``text`` with at least eight words, for a query."""
    return next(line.strip(" *-") for line in text.splitlines() if len(line.split()) >= 8)


def found_in(answer: dict, memory_id: str, lo: int, hi: int) -> bool:
    """A result of this memory (or a further match under it) inside ``lo``:``hi``."""
    spans = []
    for hit in answer["results"]:
        if hit["memory_id"] == memory_id:
            spans.append((hit["char_start"], hit["char_end"]))
            spans += [(m["char_start"], m["char_end"]) for m in hit.get("more", [])]
    return any(start < hi and end > lo for start, end in spans)


def said(status: dict) -> tuple:
    progress = status["progress"]
    return (status["state"], f"{progress['done']}/{progress['total']}", status["message"],
            status.get("eta_seconds"))


async def follow(client: Client, text: str, last: int, until: str) -> dict:
    receipt = await call(client, "add_memory", text=text,
                         metadata={"source": "git/RelNotes"})
    started = time.perf_counter()
    memory_id, task_id = receipt["memory_id"], receipt["task_id"]
    first_q, last_q = a_line(text[:last]), a_line(text[last:])
    first_at, last_at = text.index(first_q), text.index(last_q, last)
    times: dict[str, float] = {}
    seen: list[tuple] = []
    while len(times) < 3 and until not in times:
        now = round(time.perf_counter() - started, 2)
        status = await call(client, "graph_status", task_id=task_id)
        if not seen or said(status) != seen[-1][1:]:
            seen.append((now, *said(status)))
        if status["state"] in ("failed", "cancelled"):
            raise AssertionError(f"the task ended {status['state']}: {status['error']}")
        if status["state"] == "done":
            times.setdefault("done", now)
        for name, query, lo in (("first", first_q, first_at), ("last", last_q, last_at)):
            if name not in times and found_in(await call(
                    client, "search_memory", query=query, limit=10), memory_id, lo,
                    lo + len(query)):
                times[name] = now
        if now > 1800:
            raise AssertionError(f"not done after 30 minutes: {times}, {seen[-1]}")
        await asyncio.sleep(POLL_S)
    return {"memory_id": memory_id, "first_query": first_q, "last_query": last_q,
            "first_at": first_at, "last_at": last_at,
            "first_part_found_s": times["first"], "last_part_found_s": times.get("last"),
            "task_done_s": times.get("done"), "done_message": status["message"],
            "said": seen}


async def run(text: str, last: int, workers: int, until: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="zapomni-bench-large-") as data:
        stack = Stack(Path(data))
        stack.start(workers=workers)
        try:
            await wait_ready(f"redis://127.0.0.1:{stack.ports['--falkordb-port']}/0", workers)
            async with Client(stack.url, timeout=120) as client:
                row = await follow(client, text, last, until)
        finally:
            stack.stop()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=1.6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--until", choices=("first", "done"), default="done",
                        help="stop once the first part is found (the rest is not timed)")
    args = parser.parse_args()
    text, last = joined(args.source, args.mb)
    print(f"text: {len(text.encode()):,} bytes, {len(text):,} characters; the last note "
          f"from character {last:,}", flush=True)
    load = os.getloadavg()
    row = asyncio.run(run(text, last, args.workers, args.until))
    row.update(workers=args.workers, bytes=len(text.encode()),
               load_before=[round(x, 2) for x in load],
               load_after=[round(x, 2) for x in os.getloadavg()])
    print("what graph_status said (seconds after add_memory, state, progress, message, "
          "eta_seconds):")
    for line in row["said"]:
        print("  " + " | ".join(str(x) for x in line))
    header = ["workers", "bytes", "first_part_found_s", "last_part_found_s", "task_done_s",
              "done_message"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    print("| " + " | ".join(str(row[h]) for h in header) + " |")
    print(f"host load average (1, 5, 15 min) before: {row['load_before']}, after: "
          f"{row['load_after']}")
    out = ROOT / "tests" / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "large.json").write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
