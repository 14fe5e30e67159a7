"""The curve's legs (tests/bench/curve.py): its state file beside the data, so a stopped run
resumes; and what a leg measured while the workers ingested, from samples of the chunk
count and of the processes' CPU in /proc.

The state (``curve-state.json`` in the data directory) holds the run's configuration, the
number of runs so far, each leg's samples and the rows measured. A leg's figures come from
its samples in pairs of one run (a stop and a resume start a new pair chain): chunks written,
seconds, and the CPU seconds of FalkorDB's server and of the workers between the two, summed
over the pairs; and the same over the pairs that end in the leg's last share ``TAIL`` of its
size, "at the size" (a 100k -> 1M leg averaged from 100k says little about 1M)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import time
from pathlib import Path

from tests.bench.vectors import children
from zapomni.services.stack.falkordb import cpu_seconds
from zapomni.shared.tasks import tasks

STATE = "curve-state.json"
CONFIG = ("workers", "passages", "real", "queries", "window", "preload")  # must match to resume
SAMPLE_S = 10.0  # seconds between samples: ~4 samples in the last 10% of a 100k leg at 260/s
TAIL = 0.9  # "at the size": the pairs that end above this share of the leg's size


def open_state(data_dir: Path, args: argparse.Namespace) -> dict:
    """A new state for a fresh run in an empty ``data_dir``; with ``--resume``, the stopped
    run's, its configuration checked. Either way one more run is counted and saved."""
    path = data_dir / STATE
    config = {name: getattr(args, name) for name in CONFIG}
    if not args.resume:
        if data_dir.exists() and any(data_dir.iterdir()):
            raise SystemExit(f"curve: {data_dir} holds a previous run; --resume continues it, "
                             "or remove the directory (or pass another --data-dir) to start "
                             "again")
        state = {"config": config, "runs": 0, "legs": {}, "rows": []}
    elif not path.exists():
        raise SystemExit(f"curve: nothing to resume in {data_dir} (no {STATE}); run without "
                         "--resume to start a curve there")
    else:
        state = json.loads(path.read_text())
        changed = [f"--{k} {state['config'][k]} (now {v})" for k, v in config.items()
                   if state["config"][k] != v]
        if changed:
            raise SystemExit(f"curve: {data_dir} was measured with {', '.join(changed)}; "
                             "resume with the same options, or start a new --data-dir")
    state["runs"] += 1
    save(data_dir, state)
    return state


def save(data_dir: Path, state: dict) -> None:
    """Written whole to a new file, then renamed over the old: a stop never leaves half."""
    data_dir.mkdir(parents=True, exist_ok=True)
    new = data_dir / f"{STATE}.new"
    new.write_text(json.dumps(state, indent=1))
    os.replace(new, data_dir / STATE)


def measured(state: dict, size: int) -> dict | None:
    """The row of a leg measured at its size (a row stopped early by the deadline is not)."""
    return next((r for r in state["rows"] if r["size"] == size and not r["stopped_early"]),
                None)


def sample(state: dict, size: int, chunks: int, root_pid: int) -> None:
    """One sample of the leg to ``size``: the time, the chunk count, CPU seconds by process."""
    cpu: dict[str, dict[str, float]] = {"falkordb": {}, "worker": {}}
    for pid, name in children(root_pid).items():
        if name in cpu:
            used = cpu_seconds(pid)
            if used is not None:  # None: it ended between the listing and the read
                cpu[name][str(pid)] = used
    leg = state["legs"].setdefault(str(size), {"samples": []})
    leg["samples"].append({"run": state["runs"], "t": round(time.time(), 2), "chunks": chunks,
                           **cpu})


def figures(state: dict, size: int) -> dict:
    """The leg's ingest rate and CPU per chunk written, over the leg and at its size."""
    samples = state["legs"].get(str(size), {"samples": []})["samples"]
    pairs = [(a, b) for a, b in zip(samples, samples[1:], strict=False) if a["run"] == b["run"]]
    return {**totals(pairs), "runs": len({s["run"] for s in samples}),
            "at_size": totals([(a, b) for a, b in pairs if b["chunks"] > TAIL * size])}


def totals(pairs: list[tuple[dict, dict]]) -> dict:
    chunks = sum(b["chunks"] - a["chunks"] for a, b in pairs)
    seconds = sum(b["t"] - a["t"] for a, b in pairs)
    out = {"leg_chunks": chunks, "leg_seconds": round(seconds, 1),
           "ingest_per_s": round(chunks / seconds, 1) if seconds else None}
    for name in ("falkordb", "worker"):
        spent = sum(used(a[name], b[name]) for a, b in pairs)
        out[f"{name}_cpu_ms"] = round(spent * 1000 / chunks, 2) if chunks > 0 else None
    return out


def used(before: dict[str, float], after: dict[str, float]) -> float:
    """CPU seconds between two samples, summed over processes: one restarted between them
    (a new pid) counts from its start."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


async def drain(redis) -> None:
    """Until the jobs a stopped run left in the queue have ended (the workers take them up
    again after a restart), so the leg's count is the driver's own; a line every 30 s."""
    shown = time.perf_counter()
    while depth := await tasks.queue_depth(redis):
        if time.perf_counter() - shown >= 30:
            shown = time.perf_counter()
            print(f"  waiting for {depth} jobs of the stopped run", flush=True)
        await asyncio.sleep(0.5)


def line(row: dict) -> str:
    """One leg as it is measured: the figures issue 34's targets read."""
    end = row["at_size"]
    return (f"leg {row['size']:,}: {row['chunks']:,} chunks"
            f"{' (stopped by the deadline)' if row['stopped_early'] else ''}; ingest "
            f"{row['ingest_per_s']} chunks/s ({end['ingest_per_s']} at the size); CPU per "
            f"chunk written FalkorDB {row['falkordb_cpu_ms']} ms, workers "
            f"{row['worker_cpu_ms']} ms (at the size {end['falkordb_cpu_ms']} / "
            f"{end['worker_cpu_ms']}); FalkorDB RSS {row['falkordb_rss_mb']} MB; vector p50 / "
            f"p95 {row['vector']['p50']} / {row['vector']['p95']} ms; hybrid "
            f"{row['hybrid']['p50']} / {row['hybrid']['p95']} ms; recall@10 "
            f"{row['recall_at_10']}")


def table(rows: list[dict]) -> str:
    lines = ["| chunks | ingest chunks/s: leg (at the size) | CPU ms per chunk written, "
             "FalkorDB / workers: leg (at the size) | FalkorDB RSS MB (KB a chunk) | vector "
             "p50 / p95 ms | hybrid p50 / p95 ms | recall@10 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        end = r["at_size"]
        lines.append(f"| {r['chunks']:,}{' (stopped)' if r['stopped_early'] else ''} | "
                     f"{r['ingest_per_s']} ({end['ingest_per_s']}) | {r['falkordb_cpu_ms']} / "
                     f"{r['worker_cpu_ms']} ({end['falkordb_cpu_ms']} / {end['worker_cpu_ms']})"
                     f" | {r['falkordb_rss_mb']} ({r['rss_per_chunk_kb']}) | "
                     f"{r['vector']['p50']} / {r['vector']['p95']} | {r['hybrid']['p50']} / "
                     f"{r['hybrid']['p95']} | {r['recall_at_10']} |")
    return "\n".join(lines)


def reference(done: list[dict]) -> dict | None:
    """The row a target compares the largest against: the one nearest a tenth of its size
    (100k for 1M), if any other was measured."""
    if len(done) < 2:
        return None
    want = done[-1]["size"] / 10
    return min(done[:-1], key=lambda r: abs(math.log(r["size"] / want)))


def targets(rows: list[dict]) -> str:
    """Issue 34's targets, read from the largest leg measured at its size (they are set at
    1M); a leg stopped by the deadline only when none was."""
    done = [r for r in rows if not r["stopped_early"]] or rows
    if not done:
        return "no leg measured"
    last, ref = done[-1], reference(done)
    end = last["at_size"]
    lines = [f"targets (issue 34, set at 1M) at {last['chunks']:,} chunks:",
             f"  hybrid p95 {last['hybrid']['p95']} ms (<= 50); a first ask's "
             f"{last['hybrid'].get('first_p95', '-')} ms",
             f"  ingest {end['ingest_per_s']} chunks/s at the size, {last['ingest_per_s']} "
             f"over the leg, {last['workers']} workers (>= 250 with 2)"]
    cpu = f"  FalkorDB CPU per chunk written {end['falkordb_cpu_ms']} ms at the size"
    if ref is not None and end["falkordb_cpu_ms"] and ref["at_size"]["falkordb_cpu_ms"]:
        ratio = end["falkordb_cpu_ms"] / ref["at_size"]["falkordb_cpu_ms"]
        cpu += f", {ratio:.2f}x that at {ref['chunks']:,} (<= 1.5x, 1M against 100k)"
    return "\n".join([*lines, cpu + f"; the workers' {end['worker_cpu_ms']} ms"])
