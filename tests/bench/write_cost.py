"""FalkorDB's CPU per chunk written as a namespace grows, and where it goes.

    ./dev bench write_cost [--sizes 10000 100000 300000] [--probe 384] [--rounds 2]
                           [--writers 2] [--perf] [--delta 10000 100000]
                           [--arms NAME:ENV=VALUE,@GRAPH_CONFIG=VALUE ...]

One FalkorDB server (no persistence: this measures the graph, not the AOF), one namespace
with the product's indexes, filled to each size with the workers' own store functions
(write_memory, write_chunks, link_chunks, mark_ready; memories of 24 chunks, ``--writers``
at once), not through the queue. A chunk is 4 real passages joined by blank lines, its
vector the normalised sum of theirs (real MiniLM vectors of ``TABLE`` passages, embedded
once and cached: tests/support/vectors.py), as the curve's chunks were (docs/benchmarks.md
"The curve to 1M chunks").

- **Fill**: the server's CPU (utime + stime of every thread, /proc) per chunk written, in
  windows of ``WINDOW`` chunks on the way up: the product's whole write, at that size.
- **Probes** at each size: memories of 32 chunks written one statement at a time in variants
  of the product's chunk statement (``VARIANTS``), ``--probe`` chunks a variant a round,
  variants interleaved, ``--rounds`` rounds; each variant's probes deleted before the next.
  Per variant: the server's CPU per chunk and FalkorDB's own "internal execution time" of
  the chunk statement per chunk. The differences attribute the cost: the HNSW insert (vector
  written, indexed or not), the full-text postings (text indexed or not), the HAS_CHUNK
  edge, MERGE against CREATE, the rest. Two probes are not a write of new chunks: a graph
  build's marks set on the HAS_CHUNK edges of stored chunks (``MARKS``, schema version 4)
  and, to compare in the same run, on the chunks themselves as version 3 set them
  (``CHUNK_MARKS``).
- ``--delta``: the product variant again under each DELTA_MAX_PENDING_CHANGES (GRAPH.CONFIG
  SET at run time; FalkorDB's default 10000): a flush of pending matrix changes costs with
  the matrix.
- ``--perf``: ``perf record`` of the server during the last ``PERF_WINDOW`` fill chunks
  before each size; samples grouped by what they run (the Cypher parser, HNSW, full-text,
  GraphBLAS, Redis, kernel, libc) with the top symbols.
- ``--arms``: servers side by side, each started with its environment and GRAPH.CONFIG
  values, filled a window at a time in turn (so each meets the host's load alike).

Prints a table; writes tests/bench/results/write_cost.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import redis.asyncio

from tests.bench.scaling import TABLE, cpu_seconds
from tests.support.vectors import embedded, passages
from zapomni.services.stack.falkordb import ensure_binaries, free_port, start_server, stop_process
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_graph, cypher_memories
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import chunk_rows, link_chunks, mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
DOC_CHUNKS = 24  # chunks a filled memory (the curve's documents: ~24)
PROBE_CHUNKS = 32  # chunks a probe memory (a part)
PASSAGES = 4  # passages a chunk (256 tokens of these sentences)
WINDOW = 5000  # fill chunks a CPU sample
PERF_WINDOW = 3000
MERGE = cypher_memories.MERGE_CHUNKS
OPS = {MERGE: "chunks", cypher_memories.MERGE_MEMORY: "memory", cypher_memories.LINK_CHUNKS:
       "link", cypher_memories.MARK_READY: "ready"}


# what a graph build sets for each chunk it read (the head of
# cypher_graph.REPLACE_CONTRIBUTIONS), on the chunk's HAS_CHUNK edge since schema version 4
MARKS = """UNWIND $chunks AS r
MATCH (c:Chunk {id: r.id})<-[h:HAS_CHUNK]-()
WITH c, h, r, coalesce(h.pairs, []) AS old
SET h.pairs = r.pairs, h.entities_at = $now, h.graph_task = $task
"""
if MARKS not in cypher_graph.REPLACE_CONTRIBUTIONS:
    raise AssertionError("the graph build no longer marks chunks as MARKS does")
# and on the chunk, as version 3 set it: FalkorDB indexes a node again, every field, whenever
# any property of it is set (4.22's GraphHub_UpdateEntityProperties ->
# GraphContext_AddNodeToIndices): measured 1.7 / 1.6 / 1.4x the chunk's own write at
# 10k / 100k / 300k chunks (docs/benchmarks.md)
CHUNK_MARKS = """UNWIND $chunks AS r
MATCH (c:Chunk {id: r.id})
WITH c, r, coalesce(c.pairs, []) AS old
SET c.pairs = r.pairs, c.entities_at = $now, c.graph_task = $task
"""


def variant(old: str, new: str) -> str:
    if old not in MERGE:
        raise AssertionError(f"the chunk statement no longer holds {old!r}")
    return MERGE.replace(old, new)


VECTOR, TEXT = ", c.embedding = vecf32(r.vec)", "c.text = r.text, "
# name: (chunk statement, rows carry the vector); "product" is the workers' whole sequence
VARIANTS = {
    "product": (None, True),
    "chunk statement": (MERGE, True),
    "vector not indexed": (variant(VECTOR, ", c.unindexed = vecf32(r.vec)"), True),
    "no vector": (variant(VECTOR, ""), False),
    "text not indexed": (variant(TEXT, "c.body = r.text, "), True),
    "no edge": (variant("MERGE (m)-[:HAS_CHUNK]->(c)\n", ""), True),
    "CREATE": (variant("MERGE (c:Chunk {id: r.id})", "CREATE (c:Chunk {id: r.id})"), True),
    "CREATE with every property": (
        "MATCH (m:Memory {id: $memory_id})\nUNWIND $rows AS r\n"
        "CREATE (c:Chunk {id: r.id, memory_id: $memory_id, idx: r.idx, text: r.text, "
        "char_start: r.char_start, char_end: r.char_end, tokens: r.tokens, words: r.words, "
        "start_line: r.start_line, end_line: r.end_line, embedding: vecf32(r.vec)})\n"
        "MERGE (m)-[:HAS_CHUNK]->(c)\n", True),
    "graph marks on stored chunks": (MARKS, False),
    "graph marks on the chunks (version 3)": (CHUNK_MARKS, False),
    "id and edge only": ("MATCH (m:Memory {id: $memory_id})\nUNWIND $rows AS r\n"
                         "MERGE (c:Chunk {id: r.id}) SET c.memory_id = $memory_id\n"
                         "MERGE (m)-[:HAS_CHUNK]->(c)\n", False),
}


class Timed:
    """A graph whose write queries add FalkorDB's internal execution time by statement."""

    def __init__(self, graph) -> None:
        self.graph, self.ms = graph, {}

    def __getattr__(self, name: str):
        return getattr(self.graph, name)

    async def query(self, query: str, params: dict | None = None, **kw):
        result = await self.graph.query(query, params, **kw)
        op = OPS.get(query, "chunks" if "UNWIND $rows" in query else "other")
        self.ms[op] = self.ms.get(op, 0.0) + result.run_time_ms
        return result


class Chunks:
    """Chunks made of real passages: text and vector of each, drawn at random (seeded)."""

    def __init__(self, real: int) -> None:
        self.texts = passages(real)
        self.vectors = embedded(self.texts)
        self.rng = np.random.default_rng(7)

    def make(self, count: int) -> tuple[list[ChunkSpan], np.ndarray]:
        picks = [self.rng.choice(len(self.texts), PASSAGES, replace=False) for _ in range(count)]
        spans, at = [], 0
        for idx, pick in enumerate(picks):
            text = "\n\n".join(self.texts[i] for i in pick)
            spans.append(ChunkSpan(idx=idx, text=text, char_start=at, char_end=at + len(text),
                                   tokens=len(text.split())))
            at += len(text) + 2
        vectors = np.vstack([self.vectors[p].sum(axis=0) for p in picks])
        return spans, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def job(memory: str, spans: list[ChunkSpan]) -> IngestJob:
    return IngestJob(task_id=memory, memory_id=memory, namespace="default",
                     text="\n\n".join(s.text for s in spans), content_hash=memory,
                     created_at=time.time())


async def write_doc(graph, memory: str, spans: list[ChunkSpan], vectors: np.ndarray) -> None:
    """One memory as an ingest job of one part writes it."""
    await write_memory(graph, job(memory, spans), len(spans))
    await write_chunks(graph, memory, spans, vectors)
    await link_chunks(graph, memory, len(spans))
    await mark_ready(graph, memory, memory)


class Filler:
    def __init__(self, graph, chunks: Chunks, pid: int, writers: int) -> None:
        self.graph, self.chunks, self.pid, self.writers = graph, chunks, pid, writers
        self.have, self.docs, self.windows = 0, 0, []

    async def to(self, target: int) -> None:
        """Memories written until ``target`` chunks; a CPU sample every WINDOW chunks."""
        while self.have < target:
            step = min(WINDOW - self.have % WINDOW, target - self.have)
            cpu, started, first = cpu_seconds(self.pid), time.perf_counter(), self.have
            await self.write(step)
            seconds, used = time.perf_counter() - started, cpu_seconds(self.pid) - cpu
            self.windows.append({"from": first, "to": self.have,
                                 "cpu_ms_per_chunk": round(used * 1000 / (self.have - first), 3),
                                 "chunks_per_s": round((self.have - first) / seconds, 1)})
            print(f"  fill {first:,} -> {self.have:,}: {self.windows[-1]}", flush=True)

    async def write(self, count: int) -> None:
        end = self.have + count
        while self.have < end:
            sizes = [min(DOC_CHUNKS, end - self.have - DOC_CHUNKS * i)
                     for i in range(self.writers)]
            docs = [(f"fill-{self.docs + i}", *self.chunks.make(n))
                    for i, n in enumerate(sizes) if n > 0]
            await asyncio.gather(*(write_doc(self.graph, *doc) for doc in docs))
            self.docs += len(docs)
            self.have += sum(len(doc[1]) for doc in docs)


async def marks(graph, pid: int, stored: int, count: int, rng: np.random.Generator,
                statement: str) -> dict:
    """``statement`` (MARKS or CHUNK_MARKS) on ``count`` chunks of the filled memories
    (``stored`` of them), PROBE_CHUNKS a statement, as a graph build marks the chunks it
    read."""
    timed = Timed(graph)
    ids = [f"fill-{doc}:{i}" for doc in rng.choice(stored, count // DOC_CHUNKS + 1, replace=False)
           for i in range(DOC_CHUNKS)][:count]
    cpu, started = cpu_seconds(pid), time.perf_counter()
    for at in range(0, len(ids), PROBE_CHUNKS):
        rows = [{"id": cid, "pairs": ["a b"]} for cid in ids[at : at + PROBE_CHUNKS]]
        await timed.query(statement, {"chunks": rows, "now": time.time(), "task": "probe"})
    return {"cpu_s": cpu_seconds(pid) - cpu, "wall_s": time.perf_counter() - started,
            "chunks": len(ids), **{f"{op}_ms": ms for op, ms in timed.ms.items()}}


async def probe(graph, chunks: Chunks, pid: int, name: str, count: int, tag: str) -> dict:
    """``count`` chunks written in memories of PROBE_CHUNKS by the variant ``name``, one
    statement at a time; then deleted. CPU and internal ms per chunk of the chunk statement."""
    statement, with_vector = VARIANTS[name]
    timed = Timed(graph)
    docs = [(f"probe-{tag}-{i}", *chunks.make(PROBE_CHUNKS)) for i in range(count // PROBE_CHUNKS)]
    cpu, started = cpu_seconds(pid), time.perf_counter()
    for memory, spans, vectors in docs:
        if statement is None:
            await write_doc(timed, memory, spans, vectors)
            continue
        await write_memory(timed, job(memory, spans), len(spans))
        rows, _ = chunk_rows(memory, spans, vectors)
        if not with_vector:
            rows = [{k: v for k, v in row.items() if k != "vec"} for row in rows]
        await timed.query(statement, {"memory_id": memory, "rows": rows})
    used, seconds = cpu_seconds(pid) - cpu, time.perf_counter() - started
    for memory, _, _ in docs:
        await graph.query("MATCH (c:Chunk {memory_id: $id}) DETACH DELETE c", {"id": memory})
        await graph.query(cypher_memories.DELETE_MEMORY, {"id": memory})
    written = len(docs) * PROBE_CHUNKS
    return {"cpu_s": used, "wall_s": seconds, "chunks": written,
            **{f"{op}_ms": ms for op, ms in timed.ms.items()}}


async def probes(graph, client, chunks: Chunks, pid: int, args: argparse.Namespace,
                 stored: int) -> dict:
    """Every variant ``--rounds`` times, interleaved; then the product under each ``--delta``."""
    runs = [(name, None) for name in VARIANTS] * args.rounds
    runs += [("product", delta) for delta in args.delta] * args.rounds
    totals: dict[str, dict] = {}
    for i, (name, delta) in enumerate(runs):
        key = name if delta is None else f"product, DELTA_MAX_PENDING_CHANGES {delta}"
        if delta is not None:
            was = (await client.execute_command("GRAPH.CONFIG", "GET",
                                                "DELTA_MAX_PENDING_CHANGES"))[1]
            await client.execute_command("GRAPH.CONFIG", "SET", "DELTA_MAX_PENDING_CHANGES", delta)
        if VARIANTS[name][0] in (MARKS, CHUNK_MARKS):
            one = await marks(graph, pid, stored, args.probe, chunks.rng, VARIANTS[name][0])
        else:
            one = await probe(graph, chunks, pid, name, args.probe, str(i))
        if delta is not None:
            await client.execute_command("GRAPH.CONFIG", "SET", "DELTA_MAX_PENDING_CHANGES", was)
        total = totals.setdefault(key, {})
        for k, v in one.items():
            total[k] = total.get(k, 0) + v
    return {key: per_chunk(t) for key, t in totals.items()}


def per_chunk(total: dict) -> dict:
    n = total["chunks"]
    out = {"chunks": n, "cpu_ms": round(total["cpu_s"] * 1000 / n, 3),
           "chunks_per_s": round(n / total["wall_s"], 1)}
    for key, ms in total.items():
        if key.endswith("_ms"):
            out[f"internal_{key}"] = round(ms / n, 3)
    out["internal_ms"] = round(sum(v for k, v in total.items() if k.endswith("_ms")) / n, 3)
    return out


# ---- perf: what the server runs, by symbol, grouped ----
GROUPS = (  # first match wins; a symbol of the module without a name takes its nearest
    ("HNSW insert", re.compile(r"HNSW|hnsw|FP32_|VecSim|vecsim|Visited|float, unsigned int")),
    ("Cypher parser", re.compile(r"^cypher_|^yy|libcypher")),
    ("full-text index", re.compile(r"Indexer|InvertedIndex|ForwardIndex|Tokeniz|[Ss]temmer|"
                                   r"sb_|Trie|DocTable|IndexSpec|RediSearch|RSIndex|Document_|"
                                   r"RS_|Buffer_|IndexBlock|encode|Varint|nu_|Synonym")),
    ("GraphBLAS / matrices", re.compile(r"^GB_|^GrB_|^GxB_|Delta_Matrix|Tensor|^_Graph|Graph_")),
)
LINE = re.compile(r"^\s+([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.+?)(?:\s+-\s+-)?\s*$")


def module_symbols(module: Path) -> tuple[list[int], list[str]]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(module)], capture_output=True,
                         text=True, check=True).stdout
    rows = sorted((int(p[0], 16), p[2]) for p in (line.split() for line in out.splitlines())
                  if len(p) == 3)
    return [r[0] for r in rows], [r[1] for r in rows]


def group(dso: str, symbol: str, table: tuple[list[int], list[str]]) -> tuple[str, str]:
    if dso == "falkordb.so" and symbol.startswith("0x"):
        at = bisect.bisect_right(table[0], int(symbol, 16)) - 1
        symbol = f"{table[1][at]}+" if at >= 0 else symbol
    if dso == "[kernel.kallsyms]":
        return "kernel", symbol
    if dso.startswith("redis-server"):
        return "Redis", symbol
    if dso.startswith("libc"):
        return f"libc ({'strcmp' if 'strcmp' in symbol else 'other'})", symbol
    name = next((g for g, pattern in GROUPS if pattern.search(symbol)), "other FalkorDB")
    return name, symbol


def perf_report(path: Path, table) -> dict:
    out = subprocess.run(["perf", "report", "-i", str(path), "--stdio", "--no-children",
                          "--sort", "dso,symbol"], capture_output=True, text=True).stdout
    groups: dict[str, float] = {}
    symbols: dict[str, float] = {}
    for line in out.splitlines():
        if match := LINE.match(line):
            share, dso, symbol = float(match[1]), match[2], match[4]
            name, symbol = group(dso, symbol, table)
            groups[name] = groups.get(name, 0.0) + share
            symbols[symbol] = symbols.get(symbol, 0.0) + share
    top = sorted(symbols.items(), key=lambda kv: -kv[1])[:15]
    return {"groups": {k: round(v, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])},
            "top": {k: round(v, 1) for k, v in top}}


class Perf:
    def __init__(self, pid: int, path: Path) -> None:
        self.path = path
        self.process = subprocess.Popen(["perf", "record", "-F", "499", "-p", str(pid),
                                         "-o", str(path)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # perf attaches

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(30)


# ---- the run ----

class Arm:
    """One server (``env``: what its process runs with; ``config``: GRAPH.CONFIG SET on it),
    its namespace and its filler."""

    def __init__(self, name: str, env: dict[str, str], config: dict[str, str], binaries,
                 work: Path, args) -> None:
        self.name, self.work, self.args, self.config = name, work / name, args, config
        port = free_port()
        self.process = start_server(binaries, port, self.work, persistent=False,
                                    env={**os.environ, **env})
        self.pid = self.process.pid
        url = f"redis://127.0.0.1:{port}"
        self.store = GraphStore(Settings.from_env(environ={}, falkordb_url=url,
                                                  redis_url=f"{url}/0"))
        self.client = redis.asyncio.Redis.from_url(url)
        self.graph = self.store.graph("default")
        self.chunks = Chunks(args.real)  # the same chunks in every arm (one seed)
        self.filler = Filler(self.graph, self.chunks, self.pid, args.writers)

    async def measure(self, size: int, table) -> dict:
        row: dict = {"arm": self.name, "size": size}
        if table is not None:
            recorder = Perf(self.pid, self.work / f"perf-{size}.data")
            cpu, first = cpu_seconds(self.pid), self.filler.have
            await self.filler.to(size)
            recorder.stop()
            row["perf"] = perf_report(recorder.path, table)
            row["perf"]["cpu_ms_per_chunk"] = round(
                (cpu_seconds(self.pid) - cpu) * 1000 / (self.filler.have - first), 3)
        row["fill_window"] = self.filler.windows[-1]
        row["probes"] = await probes(self.graph, self.client, self.chunks, self.pid, self.args,
                                     self.filler.docs)
        row["rss_mb"] = round(rss_kb(self.pid) / 1024, 1)
        row["huge_pages_mb"] = round(rss_kb(self.pid, "AnonHugePages:", "smaps_rollup") / 1024, 1)
        row["loadavg"] = os.getloadavg()
        print(json.dumps(row), flush=True)
        return row

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.store.aclose()
        stop_process(self.process)


async def run(arms: list[Arm], module: Path, args) -> list[dict]:
    """Every arm filled a window at a time in turn (so each meets the host's load alike),
    and measured at each size in turn."""
    table = module_symbols(module) if args.perf else None
    for arm in arms:
        for key, value in arm.config.items():
            await arm.client.execute_command("GRAPH.CONFIG", "SET", key, value)
        await prepare_namespace(arm.store, "default", "bench", 384)
    rows = []
    for size in sorted(args.sizes):
        before = max(0, size - PERF_WINDOW) if args.perf else size
        while any(arm.filler.have < before for arm in arms):
            for arm in arms:
                await arm.filler.to(min(before, arm.filler.have + WINDOW))
        for arm in arms:
            rows.append(await arm.measure(size, table))
    return rows


def rss_kb(pid: int, field: str = "VmRSS:", name: str = "status") -> int:
    status = Path(f"/proc/{pid}/{name}").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith(field))


ATTRIBUTION = (  # (what, minuend, subtrahend) of the probes' per-chunk costs
    ("HNSW insert", "chunk statement", "vector not indexed"),
    ("vector sent and stored", "vector not indexed", "no vector"),
    ("full-text postings", "chunk statement", "text not indexed"),
    ("HAS_CHUNK edge", "chunk statement", "no edge"),
    ("MERGE against CREATE", "chunk statement", "CREATE"),
    ("SET after CREATE", "CREATE", "CREATE with every property"),
    ("memory, links, ready", "product", "chunk statement"),
)


def report(rows: list[dict]) -> str:
    sizes = [r["size"] for r in rows]
    several = len({r["arm"] for r in rows}) > 1
    head = " | ".join(f"{r['arm'] + ' ' if several else ''}{r['size']:,}" for r in rows)
    lines = [f"| server CPU ms per chunk (FalkorDB internal ms) | {head} |",
             "|---|" + "---|" * len(sizes)]
    for key in rows[0]["probes"]:
        cells = [f"{r['probes'][key]['cpu_ms']} ({r['probes'][key]['internal_ms']})"
                 for r in rows]
        lines.append(f"| {key} | {' | '.join(cells)} |")
    for what, a, b in ATTRIBUTION:
        cells = [f"{round(r['probes'][a]['cpu_ms'] - r['probes'][b]['cpu_ms'], 3)} "
                 f"({round(r['probes'][a]['internal_ms'] - r['probes'][b]['internal_ms'], 3)})"
                 for r in rows]
        lines.append(f"| = {what} | {' | '.join(cells)} |")
    lines.append(f"| fill, product, last window | "
                 f"{' | '.join(str(r['fill_window']['cpu_ms_per_chunk']) for r in rows)} |")
    if "perf" in rows[0]:
        names = sorted({g for r in rows for g in r["perf"]["groups"]})
        for name in names:
            cells = [f"{r['perf']['groups'].get(name, 0.0)}%" for r in rows]
            lines.append(f"| perf: {name} | {' | '.join(cells)} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--probe", type=int, default=384, help="chunks a variant a round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writers", type=int, default=2, help="fill writers at once")
    parser.add_argument("--delta", type=int, nargs="*", default=[],
                        help="DELTA_MAX_PENDING_CHANGES values to probe the product under")
    parser.add_argument("--perf", action="store_true", help="perf record the fill")
    parser.add_argument("--real", type=int, default=TABLE, help="real passages embedded")
    parser.add_argument("--arms", nargs="+", default=["default:"],
                        help="servers side by side, NAME:ENV=VALUE,@GRAPH_CONFIG=VALUE,... each")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}", flush=True)
    binaries = ensure_binaries()
    with tempfile.TemporaryDirectory(prefix="zapomni-write-cost-") as tmp:
        arms = []
        try:
            for spec in args.arms:
                name, _, rest = spec.partition(":")
                pairs = [e.split("=", 1) for e in rest.split(",") if e]
                arms.append(Arm(name, {k: v for k, v in pairs if not k.startswith("@")},
                                {k[1:]: v for k, v in pairs if k.startswith("@")},
                                binaries, Path(tmp), args))
            rows = await run(arms, binaries[1], args)
        finally:
            for arm in arms:
                await arm.aclose()
    print(report(rows))
    print(f"load average {os.getloadavg()}", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "write_cost.json").write_text(json.dumps(
        {"rows": rows, "fill": {arm.name: arm.filler.windows for arm in arms}}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
