"""Vector search at 10k and 100k chunks: the HNSW recall/latency curve, search through the
read path, exact numpy beside it, and the memory of every process.

    ./dev bench vectors [--sizes 10000 100000] [--queries 300]
                        [--curve 16:200:10,16:200:100,32:200:10,...] [--curve-large ...]

Chunks are real MiniLM vectors of real text (tests/support/vectors.py: sentences and runs of
adjacent sentences from ../shared/data, embedded once by the in-process model and cached on
disk); queries are the sets' own questions. The stack is `zapomni up` (1 worker). Chunks are
written with the worker's own store functions (write_memory, write_chunks, mark_ready), 25
per memory, straight into FalkorDB: this measures the index, not the embedder.

For each size: the write rate; exact numpy top-10 over the stored float32 vectors (the truth,
and its time per query); for each M:efConstruction:efRuntime in the curve, the index rebuilt
(DROP + CREATE; build time), then every query as a raw queryNodes k=10 (recall@10, FalkorDB's
own execution time and the time at the client) and at k=100, the over-fetch vector search
uses for a 10-result answer; then, with the configured index, search_memory through the
query service over HTTP in vector and hybrid modes with the query embedding cached (each
query asked once before timing). After the largest size: 20 memories added over MCP, then
RSS of FalkorDB, front, query service and worker. Prints tables; writes
tests/bench/results/vectors.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import tempfile
import time
from pathlib import Path

import httpx2
import numpy as np
from fastmcp import Client

from tests.support.stack import Stack
from tests.support.vectors import (
    REAL,
    augmentation_fidelity,
    corpus,
    embedded,
    exact_top,
    questions,
)
from zapomni.shared.embedding.embed import to_params
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import HNSW, GraphStore, indexes_building
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import link_chunks, mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
PER_MEMORY = 25
CURVE = ("16:200:10,16:200:50,16:200:100,16:200:200,32:200:10,32:200:50,32:200:100,"
         "32:200:200,32:400:100")
CURVE_LARGE = "16:200:100,32:200:50,32:200:100,32:200:200"
QUERY_VECTOR = ("CALL db.idx.vector.queryNodes('Chunk', 'embedding', $k, vecf32($v)) "
                "YIELD node RETURN node.id")


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


async def write(store: GraphStore, texts: list[str], vectors: np.ndarray, start: int,
                stop: int, ids: dict[str, int]) -> float:
    """Chunks start..stop as memories of PER_MEMORY chunks, four writers at a time;
    returns chunks/s."""
    graph = store.graph("default")

    async def one(first: int) -> None:
        rows = range(first, min(stop, first + PER_MEMORY))
        text, spans = "", []
        for idx, row in enumerate(rows):
            begin = len(text) + (1 if text else 0)
            text = f"{text}\n{texts[row]}" if text else texts[row]
            spans.append(ChunkSpan(idx=idx, text=texts[row], char_start=begin,
                                   char_end=len(text), tokens=len(texts[row].split())))
        memory = await write_ready(graph, text, spans, vectors[first : first + len(spans)])
        for idx, row in enumerate(rows):
            ids[f"{memory}:{idx}"] = row

    started = time.perf_counter()
    firsts = list(range(start, stop, PER_MEMORY))
    for batch in range(0, len(firsts), 4):
        await asyncio.gather(*(one(f) for f in firsts[batch : batch + 4]))
    return (stop - start) / (time.perf_counter() - started)


async def write_ready(graph, text: str, spans: list[ChunkSpan], vectors: np.ndarray,
                      prop: str = "embedding", linked: bool = False) -> str:
    """One memory of the namespace "default" written as a worker writes it, without the
    queue: its node, its chunks (``linked``: and their NEXT links) and then ready. Returns its
    id, the text's hash."""
    memory = hashlib.sha256(text.encode()).hexdigest()[:32]
    job = IngestJob(task_id=memory, memory_id=memory, namespace="default", text=text,
                    content_hash=memory, created_at=time.time())
    await write_memory(graph, job, len(spans))
    await write_chunks(graph, memory, spans, vectors, prop)
    if linked:
        await link_chunks(graph, memory, len(spans))
    await mark_ready(graph, memory, memory)
    return memory


async def rebuild(graph, m: int, ef_construction: int, ef_runtime: int) -> float:
    """Drop the vector index and create it with these options; seconds until it is usable."""
    await graph.query("DROP VECTOR INDEX FOR (c:Chunk) ON (c.embedding)")
    started = time.perf_counter()
    await graph.query(
        "CREATE VECTOR INDEX FOR (c:Chunk) ON (c.embedding) OPTIONS {dimension: 384, "
        f"similarityFunction: 'cosine', M: {m}, efConstruction: {ef_construction}, "
        f"efRuntime: {ef_runtime}}}")
    while await indexes_building(graph):
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


async def probe(graph, queries: np.ndarray, truth: np.ndarray, ids: dict[str, int],
                k: int) -> dict:
    server, client, hits = [], [], 0
    for vector, want in zip(queries, truth, strict=True):
        started = time.perf_counter()
        result = await graph.ro_query(QUERY_VECTOR, {"k": k, "v": to_params(vector[None, :])[0]})
        client.append((time.perf_counter() - started) * 1000)
        server.append(result.run_time_ms)
        got = {ids[row[0]] for row in result.result_set[:10]}
        hits += len(got & set(want.tolist()))
    return {"recall": round(hits / truth.size, 4), "server_p50": pct(server, 50),
            "server_p95": pct(server, 95), "client_p50": pct(client, 50),
            "client_p95": pct(client, 95)}


def numpy_exact(stored: np.ndarray, queries: np.ndarray) -> dict:
    times = []
    for vector in queries:
        started = time.perf_counter()
        exact_top(stored, vector[None, :])
        times.append((time.perf_counter() - started) * 1000)
    return {"p50": pct(times, 50), "p95": pct(times, 95)}


async def search_service(url: str, texts: list[str], mode: str, secret: str) -> dict:
    """``secret``: the query service's credential (`zapomni up` refuses a call without it)."""
    async with httpx2.AsyncClient(base_url=url, timeout=60,
                                  headers={"Authorization": f"Bearer {secret}"}) as http:
        first, times = [], []  # the first ask embeds the query and fills the caches
        for timed in (first, times):
            for text in texts:
                started = time.perf_counter()
                answer = await http.post("/v1/search", json={"query": text, "mode": mode})
                answer.raise_for_status()
                timed.append((time.perf_counter() - started) * 1000)
    return {"mode": mode, "p50": pct(times, 50), "p95": pct(times, 95), "p99": pct(times, 99),
            "first_p50": pct(first, 50), "first_p95": pct(first, 95)}


def rss_by_process(root_pid: int) -> dict[str, float]:
    """Resident MB of each process under `zapomni up`, named by its command line."""
    out = {}
    for pid, name in children(root_pid).items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # it ended since
            continue
        kb = next(int(line.split()[1]) for line in status.splitlines()
                  if line.startswith("VmRSS:"))
        out[name] = round(kb / 1024, 1)
    return out


def children(root_pid: int) -> dict[int, str]:
    """The processes `zapomni up` started (``root_pid``), each named by its command line."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError):
            continue
        if parent == root_pid:
            out[int(proc.name)] = (
                "falkordb" if "redis-server" in command or "falkordb" in command else
                "front" if "zapomni.services.mcp" in command else
                "query" if "zapomni.services.query" in command else
                "worker" if " -m zapomni.workers" in command else command[:40])
    return out


async def add_some(url: str, count: int) -> None:
    async with Client(url, timeout=60) as client:
        for i in range(count):
            await client.call_tool("add_memory", {
                "text": f"Note {i}: the harbour crane inspection is booked for Tuesday. " * 40})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # until the workers have written them
            stats = (await client.call_tool("get_stats", {})).structured_content
            busy = stats["tasks"].get("queued", 0) + stats["tasks"].get("running", 0)
            if not busy and not stats["memories_ingesting"]:
                return
            await asyncio.sleep(0.5)


def parse_curve(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in point.split(":")) for point in text.split(",") if point]


async def run(args: argparse.Namespace, stack: Stack) -> dict:
    largest = max(args.sizes)
    print(f"vectors for {largest:,} passages and {args.queries} questions "
          "(embedded once, then cached)", flush=True)
    texts, vectors = corpus(largest, args.real)
    fidelity = augmentation_fidelity(texts, vectors, args.real)
    asked = questions(args.queries)
    queries = embedded(asked, progress=False)
    # what FalkorDB holds: the parameters are rounded to 7 decimals, stored as float32
    stored = np.round(vectors.astype(np.float64), 7).astype(np.float32)
    db_url = f"redis://127.0.0.1:{stack.ports['--falkordb-port']}"
    settings = Settings.from_env(environ={}, falkordb_url=db_url, redis_url=f"{db_url}/0")
    store = GraphStore(settings)
    await prepare_namespace(store, "default", OnnxEmbedder.name, 384)
    graph = store.graph("default")
    configured = (HNSW["m"], HNSW["ef_construction"], HNSW["ef_runtime"])
    query_url = f"http://127.0.0.1:{stack.ports['--query-port']}"
    ids: dict[str, int] = {}
    report: dict = {"configured": configured, "real": min(args.real, largest),
                    "augmentation_fidelity": round(fidelity, 4), "sizes": []}
    have = 0
    for size in sorted(args.sizes):
        print(f"writing chunks {have:,}..{size:,}", flush=True)
        rate = await write(store, texts, vectors, have, size, ids)
        have = size
        while await indexes_building(graph):
            await asyncio.sleep(0.1)
        truth = exact_top(stored[:size], queries)
        row = {"chunks": size, "write_per_s": round(rate, 1),
               "numpy_exact_ms": numpy_exact(stored[:size], queries), "curve": []}
        curve = parse_curve(args.curve if size <= 10_000 else args.curve_large)
        for m, efc, efr in curve:
            build = await rebuild(graph, m, efc, efr)
            point = {"M": m, "efConstruction": efc, "efRuntime": efr,
                     "build_s": round(build, 1),
                     "k10": await probe(graph, queries, truth, ids, 10),
                     "k100": await probe(graph, queries, truth, ids, 100)}
            print(f"  {size:,} M {m} efC {efc} efR {efr}: build {build:.1f} s, "
                  f"recall@10 {point['k10']['recall']} (k=100: {point['k100']['recall']}), "
                  f"server p50/p95 {point['k10']['server_p50']}/{point['k10']['server_p95']} "
                  f"ms, client {point['k10']['client_p50']}/{point['k10']['client_p95']} ms",
                  flush=True)
            row["curve"].append(point)
        if curve and curve[-1] != configured:
            row["configured_build_s"] = round(await rebuild(graph, *configured), 1)
        row["configured"] = {"k10": await probe(graph, queries, truth, ids, 10),
                             "k100": await probe(graph, queries, truth, ids, 100)}
        row["search"] = [await search_service(query_url, asked, mode, stack.query_secret)
                         for mode in ("vector", "hybrid")]
        print(f"  {size:,} search_memory (cached query vector): " + ", ".join(
            f"{s['mode']} p50/p95 {s['p50']}/{s['p95']} ms" for s in row["search"]), flush=True)
        report["sizes"].append(row)
    await store.aclose()
    await add_some(stack.url, 20)
    assert stack.process is not None
    report["rss_mb"] = rss_by_process(stack.process.pid)
    report["rss_chunks"] = have
    return report


def tables(report: dict) -> str:
    lines = ["| chunks | M | efC | efR | build s | recall@10 (k=10) | recall@10 (k=100) | "
             "server p50/p95 ms | client p50/p95 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for row in report["sizes"]:
        for p in row["curve"]:
            lines.append(f"| {row['chunks']:,} | {p['M']} | {p['efConstruction']} | "
                         f"{p['efRuntime']} | {p['build_s']} | {p['k10']['recall']} | "
                         f"{p['k100']['recall']} | {p['k10']['server_p50']} / "
                         f"{p['k10']['server_p95']} | {p['k10']['client_p50']} / "
                         f"{p['k10']['client_p95']} |")
    lines += ["", "| chunks | write chunks/s | numpy exact p50/p95 ms | configured recall@10 "
              "(k=10 / k=100) | vector p50/p95 ms | hybrid p50/p95 ms |",
              "|---|---|---|---|---|---|"]
    for row in report["sizes"]:
        c, (v, h) = row["configured"], row["search"]
        lines.append(f"| {row['chunks']:,} | {row['write_per_s']} | "
                     f"{row['numpy_exact_ms']['p50']} / {row['numpy_exact_ms']['p95']} | "
                     f"{c['k10']['recall']} / {c['k100']['recall']} | {v['p50']} / {v['p95']} "
                     f"| {h['p50']} / {h['p95']} |")
    lines += ["", f"{report['real']:,} real vectors; joined pairs' cosine to their true "
              f"embedding {report['augmentation_fidelity']}"]
    lines += ["", f"RSS at {report['rss_chunks']:,} chunks (MB): " + ", ".join(
        f"{name} {mb}" for name, mb in sorted(report["rss_mb"].items()))]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--real", type=int, default=REAL,
                        help="passages embedded by the model; the rest are joined pairs")
    parser.add_argument("--curve", default=CURVE, help="M:efConstruction:efRuntime,... (≤10k)")
    parser.add_argument("--curve-large", default=CURVE_LARGE, help="the same, above 10k")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zapomni-vectors-") as tmp:
        stack = Stack(Path(tmp))
        stack.start(workers=1)
        try:
            report = await run(args, stack)
        finally:
            stack.stop()
    print(tables(report))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "vectors.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
