"""The faults campaign (issue 45): while workers ingest, each fault in turn; then what survived.

    ./dev bench faults [--memories 2000] [--documents 5] [--document-mb 1] [--workers 2]
                       [--faults kill stop falkordb redis disk hog] [--stop-for 180]
                       [--down-for 10] [--disk-for 30] [--hog 4] [--hog-for 120]
                       [--disk-mb 1024] [--add-rate 10] [--onnx] [--seed 7] [--scale 1]

``--scale F`` runs the campaign smaller (or larger): the memories, each document's size and
the stop's and the hog's length times F, the documents times 2F below 0.5 (at least 1
document and 20 memories); the figures of a run say the scale it ran at.

Real servers as compose runs them: a plain Redis of its own as the queue and FalkorDB as the
store, both with AOF, both with their data on one small tmpfs (the data directory's disk; the
campaign mounts it, so it runs as root), the query service, ``--workers`` zapomni-worker
processes, and a real MCP client on the front (in process). The texts (``--memories`` small
ones and ``--documents`` of ``--document-mb``) are added in one wave per fault, by four
clients that retry what is refused as a client would; each fault strikes while its wave is
being added and ingested:

    kill      SIGKILL a worker holding jobs; a new one is started
    stop      SIGSTOP a worker holding jobs for --stop-for seconds, then SIGCONT
    falkordb  stop FalkorDB for --down-for seconds and start it again on its data
    redis     the same for the queue's Redis
    disk      fill the data directory's disk for --disk-for seconds, then free it
    hog       --hog busy processes beside the stack for --hog-for seconds

Per fault: when the front accepted an add again after it, when a task was done again after
it, and (kill, stop) when every job the worker held ran again elsewhere. Afterwards: every
accepted add is done and stored whole or failed with a reason, nothing half-written (the
state checks of tests/support/graph.py), no task waiting, 0 internal errors seen by the
client, and the refusals seen while the disk was full. Embeddings come from the Ollama-API
test server (fast, so the faults, not the model, set the pace) unless ``--onnx``. Prints a
table, writes tests/bench/results/faults.json, exits 1 on a failed check. Not part of the
test suite. Timings on a loaded host say little: report the load beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import redis.asyncio
from fastmcp import Client

from tests.bench.chaos import Server, jobs_of, sentence, worker_id
from tests.support.fake_ollama import FakeOllama
from tests.support.graph import broken, query, stored
from tests.support.servers import ThreadedServer
from tests.support.workers import WorkerPool
from zapomni.services.mcp.server import build_server
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity, heartbeat, tasks
from zapomni.shared.text.chunking import chunker_for
from zapomni.workers.arq_internals import lease_key

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
FAULTS = ("kill", "stop", "falkordb", "redis", "disk", "hog")
CHECK_SECONDS = 1800.0  # how long a state check of the graph may take, afterwards
INTERNAL = "Error calling tool"  # what the client sees of an error the front did not expect


def texts(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    rng = random.Random(args.seed)
    small = [" ".join(sentence(rng, i * 10 + s) for s in range(rng.randint(1, 3)))
             for i in range(args.memories)]
    documents = []
    for d in range(args.documents):
        parts, size, i = [], 0, 0
        while size < args.document_mb * 1_000_000:
            parts.append(sentence(rng, 10_000_000 + d * 1_000_000 + i))
            size += len(parts[-1]) + 1
            i += 1
        documents.append(" ".join(parts))
    return small, documents


@dataclass
class Tally:
    accepted: dict[int, dict] = field(default_factory=dict)  # text index -> receipt
    accepted_at: list[float] = field(default_factory=list)
    refusals: Counter = field(default_factory=Counter)  # message (shortened) -> count
    internal: list[str] = field(default_factory=list)
    other: Counter = field(default_factory=Counter)  # a tool error that is neither
    probes: dict[int, str] = field(default_factory=dict)  # the recovery probes (index < 0)
    wave: dict[int, str] = field(default_factory=dict)  # text index -> the fault of its wave
    fault: str = ""  # the wave being added


class Disk:
    """A tmpfs of ``megabytes`` mounted on a temporary directory: the data directory's disk."""

    def __init__(self, megabytes: int) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="zapomni-faults-"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                        str(self.path)], check=True)
        self.filler = self.path / "filler"

    def fill(self) -> int:
        """Write a file until the disk is full; the bytes written."""
        written = 0
        with contextlib.suppress(OSError), self.filler.open("wb") as out:
            block = b"\0" * (1 << 20)
            while True:
                written += out.write(block)
                out.flush()
        with contextlib.suppress(OSError), self.filler.open("ab") as out:
            while True:  # the last few KB too
                out.write(b"\0" * 4096)
                out.flush()
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remove(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)
        shutil.rmtree(self.path, ignore_errors=True)


async def add_all(client: Client, items: list[tuple[int, str]], tally: Tally,
                  rate: float) -> None:
    """Four clients add the texts, ``rate`` a second in all (so that ingest goes on while a
    fault strikes), retrying what is refused (0.5 s later)."""
    pending = list(items)

    async def lane() -> None:
        while pending:
            index, text = pending.pop(0)
            while True:
                result = await client.call_tool("add_memory", {"text": text},
                                                raise_on_error=False)
                if not result.is_error:
                    tally.accepted[index] = result.structured_content
                    tally.wave[index] = tally.fault
                    tally.accepted_at.append(time.monotonic())
                    await asyncio.sleep(4 / rate)
                    break
                said = result.content[0].text
                if INTERNAL in said:
                    tally.internal.append(said[:200])
                elif said.startswith("temporarily unavailable"):
                    tally.refusals[said[:160]] += 1
                else:
                    tally.other[said[:160]] += 1
                await asyncio.sleep(0.5)

    await asyncio.gather(*(lane() for _ in range(4)))


async def done_since(client: redis.asyncio.Redis, since: float) -> bool:
    """A task finished after ``since`` (wall clock)?"""
    with contextlib.suppress(Exception):
        return await client.zcount(tasks.state_key("*", "done"), since, "+inf") > 0
    return False


async def recovery(ctx: dict, fault: str, ended: float, ended_wall: float,
                   timeout: float = 1800) -> dict:
    """From the fault's end: until the front accepts an add (a probe, added as a client
    would, retrying), and until a task is done (the probe, at the latest)."""
    tally, client = ctx["tally"], ctx["client"]
    index = -1 - len(tally.probes)
    tally.probes[index] = f"A probe after the {fault} fault: the ferry left pier {index}."
    probing = asyncio.create_task(add_all(ctx["mcp"], [(index, tally.probes[index])], tally,
                                          1e9))
    front = progress = None
    deadline = time.monotonic() + timeout
    while (front is None or progress is None) and time.monotonic() < deadline:
        if front is None and index in tally.accepted:
            front = min(t for t in tally.accepted_at if t >= ended) - ended
        if progress is None and await done_since(client, ended_wall):
            progress = time.monotonic() - ended
        await asyncio.sleep(0.2)
    probing.cancel()
    return {"front_back_s": _round(front), "progress_back_s": _round(progress)}


async def victim_with_jobs(pool: WorkerPool, client: redis.asyncio.Redis,
                           adding: asyncio.Task) -> tuple[subprocess.Popen, list[str]]:
    """A worker holding jobs; once the wave's adds are all in and none holds one, any."""
    while True:
        for proc in pool.live():
            held = await jobs_of(client, worker_id(proc))
            if held or adding.done():
                return proc, held
        await asyncio.sleep(0.1)


async def taken_over(client: redis.asyncio.Redis, held: list[str], dead: str,
                     since: float) -> float:
    """Seconds from ``since`` until every job in ``held`` runs elsewhere or has ended."""
    waiting = set(held)
    while waiting:
        for job_id in list(waiting):
            owner = await client.get(lease_key(job_id))
            if (owner is not None and owner != dead.encode()) or (
                    owner is None and await client.zscore(capacity.QUEUE_NAME, job_id) is None):
                waiting.discard(job_id)
        await asyncio.sleep(0.1)
    return round(time.monotonic() - since, 2)


async def strike(fault: str, args: argparse.Namespace, ctx: dict) -> dict:
    """The fault; returns when it is over, with what it measured and when it ended."""
    pool, client = ctx["pool"], ctx["client"]
    out: dict = {"fault": fault}
    if fault in ("kill", "stop"):
        victim, held = await victim_with_jobs(pool, client, ctx["adding"])
        began = time.monotonic()
        if fault == "kill":
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            pool.start()
            out["jobs_taken_over_s"] = await taken_over(client, held, worker_id(victim), began)
        else:
            victim.send_signal(signal.SIGSTOP)
            out["jobs_taken_over_s"] = await taken_over(client, held, worker_id(victim), began)
            await asyncio.sleep(max(0.0, args.stop_for - (time.monotonic() - began)))
            victim.send_signal(signal.SIGCONT)
            back = time.monotonic()
            while worker_id(victim) not in await heartbeat.alive_ids(client):
                await asyncio.sleep(0.2)
            out["stopped_worker_beats_again_s"] = round(time.monotonic() - back, 2)
        out["held_jobs"] = len(held)
    elif fault in ("falkordb", "redis"):
        server = ctx["graph"] if fault == "falkordb" else ctx["queue"]
        server.stop()
        await asyncio.sleep(args.down_for)
        await asyncio.to_thread(server.start)
    elif fault == "disk":
        before = sum(ctx["tally"].refusals.values())
        out["filled_mb"] = round(await asyncio.to_thread(ctx["disk"].fill) / 1e6, 1)
        await asyncio.sleep(args.disk_for)
        out["refusals_while_full"] = sum(ctx["tally"].refusals.values()) - before
        ctx["disk"].free()
    elif fault == "hog":
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(args.hog)]
        done_before = await client.zcard(tasks.state_key("*", "done"))
        try:
            await asyncio.sleep(args.hog_for)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        out["tasks_done_per_s_under_hog"] = round(
            (await client.zcard(tasks.state_key("*", "done")) - done_before) / args.hog_for, 2)
    out["ended"], out["ended_wall"] = time.monotonic(), time.time()
    return out


async def wave(fault: str, items: list[tuple[int, str]], args: argparse.Namespace,
               ctx: dict) -> dict:
    """Add the wave's texts; strike once a third of them is accepted (ingest under way)."""
    tally = ctx["tally"]
    tally.fault = fault
    start = len(tally.accepted)
    adding = ctx["adding"] = asyncio.create_task(add_all(ctx["mcp"], items, tally,
                                                        args.add_rate))
    while len(tally.accepted) - start < len(items) // 3 and not adding.done():
        await asyncio.sleep(0.2)
    result = await strike(fault, args, ctx)
    result.update(await recovery(ctx, fault, result.pop("ended"), result.pop("ended_wall")))
    await adding
    print(json.dumps(result), flush=True)
    return result


async def wait_ended(client: redis.asyncio.Redis, timeout: float) -> dict[str, Counter]:
    """Until every task has ended, the graph tasks that followed the adds too (or
    ``timeout`` s): their states by kind. A task whose job was lost is failed by the workers'
    sweep (every 5 minutes, once it has been quiet for 2)."""
    deadline = time.monotonic() + timeout
    while True:
        states: dict[str, Counter] = {}
        async for key in client.scan_iter(match=tasks.TASK_KEY + "*", count=1000):
            kind, state = await client.hmget(key, "kind", "state")
            states.setdefault(tasks.as_text(kind or b"?"), Counter())[
                tasks.as_text(state or b"missing")] += 1
        active = sum(c[s] for c in states.values() for s in tasks.ACTIVE)
        if not active or time.monotonic() > deadline:
            return states
        await asyncio.sleep(5)


async def checks(settings: Settings, client: redis.asyncio.Redis, every: list[str],
                 tally: Tally) -> dict:
    # the state checks read the whole graph (weight_not_pairs pairs every edge with every
    # chunk): at full size they ran over the 4.5 s a search may take and ended the campaign
    settings = msgspec.structs.replace(settings, request_timeout=CHECK_SECONDS)
    chunker = chunker_for(settings)
    done, failed, reasons = {}, set(), Counter()
    for index, receipt in tally.accepted.items():
        record = await tasks.get_task(client, receipt["task_id"])
        text = every[index] if index >= 0 else tally.probes[index]
        if record is not None and record.state == "done":
            done[receipt["memory_id"]] = len(chunker.split(text))
        else:
            failed.add(receipt["memory_id"])
            reasons[(record.error if record else "record missing")[:160]] += 1
    rows = await query(settings, "MATCH (m:Memory) OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c) "
                                 "RETURN m.id, m.ready, count(c), count(c.embedding)")
    seen = Counter(r[0] for r in rows)
    counts = await stored(settings)
    by_id = {receipt["memory_id"]: index for index, receipt in tally.accepted.items()}
    missing = sorted(set(done) - set(seen))
    missing_by_wave = Counter(tally.wave.get(by_id[m], "?") for m in missing)
    samples = []
    for memory in missing[:3]:
        record = await tasks.get_task(client, tally.accepted[by_id[memory]]["task_id"])
        samples.append({"memory_id": memory, "wave": tally.wave.get(by_id[memory]),
                        "record": record and {k: getattr(record, k) for k in (
                            "task_id", "message", "attempts", "worker", "started_at",
                            "finished_at", "batch", "chunks")}})
    active = []
    async for key in client.scan_iter(match=tasks.TASK_KEY + "*", count=1000):
        record = await tasks.get_task(client, key.decode()[len(tasks.TASK_KEY):])
        if record is not None and record.state in tasks.ACTIVE:
            active.append(f"{record.kind} {record.state}: {record.message}"[:160])
    return {
        "done": len(done), "failed": len(failed), "failed_reasons": dict(reasons),
        "done_missing": len(missing), "done_missing_by_wave": dict(missing_by_wave),
        "done_missing_samples": samples,
        "failed_but_stored": len(failed & set(seen)),
        "memories_doubled": sum(1 for n in seen.values() if n > 1),
        "memories_not_ready": sum(1 for r in rows if r[1] is not True),
        "wrong_chunk_count": sum(1 for r in rows if r[0] in done and r[2] != done[r[0]]),
        "chunks_without_vector": sum(r[2] - r[3] for r in rows),
        "orphan_chunks": counts["orphan_chunks"],
        "next_links_wrong": counts["next"] - (counts["chunks"] - counts["memories"]),
        "tasks_left_active": len(active), "tasks_left_active_samples": active[:5],
        **{f"graph_{name}": n for name, n in (await broken(settings)).items()},
    }


async def campaign(args: argparse.Namespace) -> dict:
    small, documents = texts(args)
    every = small + documents
    order = list(range(len(every)))
    random.Random(args.seed).shuffle(order)
    # a document first in its wave: its parts are jobs under way when the fault strikes
    waves = [sorted(order[i::len(args.faults)], key=lambda k: k < len(small))
             for i in range(len(args.faults))]
    disk = Disk(args.disk_mb)
    queue = Server(module=False, data=disk.path / "redis")
    graph = Server(module=True, data=disk.path / "falkordb")
    fake = FakeOllama(dim=384)
    fake.latency = 0.02
    RESULTS.mkdir(parents=True, exist_ok=True)
    try:
        queue.start()
        graph.start()
        with ThreadedServer(fake.app) as ollama:
            fake.url = ollama.url
            settings = Settings.from_env(
                environ={}, redis_url=f"{queue.url}/0", falkordb_url=graph.url,
                query_url=f"http://127.0.0.1:{free_port()}",
                ollama_url="" if args.onnx else fake.url,
                ollama_model="nomic-embed-text", request_timeout=5.0)
            with ThreadedServer(build_app(settings),
                               port=int(settings.query_url.rsplit(":", 1)[1])):
                return await run(args, settings, every, waves,
                                 {"disk": disk, "queue": queue, "graph": graph})
    finally:
        queue.stop()
        graph.stop()
        disk.remove()


async def run(args: argparse.Namespace, settings: Settings, every: list[str],
              waves: list[list[int]], ctx: dict) -> dict:
    client = redis.asyncio.Redis.from_url(settings.redis_url, socket_timeout=5)
    ctx["client"], ctx["tally"] = client, Tally()
    started, load = time.monotonic(), os.getloadavg()
    with (RESULTS / "faults.log").open("ab") as log:
        ctx["pool"] = pool = WorkerPool(settings, log)
        for _ in range(args.workers):
            pool.start()
        try:
            async with Client(build_server(settings)) as mcp:
                ctx["mcp"] = mcp
                faults = [await wave(fault, [(i, every[i]) for i in items], args, ctx)
                          for fault, items in zip(args.faults, waves, strict=True)]
            states = await wait_ended(client, args.drain_for)
            elapsed = time.monotonic() - started
            final = await checks(settings, client, every, ctx["tally"])
        finally:
            pool.close()
            await client.aclose()
    tally = ctx["tally"]
    result = {"scale": args.scale, "memories": args.memories, "documents": args.documents,
              "document_mb": args.document_mb, "workers": args.workers,
              "embedder": "onnx" if args.onnx else "ollama-api test server",
              "load_at_start": [round(x, 1) for x in load],
              "load_at_end": [round(x, 1) for x in os.getloadavg()],
              "elapsed_s": round(elapsed, 1), "faults": faults, "accepted": len(tally.accepted),
              "task_states": {kind: dict(c) for kind, c in states.items()},
              "internal_errors": len(tally.internal),
              "internal_error_samples": tally.internal[:5], "refusals": dict(tally.refusals),
              "other_errors": dict(tally.other), "checks": final}
    bad = [k for k in ("done_missing", "failed_but_stored", "memories_doubled",
                       "memories_not_ready", "wrong_chunk_count", "chunks_without_vector",
                       "orphan_chunks", "next_links_wrong", "tasks_left_active")
           if final[k]] + [k for k, v in final.items() if k.startswith("graph_") and v]
    if tally.internal or tally.other:
        bad.append("client errors")
    if len(tally.accepted) != len(every) + len(tally.probes):
        bad.append("adds never accepted")
    if "disk" in args.faults and not any("disk" in m or "space" in m for m in tally.refusals):
        bad.append("no clear refusal while the disk was full")
    result["verdict"] = "FAILED: " + ", ".join(bad) if bad else "ok"
    return result


async def cancellable(work):
    """``work``, cancelled by SIGTERM or SIGINT, so that what it started is stopped and the
    disk unmounted (its finally blocks run)."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    return await task


def scaled(args: argparse.Namespace) -> None:
    """The campaign at ``args.scale`` of its size (what is scaled: the module's docstring)."""
    if args.scale != 1.0:
        args.memories = max(20, round(args.memories * args.scale))
        args.documents = max(1, round(args.documents * min(1.0, args.scale * 2)))
        args.document_mb = round(args.document_mb * args.scale, 3)
        args.stop_for *= args.scale
        args.hog_for *= args.scale


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--documents", type=int, default=5)
    parser.add_argument("--document-mb", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=list(FAULTS))
    parser.add_argument("--stop-for", type=float, default=180.0)
    parser.add_argument("--down-for", type=float, default=10.0)
    parser.add_argument("--disk-for", type=float, default=30.0)
    parser.add_argument("--disk-mb", type=int, default=1024)
    parser.add_argument("--hog", type=int, default=4)
    parser.add_argument("--hog-for", type=float, default=120.0)
    parser.add_argument("--drain-for", type=float, default=7200.0,
                        help="seconds to wait for every task to end afterwards")
    parser.add_argument("--add-rate", type=float, default=10.0, help="adds a second")
    parser.add_argument("--onnx", action="store_true", help="the in-process model")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="times the memories, the documents' MB, --stop-for and --hog-for")
    args = parser.parse_args()
    scaled(args)
    if os.geteuid() != 0:
        raise SystemExit("faults: run as root (it mounts a tmpfs as the data directory's disk)")
    result = asyncio.run(cancellable(campaign(args)))
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    (RESULTS / "faults.json").write_text(json.dumps(result, indent=2))
    sys.exit(0 if result["verdict"] == "ok" else 1)


if __name__ == "__main__":
    main()
