"""Load: concurrent MCP clients against `zapomni up` (2 workers), over streamable HTTP,
adding SciFact abstracts and asking SciFact claims (../shared/data beside this repository).

    ./dev bench load [--clients 50] [--seconds 60] [--add-share 0.3] [--seed 7]
                     [--add-rate R] [--worker-nice N] [--add-namespace NS]

After a warm-up (10 clients adding for 3 s, then until every job is done), one client
searches alone for 10 s, then every client searches for ``--seconds`` / 4 against the idle
stack (the baseline), then for ``--seconds`` each client loops: add_memory with probability
``--add-share``, else search_memory. With ``--add-share 0 --add-rate R`` the clients only
search while R adds a second come beside them instead (open loop, on sessions of their own:
the workers get the same load whatever search's speed, and as many clients search as in the
idle phases; adds that wait in the front park clients otherwise). Each phase starts once its
clients are connected and have listed the tools. Reports, per phase and tool, calls, errors,
p50/p95/p99 latency at the client, calls/s and calls in flight; the busy/idle ratio of search
p95; chunks and entities written a second during the mixed phase; CPU by process and
FalkorDB queries per search; and whether every accepted memory became searchable afterwards;
then all clients search the settled stack again (the corpus grew meanwhile, so the mixed
phase is compared with both idle phases). Writes tests/bench/results/load.json. The clients
run in this one process and share the machine with the stack: on 2 cores they compete with
it for CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import redis
from fastmcp import Client

from tests.support.mcp import answer
from tests.support.stack import Stack
from zapomni.services.stack.falkordb import cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def scifact(name: str) -> list[dict]:
    with (SCIFACT / name).open() as lines:
        return [json.loads(line) for line in lines]


class Texts:
    """SciFact abstracts to add (each once, in a shuffled order) and its claims to ask."""

    def __init__(self, seed: int) -> None:
        self.docs = [f"{d['title']}\n\n{d['text']}" for d in scifact("corpus.jsonl")]
        random.Random(seed).shuffle(self.docs)
        self.claims = [q["text"] for q in scifact("queries.jsonl")]
        self.add_namespace = "default"  # where the mixed phase adds (searches ask "default")

    def next_doc(self) -> str:
        return self.docs.pop()


ROLES = (("falkordb", "redis-server"), ("query", "zapomni.services.query"),
         ("workers", "zapomni.workers"), ("front", "zapomni.services.mcp"))
ADDERS = 10  # sessions the adds of the mixed phase take turns on
# adds in flight at most beside 50 searching clients: the front refuses past 64 at once
# (services/mcp/http.py, MAX_IN_FLIGHT); at 100, 15% of the calls were refused (2026-11-27)
ADDS_IN_FLIGHT = 10


class Meter:
    """Where the CPU went and what FalkorDB ran, between two readings: each process of the
    stack by role (from /proc), this bench process (the clients), and FalkorDB's own count of
    graph queries (INFO commandstats)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.db = redis.Redis(port=stack.ports["--falkordb-port"])

    def roles(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = defaultdict(list)
        parent = str(self.stack.process.pid)
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if stat.read_text().rsplit(")", 1)[1].split()[1] != parent:
                    continue
                command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            role = next((r for r, mark in ROLES if mark in command), "other")
            found[role].append(int(stat.parent.name))
        return found

    def reading(self) -> dict[str, float]:
        cpu = {role: sum(cpu_seconds(pid) or 0.0 for pid in pids)  # 0: gone meanwhile
                for role, pids in self.roles().items()}
        cpu["clients"] = sum(os.times()[:2])
        stats = {k.lower(): v for k, v in self.db.info("commandstats").items()}
        for command in ("graph.query", "graph.ro_query"):
            cpu[command] = stats.get(f"cmdstat_{command}", {}).get("calls", 0)
        return cpu

    def renice_workers(self, nice: int) -> None:
        """Set each worker's session (autogroup) nice, which is what ranks it against the
        other processes of the stack (workers/resources.py, reads_first)."""
        for pid in self.roles()["workers"]:
            Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")

    @staticmethod
    def between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: round(after.get(k, 0) - before.get(k, 0), 2) for k in after}


class Phase:
    def __init__(self, name: str) -> None:
        self.name = name
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, list[str]] = defaultdict(list)
        self.seconds = 0.0
        self.used: dict[str, float] = {}  # CPU seconds by role, graph queries (Meter)
        self.unsent = 0  # adds not sent: ADDS_IN_FLIGHT were waiting already

    def row(self, tool: str) -> dict:
        ms = np.array(self.latency[tool]) * 1000
        pct = (lambda q: round(float(np.percentile(ms, q)), 1)) if len(ms) else (lambda q: None)
        return {"phase": self.name, "tool": tool, "calls": len(ms) + len(self.errors[tool]),
                "errors": len(self.errors[tool]), "p50_ms": pct(50), "p95_ms": pct(95),
                "p99_ms": pct(99), "per_s": round(len(ms) / self.seconds, 1),
                # calls of this tool in flight on average (Little's law): with adds that wait
                # long, fewer clients search at once in the mixed phase than in an idle one
                "in_flight": round(float(ms.sum()) / 1000 / self.seconds, 1)}


async def one_call(client: Client, phase: Phase, tool: str, args: dict, added: list[str]
                   ) -> None:
    started = time.perf_counter()
    try:
        result = await client.call_tool(tool, args, raise_on_error=False)
    except Exception as exc:  # transport failure: an error the client saw
        phase.errors[tool].append(f"{type(exc).__name__}: {exc}"[:200])
        return
    elapsed = time.perf_counter() - started
    if result.is_error:
        phase.errors[tool].append(result.content[0].text[:200])
    else:
        phase.latency[tool].append(elapsed)
        if tool == "add_memory":
            added.append(result.structured_content["task_id"])


async def client_loop(client: Client, phase: Phase, until: float, add_share: float,
                      rng: random.Random, added: list[str], texts: Texts) -> None:
    while time.monotonic() < until:
        if rng.random() < add_share:
            await one_call(client, phase, "add_memory",
                           {"text": texts.next_doc(), "namespace": texts.add_namespace}, added)
        else:
            await one_call(client, phase, "search_memory",
                           {"query": rng.choice(texts.claims), "limit": 10}, added)


async def adder(sessions: list[Client], phase: Phase, until: float, rate: float,
                added: list[str], texts: Texts) -> None:
    """Adds at ``rate`` a second, each on the next of its own sessions, without waiting for
    the one before (open loop, at most ADDS_IN_FLIGHT at once): the workers get the same
    load whatever search's speed, and every searching client keeps searching."""
    calls: set[asyncio.Task] = set()
    due, turn = time.monotonic(), 0
    while due < until:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        if len(calls) < ADDS_IN_FLIGHT:
            args = {"text": texts.next_doc(), "namespace": texts.add_namespace}
            call = asyncio.create_task(one_call(sessions[turn % len(sessions)], phase,
                                                "add_memory", args, added))
            calls.add(call)
            call.add_done_callback(calls.discard)
        else:
            phase.unsent += 1
        due, turn = due + 1 / rate, turn + 1
    await asyncio.gather(*calls)


async def run_phase(url: str, name: str, clients: int, seconds: float, add_share: float,
                    seed: int, added: list[str], texts: Texts, meter: Meter | None = None,
                    add_rate: float = 0.0) -> Phase:
    """Every client connects and lists the tools (as an agent does once; the MCP client does
    it on a session's first call of each tool) before the phase's clock starts: the phase
    measures calls, not 50 sessions opening at once. ``add_rate``: adds a second beside the
    clients (``adder``)."""
    phase = Phase(name)
    async with contextlib.AsyncExitStack() as opened:
        sessions = await asyncio.gather(*(opened.enter_async_context(Client(url, timeout=60))
                                          for _ in range(clients + (ADDERS if add_rate else 0))))
        await asyncio.gather(*(client.list_tools() for client in sessions))
        started = time.monotonic()
        before = meter.reading() if meter else {}
        adding = asyncio.ensure_future(adder(sessions[clients:], phase, started + seconds,
                                             add_rate, added, texts) if add_rate
                                       else asyncio.sleep(0))
        await asyncio.gather(*(client_loop(client, phase, started + seconds, add_share,
                                           random.Random(seed * 1000 + i), added, texts)
                               for i, client in enumerate(sessions[:clients])))
        phase.seconds = time.monotonic() - started
        if meter:
            phase.used = Meter.between(before, meter.reading())
        await adding
    return phase


async def wait_searchable(url: str, task_ids: list[str], timeout: float = 1800) -> dict:
    """Every accepted add until done; counts by final state and the time it took."""
    started = time.monotonic()
    states: dict[str, int] = defaultdict(int)
    async with Client(url, timeout=60) as client:
        pending = list(task_ids)
        while pending and time.monotonic() - started < timeout:
            still = []
            for task_id in pending:
                state = (await answer(client, "graph_status", {"task_id": task_id}))["state"]
                if state in ("queued", "running"):
                    still.append(task_id)
                else:
                    states[state] += 1
            pending = still
            if pending:
                await asyncio.sleep(1)
        states["unfinished"] = len(pending)
    return {"states": dict(states), "drain_s": round(time.monotonic() - started, 1)}


async def wait_idle(url: str) -> None:
    """Until no job is queued or running (entity extraction goes on after ingest)."""
    async with Client(url, timeout=60) as client:
        while True:
            stats = await answer(client, "get_stats", {})
            if stats["queue_depth"] == 0 and not stats["tasks"].get("running"):
                return
            await asyncio.sleep(1)


async def chunks(url: str) -> dict[str, int]:
    async with Client(url, timeout=60) as client:
        stats = await answer(client, "get_stats", {})
    return {"chunks": stats["chunks"], "entities": stats["entities"]}


async def main_async(args: argparse.Namespace) -> dict:
    texts = Texts(args.seed)
    with tempfile.TemporaryDirectory(prefix="zapomni-load-") as data:
        stack = Stack(Path(data))
        stack.start(workers=2)
        meter = Meter(stack)
        if args.worker_nice is not None:
            meter.renice_workers(args.worker_nice)
        try:
            warm: list[str] = []
            # something to find, and every process warmed up, before measuring
            await run_phase(stack.url, "warm-up", 10, 3, 1.0, args.seed + 1, warm, texts)
            await wait_searchable(stack.url, warm)
            await wait_idle(stack.url)
            single = await run_phase(stack.url, "one client", 1, 10, 0.0, args.seed + 3, [],
                                     texts, meter)
            idle = await run_phase(stack.url, "idle", args.clients, args.seconds / 4, 0.0,
                                   args.seed + 2, [], texts, meter)
            added: list[str] = []
            texts.add_namespace = args.add_namespace
            stored = await chunks(stack.url)
            busy = await run_phase(stack.url, "mixed", args.clients, args.seconds,
                                   args.add_share, args.seed, added, texts, meter,
                                   args.add_rate)
            grown = Meter.between(stored, await chunks(stack.url))
            after = await wait_searchable(stack.url, added)
            await wait_idle(stack.url)
            settled = await run_phase(stack.url, "idle after", args.clients, args.seconds / 4,
                                      0.0, args.seed + 4, [], texts, meter)
        finally:
            stack.stop()
    phases = (single, idle, busy, settled)
    rows = [single.row("search_memory"), idle.row("search_memory"), busy.row("add_memory"),
            busy.row("search_memory"), settled.row("search_memory")]
    # the corpus grows during the mixed phase: compare with the idle phases before and after
    ratio = {"before": round(rows[3]["p95_ms"] / rows[1]["p95_ms"], 2),
             "after": round(rows[3]["p95_ms"] / rows[4]["p95_ms"], 2)}
    errors = {f"{p.name}:{tool}": e[:5] for p in phases
              for tool, e in p.errors.items() if e}
    # what the workers got done while the clients searched: the ingest rate a user sees
    ingest = {k: round(v / busy.seconds, 1) for k, v in grown.items()}
    searches = {p.name: max(1, len(p.latency["search_memory"])) for p in phases}
    return {"clients": args.clients, "seconds": args.seconds, "add_share": args.add_share,
            "add_rate": args.add_rate,
            "add_namespace": args.add_namespace, "worker_nice": args.worker_nice,
            "rows": rows, "search_p95_busy_over_idle": ratio,
            "busy_per_s": ingest,
            "cpu_s": {p.name: p.used for p in phases},
            # CPU ms by role and FalkorDB queries, per search answered
            "per_search": {p.name: {k: round((1 if k.startswith("graph") else 1000) * v
                                             / searches[p.name], 2)
                                    for k, v in p.used.items()} for p in phases},
            "accepted_adds": len(added), "adds_not_sent": busy.unsent, "after": after,
            "error_examples": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--add-share", type=float, default=0.3,
                        help="the share of each client's calls that add in the mixed phase")
    parser.add_argument("--add-rate", type=float, default=0.0,
                        help="instead (with --add-share 0): adds a second beside the "
                             "searching clients, open loop")
    parser.add_argument("--add-namespace", default="default",
                        help="where the mixed phase adds; another than the searched one "
                             "separates FalkorDB's per-graph locking from CPU contention")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--worker-nice", type=int, default=None,
                        help="the workers' session (autogroup) nice instead of the product's "
                             "(0: as before reads first), to measure the lever")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    header = list(result["rows"][0])
    print(" | ".join(header))
    for row in result["rows"]:
        print(" | ".join(str(row[h]) for h in header))
    for key in ("search_p95_busy_over_idle", "busy_per_s", "cpu_s", "per_search",
                "accepted_adds", "adds_not_sent", "after", "error_examples"):
        print(f"{key}: {result[key]}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "load.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
