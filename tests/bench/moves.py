"""Moving a namespace: export peak memory at 2k / 5k / 10k memories, export and import rates,
and whether the copy answers 100 queries with the same top 10.

    ./dev bench moves [--sizes 2000 5000 10000] [--queries 100] [--workers 2]

A local FalkorDB server (also the queue's Redis), a fake Ollama serving hash vectors (384-d,
deterministic: this measures moving, not embedding; tests/support/fake_ollama.py), passages
of the evaluation sets (tests/support/vectors.py) written with the worker's own store
functions into one namespace, growing to each size in turn. At each size ``zapomni export
--vectors`` runs as its own process and its peak RSS is read from the kernel (wait4): flat
across sizes means the export holds a page, not the namespace. The largest export is then
imported into a fresh namespace by ``zapomni import``'s code with real worker processes
(the file's vectors are reused: nothing is embedded), and the queries (the sets' questions)
are asked of both namespaces by search_memory (hybrid, keyword and vector, limit 10): how
many answers are identical, and how many hold the same 10 memories. Prints a table; writes
tests/bench/results/moves.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import redis.asyncio

from tests.support.fake_ollama import FakeOllama
from tests.support.servers import ThreadedServer, falkordb_server
from tests.support.vectors import passages, questions
from tests.support.workers import UNCACHED, worker_processes
from zapomni.services.cli.restore import import_file
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.ids import memory_id, new_task_id
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
SOURCE, COPY = "moves-source", "moves-copy"
MODEL = "hash-384"
MODES = ("hybrid", "keyword", "vector")


async def grow(settings: Settings, texts: list[str], start: int, end: int) -> None:
    """Memories ``start``..``end`` of ``texts``, written as a worker writes them."""
    store = GraphStore(settings)
    embedder = make_embedder(settings)
    try:
        dim = await embedder.dimension()
        prop = await prepare_namespace(store, SOURCE, embedder.name, dim)
        graph = store.graph(SOURCE)
        for at in range(start, end, 64):
            batch = texts[at:min(end, at + 64)]
            vectors = await embedder.embed(batch)
            for i, text in enumerate(batch):
                job = IngestJob(task_id=new_task_id(), memory_id=memory_id(SOURCE, str(at + i)),
                                namespace=SOURCE, text=text, content_hash=str(at + i),
                                created_at=1.7e9 + at + i, tags=["bench"],
                                metadata_json=json.dumps({"n": at + i}))
                await write_memory(graph, job, 1)
                span = ChunkSpan(idx=0, text=text, char_start=0, char_end=len(text),
                                 tokens=len(text.split()))
                await write_chunks(graph, job.memory_id, [span], vectors[i:i + 1], prop)
                await mark_ready(graph, job.memory_id, job.task_id)
    finally:
        await store.aclose()
        await embedder.aclose()


def export(settings: Settings, path: Path, log: Path) -> tuple[float, float, int]:
    """``zapomni export --vectors`` as a process: (seconds of the process, seconds of the
    export itself as it reports them, peak RSS in kB)."""
    started = time.perf_counter()
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "zapomni.services.stack.main", "export",
                                 "--namespace", SOURCE, "--vectors", "-o", str(path)],
                                env={**os.environ, **settings.to_env()}, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"export failed with code {proc.returncode}: {log.read_text()}")
    said = re.search(r" in ([0-9.]+) s$", log.read_text().strip())
    return time.perf_counter() - started, float(said[1]) if said else 0.0, usage.ru_maxrss


async def top10(settings: Settings, namespace: str, asked: list[str], mode: str
                ) -> list[list[str]]:
    store, queue = GraphStore(settings), redis.asyncio.Redis.from_url(settings.redis_url)
    embedder = make_embedder(settings)
    try:
        return [[hit.memory_id for hit in (await search_memory(
            store, embedder, queue, settings, msgspec.convert(
                {"query": q, "namespace": namespace, "limit": 10, "mode": mode},
                SearchRequest))).results]
            for q in asked]
    finally:
        await store.aclose()
        await queue.aclose()
        await embedder.aclose()


# as measured: no embedding cache, polls every 20 ms
CONSTANTS = {**UNCACHED, "zapomni.workers.main.POLL_DELAY": 0.02}


def run(args: argparse.Namespace) -> dict:
    fake = FakeOllama(models=(MODEL,), dim=384)
    with falkordb_server() as url, ThreadedServer(fake.app) as ollama:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     ollama_url=ollama.url, ollama_model=MODEL,
                                     graph_auto=False, access_tracking=False)
        texts = passages(max(args.sizes))
        work = ROOT / "tests" / "bench" / "results"
        work.mkdir(parents=True, exist_ok=True)
        path = work / "moves-export.jsonl.gz"
        rows, done = [], 0
        for size in sorted(args.sizes):
            asyncio.run(grow(settings, texts, done, size))
            done = size
            process, seconds, rss = export(settings, path, work / "moves-export.log")
            rows.append({"memories": size, "process_s": round(process, 2),
                         "export_s": round(seconds, 2), "export_rate": round(size / seconds),
                         "peak_rss_mb": round(rss / 1024, 1),
                         "file_mb": round(path.stat().st_size / 1e6, 2)})
            print(f"  {size:>6,} memories: export {seconds:6.1f} s ({size / seconds:,.0f}/s; "
                  f"process {process:.1f} s), peak RSS {rss / 1024:.1f} MB, "
                  f"file {path.stat().st_size / 1e6:.1f} MB", flush=True)
        with worker_processes(settings, args.workers, constants=CONSTANTS):
            started = time.perf_counter()
            record = asyncio.run(import_file(settings, path, COPY, show=False))
            imported = time.perf_counter() - started
        asked = questions(args.queries)
        same = {}
        for mode in MODES:
            source = asyncio.run(top10(settings, SOURCE, asked, mode))
            copy = asyncio.run(top10(settings, COPY, asked, mode))
            same[mode] = {"identical_top10": sum(a == b for a, b in zip(source, copy,
                                                                          strict=True)),
                          "same_set": sum(set(a) == set(b) for a, b in zip(source, copy,
                                                                             strict=True)),
                          "nonempty": sum(bool(a) for a in source)}
        path.unlink()
        (work / "moves-export.log").unlink()
    return {"date": "2026-11-24", "exports": rows, "import": {
        "memories": done, "seconds": round(imported, 1), "rate": round(done / imported),
        "state": record.state, "message": record.message, "workers": args.workers},
        "queries": len(asked), "modes": same}


def main() -> None:
    parser = argparse.ArgumentParser(prog="./dev bench moves", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    result = run(parser.parse_args())
    print()
    print("| memories | export s | export memories/s | process s | peak RSS MB | file MB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in result["exports"]:
        print(f"| {row['memories']:,} | {row['export_s']} | {row['export_rate']:,} | "
              f"{row['process_s']} | {row['peak_rss_mb']} | {row['file_mb']} |")
    imp = result["import"]
    print(f"\nimport of {imp['memories']:,} memories with {imp['workers']} workers: "
          f"{imp['seconds']} s ({imp['rate']:,}/s), {imp['state']}: {imp['message']}")
    for mode, same in result["modes"].items():
        print(f"{mode:>8}: identical top-10 for {same['identical_top10']} of "
              f"{result['queries']} queries, the same 10 memories for {same['same_set']} "
              f"({same['nonempty']} with results)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "moves.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
