"""Ingest on a busy host: jobs retried for running over their limit, and throughput against idle.

    ./dev bench busy [--beside none hog suite] [--workload small|longmemeval] [--workers 2]
                     [--memories 2000] [--questions 30] [--hog 4]
                     [--suite "tests/integration -q -p no:cacheprovider"]

The issue 45 targets: under a CPU hog (``--hog`` busy processes) with 2 workers, 0 jobs
retried for running over their limit and ingest throughput >= 0.3x idle; the dev LongMemEval
haystacks ingested turn by turn with the test suite running beside it: it completes, 0
overruns, and its time against the same ingest alone.

For each condition of ``--beside`` (``none``: alone; ``hog``: ``--hog`` processes spinning
the whole run; ``suite``: the test suite, ``.venv/bin/python -m pytest`` with ``--suite``'s
arguments, run again whenever it ends, until the ingest is done), the same workload goes
into a fresh FalkorDB (which is also the queue, as ``zapomni up`` runs it) through the
front's code path, into ``--workers`` real worker processes with the in-process model:

    small        ``--memories`` notes of one to three sentences, added four at a time
    longmemeval  the first ``--questions`` LongMemEval-S dev haystacks
                 (../shared/data/longmemeval_s_dev), every turn one memory (its session the
                 thread, its date the event time), add_memories a session at a time, one
                 namespace per haystack, as the issue's measurement did

Per condition: the time until every memory is searchable (its ingest task done: the ingest
throughput, chunks a second, is of that time) and until the graph task after each has ended
too (``with_graph``), tasks done and failed, and the overruns: jobs retried because they made no
progress for their limit (zapomni_job_stalls_total over the workers) and all retried job runs
(zapomni_jobs_total, outcome retry). The throughput of each condition is given against the
first one's (run ``none`` first). Wall times mean what they say on a quiet host only: the
load average is printed beside them. Prints a table; writes tests/bench/results/busy.json.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx2
import redis.asyncio

from tests.bench.chaos import sentence
from tests.support.graph import stored
from tests.support.stack import free_run
from tests.support.workers import WorkerPool
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.stack.falkordb import ensure_binaries, free_port, start_server, stop_process
from zapomni.shared.protocol.errors import Overloaded, Unavailable
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
SAMPLE = re.compile(r'^(zapomni_job_stalls_total|zapomni_jobs_total)\{([^}]*)\} ([0-9.e+]+)$',
                    re.M)


def small(count: int, seed: int) -> list[list[tuple[str, dict, str]]]:
    """Groups of adds (text, metadata, namespace), each group one call."""
    rng = random.Random(seed)
    notes = [" ".join(sentence(rng, i * 10 + s) for s in range(rng.randint(1, 3)))
             for i in range(count)]
    return [[(text, {}, "busy")] for text in notes]


def longmemeval(questions: int) -> list[list[tuple[str, dict, str]]]:
    """A session's turns a call, haystack after haystack."""
    from tests.bench.longmemeval import load

    calls = []
    for question in load("turns", questions):
        sessions: dict[str, list] = defaultdict(list)
        for item in question.items:
            sessions[item.metadata["thread"]].append((item.text, item.metadata,
                                                      question.namespace))
        calls += list(sessions.values())
    return calls


class Beside:
    """What runs beside the ingest for one condition; stopped by ``stop``."""

    def __init__(self, kind: str, args: argparse.Namespace, log) -> None:
        self.kind, self.args, self.procs, self.log = kind, args, [], log
        self.runs = 0

    def start(self) -> None:
        if self.kind == "hog":
            self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(self.args.hog)]
        elif self.kind == "suite":
            self._suite()

    def _suite(self) -> None:
        self.runs += 1
        self.procs = [subprocess.Popen([sys.executable, "-m", "pytest",
                                        *shlex.split(self.args.suite)], cwd=ROOT,
                                       stdout=self.log, stderr=self.log,
                                       start_new_session=True)]

    def keep_going(self) -> None:
        """The suite again when it has ended (the ingest is not done yet)."""
        if self.kind == "suite" and self.procs and self.procs[0].poll() is not None:
            self._suite()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                if self.kind == "suite":
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, 15)
                else:
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)


async def add_all(settings: Settings, calls: list[list[tuple[str, dict, str]]]) -> list[str]:
    """Every call through the front's add path, four at a time; the ingest task ids."""
    front = Front(settings)
    ids: list[str] = []
    pending = list(calls)

    async def lane() -> None:
        while pending:
            call = pending.pop(0)
            memories = [decode_add_memory(t, m, ns) for t, m, ns in call]
            while True:
                try:
                    receipts = await ops.add_memories(front, memories)
                    break
                except (Overloaded, Unavailable):  # the queue full, Redis slow: retried
                    await asyncio.sleep(1)
            ids.extend(r.task_id for r in receipts if hasattr(r, "task_id"))

    try:
        await asyncio.gather(*(lane() for _ in range(4)))
    finally:
        await front.aclose()
    return ids


async def settle(client: redis.asyncio.Redis, ids: list[str], beside: Beside
                 ) -> tuple[Counter, float]:
    """Until every ingest task and the graph task after it have ended: the states, and when
    the last ingest task ended (every memory searchable), time.monotonic()."""
    pending = list(dict.fromkeys(ids))
    followers: list[str] = []
    states: Counter = Counter()
    searchable = 0.0
    while pending or followers:
        beside.keep_going()
        for group in (pending, followers):
            while group:
                record = await tasks.get_task(client, group[0])
                if record is not None and record.state in tasks.ACTIVE:
                    break
                group.pop(0)
                states[f"{record.kind} {record.state}" if record else "missing"] += 1
                if record is not None and record.kind == "ingest" and record.graph_task_id:
                    followers.append(record.graph_task_id)
        if not pending and not searchable:
            searchable = time.monotonic()
        await asyncio.sleep(1)
    return states, searchable or time.monotonic()


async def overruns(ports: list[int]) -> dict[str, float]:
    totals: Counter = Counter()
    async with httpx2.AsyncClient(timeout=10) as http:
        for port in ports:
            with contextlib.suppress(httpx2.HTTPError):
                text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
                for name, labels, value in SAMPLE.findall(text):
                    if name == "zapomni_job_stalls_total":
                        totals["stalled_jobs"] += float(value)
                    elif 'outcome="retry"' in labels:
                        totals["retried_runs"] += float(value)
    return dict(totals)


async def condition(kind: str, args: argparse.Namespace, calls: list) -> dict:
    data = Path(tempfile.mkdtemp(prefix="zapomni-busy-"))
    port = free_port()
    server = start_server(ensure_binaries(), port, data, persistent=False)
    url = f"redis://127.0.0.1:{port}"
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{free_port()}",
                                 max_queue_depth=1_000_000)
    first = free_run(args.workers)
    ports = [first + i for i in range(args.workers)]
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    load = os.getloadavg()
    try:
        with (RESULTS / f"busy-{kind}.log").open("wb") as log:
            beside = Beside(kind, args, log)
            pool = WorkerPool(settings, log)
            try:
                for p in ports:
                    pool.start(metrics_port=p)
                beside.start()
                started = time.monotonic()
                ids = await add_all(settings, calls)
                added = time.monotonic() - started
                states, searchable = await settle(client, ids, beside)
                elapsed = time.monotonic() - started
                searchable -= started
                counted = await overruns(ports)
            finally:
                beside.stop()
                pool.close()
        chunks = sum([(await stored(settings, ns))["chunks"]
                      for ns in {ns for call in calls for _, _, ns in call}])
    finally:
        await client.aclose()
        stop_process(server, timeout=120)
        shutil.rmtree(data, ignore_errors=True)
    return {"beside": kind, "load_before": round(load[0], 1),
            "load_after": round(os.getloadavg()[0], 1), "added_s": round(added, 1),
            "searchable_s": round(searchable, 1), "elapsed_s": round(elapsed, 1),
            "chunks": chunks, "chunks_per_s": round(chunks / searchable, 2),
            "with_graph_chunks_per_s": round(chunks / elapsed, 2), "suite_runs": beside.runs,
            "stalled_jobs": counted.get("stalled_jobs", 0.0),
            "retried_runs": counted.get("retried_runs", 0.0), "tasks": dict(states)}


async def bench(args: argparse.Namespace) -> list[dict]:
    calls = small(args.memories, args.seed) if args.workload == "small" \
        else longmemeval(args.questions)
    print(f"{args.workload}: {sum(len(c) for c in calls):,} memories in {len(calls):,} calls, "
          f"{args.workers} workers, {os.cpu_count()} cores", flush=True)
    rows = []
    for kind in args.beside:
        rows.append(await condition(kind, args, calls))
        for key in ("chunks_per_s", "with_graph_chunks_per_s"):
            rows[-1][key.replace("chunks_per_s", "vs_first")] = round(
                rows[-1][key] / rows[0][key], 3)
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beside", nargs="+", choices=["none", "hog", "suite"],
                        default=["none", "hog"])
    parser.add_argument("--workload", choices=["small", "longmemeval"], default="small")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--hog", type=int, default=4)
    parser.add_argument("--suite", default="tests/integration -q -p no:cacheprovider")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(bench(args))
    keys = ["beside", "load_before", "load_after", "searchable_s", "elapsed_s", "chunks",
            "chunks_per_s", "vs_first", "with_graph_vs_first", "stalled_jobs", "retried_runs"]
    print("  ".join(f"{k:>12}" for k in keys))
    for row in rows:
        print("  ".join(f"{row[k]!s:>12}" for k in keys))
        print(f"{'':>12}  tasks: {row['tasks']}")
    (RESULTS / "busy.json").write_text(__import__("json").dumps(
        {"workload": args.workload, "workers": args.workers, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
