"""Graph builds at scale: worker memory while paging through 10k / 50k / 100k chunks, NER on a
sample, and rebuilds cancelled at 10 %, 50 % and 90 %.

    python -m tests.bench.graph_bounds [--chunks 100000] [--sample 1000] [--docs 800]

1. Paging: a namespace of SciFact abstract paragraphs (cycled; memories of 10 chunks, no
   vectors: the graph path reads only text) grows to 10k, 50k and 100k chunks. At each size a
   fresh process runs what a graph task does besides NER: the count, the plan and every
   part's batches read from its cursor (workers/graph.py ``plan`` and ``next_batch``), and
   prints its peak RSS; another fresh process loads every chunk id as the previous version's
   planner did, for comparison. NER of 100k chunks would take ~20 min on 2 cores (~90
   chunks/s): it is measured on a sample instead.
2. NER sample: a worker process builds the graph of ``--sample`` chunks; chunks/s and its
   peak RSS.
3. Cancel: ``--docs`` SciFact abstracts (one chunk per paragraph), a plain build, then a
   rebuild cancelled after 10 %, 50 % and 90 % of its batches (at an exact batch, through
   a worker checkpoint after each batch) and a completed rebuild; entity and relation counts
   of each.
Writes tests/bench/results/graph_bounds.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import redis.asyncio

from tests.bench.retrieval import DATA, RESULTS, jsonl
from tests.support.graph import broken, stored
from tests.support.patched_worker import set_constants
from tests.support.servers import falkordb_process
from tests.support.workers import on_graph_batch, run_workers, wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.api import BuildGraph
from zapomni.shared.protocol.ids import memory_id
from zapomni.shared.protocol.jobs import GraphJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.workers import graph

SIZES = (10_000, 50_000, 100_000)
CREATE = """
UNWIND $rows AS r
CREATE (m:Memory {id: r.id, ready: true, chunk_count: size(r.texts)})
WITH m, r UNWIND range(0, size(r.texts) - 1) AS i
CREATE (m)-[:HAS_CHUNK]->(:Chunk {id: r.id + ':' + toString(i), memory_id: r.id, idx: i,
                                  text: r.texts[i]})
"""
OLD_PLAN = """
MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk)
WHERE m.ready = true AND ($memory_ids IS NULL OR m.id IN $memory_ids)
  AND ($rebuild OR c.entities_at IS NULL)
RETURN c.id ORDER BY c.id
"""


def paragraphs() -> list[str]:
    docs = jsonl(DATA / "scifact" / "corpus.jsonl")
    return [p for d in docs for p in split(f"{d['title']}\n\n{d['text']}")]


def split(text: str, size: int = 1200) -> list[str]:
    """Paragraph-sized pieces of a text (about what one chunk of 256 tokens holds)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def peak_rss_mb(pid: str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def grow(settings: Settings, namespace: str, texts: list[str], have: int,
               want: int) -> None:
    """Add memories of 10 chunks until the namespace holds ``want`` chunks."""
    store = GraphStore(settings)
    try:
        await prepare_namespace(store, namespace, "bench-no-vectors", 8)
        g = store.graph(namespace)
        while have < want:
            rows = []
            for _ in range(100):
                n = have + 10 * len(rows)
                rows.append({"id": memory_id(namespace, f"bench-{n}"),
                             "texts": [texts[(n + i) % len(texts)] for i in range(10)]})
            await run(g, CREATE, {"rows": rows})
            have += 1000
    finally:
        await store.aclose()


async def probe(url: str, namespace: str, how: str) -> dict:
    """In a fresh process: what planning and paging hold (``new``), or the old planner."""
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url)
    store = GraphStore(settings)
    started = time.perf_counter()
    try:
        g = store.graph(namespace)
        if how == "old":
            ids = [row[0] for row in await run(g, OLD_PLAN, {"memory_ids": None,
                                                              "rebuild": True})]
            return {"how": how, "chunks": len(ids), "peak_rss_mb": peak_rss_mb(),
                    "seconds": round(time.perf_counter() - started, 1)}
        job = GraphJob(task_id="task_probe", namespace=namespace, rebuild=True)
        total = int((await run(g, graph.cypher_graph.GRAPH_COUNT, {"memory_ids": None,
                                                             "rebuild": True}))[0][0])
        parts = await graph.plan(g, job, total, graph.PART_CHUNKS)
        res = type("Res", (), {"settings": settings})()
        read = 0
        for part in parts:
            after = part.after
            while rows := await graph.next_batch(res, g, part, after):
                read += len(rows)
                after = rows[-1][0]
        return {"how": how, "chunks": read, "parts": len(parts), "peak_rss_mb": peak_rss_mb(),
                "seconds": round(time.perf_counter() - started, 1)}
    finally:
        await store.aclose()


def probe_process(url: str, namespace: str, how: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tests.bench.graph_bounds", "--probe", how,
                          "--url", url, "--namespace", namespace], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def paging(settings: Settings, texts: list[str], chunks: int) -> list[dict]:
    rows, have = [], 0
    for size in [s for s in SIZES if s <= chunks] or [chunks]:
        await grow(settings, "paging", texts, have, size)
        have = size
        for how in ("new", "old"):
            rows.append({"namespace_chunks": size, **probe_process(settings.falkordb_url,
                                                                   "paging", how)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


async def ner_sample(settings: Settings, texts: list[str], sample: int) -> dict:
    await grow(settings, "sample", texts, 0, sample)
    front = Front(settings)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        receipt = await ops.build_graph(front, BuildGraph(namespace="sample"))
        with worker_processes(settings, 1, constants=LONG_JOBS) as procs:
            peak = 0.0
            waiting = asyncio.create_task(wait_tasks(client, [receipt.task_id], timeout=3600))
            while not waiting.done():
                peak = max(peak, peak_rss_mb(str(procs[0].pid)))
                await asyncio.sleep(0.5)
            await waiting
        record = await tasks.get_task(client, receipt.task_id)
    finally:
        await client.aclose()
        await front.aclose()
    seconds = max(1e-9, record.finished_at - record.started_at)
    return {"chunks": record.total, "chunks_per_s": round(record.total / seconds, 1),
            "worker_peak_rss_mb": peak, "entities": record.entities,
            "relations": record.relations}


async def counts(settings: Settings) -> dict:
    c = await stored(settings, "cancel", graph=True)
    return {"entities": c["entities"], "relations": c["related"], "mentions": c["mentions"],
            "weight_sum": c["evidence"], "chunks_read": c["extracted"]}


async def rebuild_cancelled_at(settings: Settings, front: Front, share: float | None,
                               batches: int) -> dict:
    """A rebuild, cancelled after ``share`` of its batches (None: left to finish)."""
    receipt = await ops.build_graph(front, BuildGraph(namespace="cancel", rebuild=True))
    stop_after = None if share is None else max(1, round(batches * share))
    seen = [0]

    async def cancel_at(job, last_id: str) -> None:
        seen[0] += 1
        if seen[0] == stop_after:
            await ops.cancel_task(front, job.task_id)

    await run_workers(settings, timeout=3600, checkpoint=on_graph_batch(cancel_at))
    task = await ops.task_status(front, receipt.task_id)
    return {"cancel_at": "never" if share is None else f"{share:.0%}", "state": task.state,
            "rewritten": f"{task.done}/{task.total}", **await counts(settings),
            "broken": sum((await broken(settings, "cancel")).values())}


async def cancels(settings: Settings, docs: int) -> list[dict]:
    corpus = jsonl(DATA / "scifact" / "corpus.jsonl")[:docs]
    store = GraphStore(settings)
    try:
        await prepare_namespace(store, "cancel", "bench-no-vectors", 8)
        rows = [{"id": memory_id("cancel", d["_id"]),
                 "texts": split(f"{d['title']}\n\n{d['text']}")} for d in corpus]
        for start in range(0, len(rows), 100):
            await run(store.graph("cancel"), CREATE, {"rows": rows[start : start + 100]})
    finally:
        await store.aclose()
    front = Front(settings)
    try:
        built = await ops.build_graph(front, BuildGraph(namespace="cancel"))
        await run_workers(settings, timeout=3600)
        total = (await ops.task_status(front, built.task_id)).total
        out = [{"cancel_at": "before (plain build)", "state": "done",
                "rewritten": f"0/{total}", **await counts(settings),
                "broken": sum((await broken(settings, "cancel")).values())}]
        print(json.dumps(out[-1]), flush=True)
        batches = -(-total // graph.BATCH)
        for share in (0.1, 0.5, 0.9, None):
            out.append(await rebuild_cancelled_at(settings, front, share, batches))
            print(json.dumps(out[-1]), flush=True)
    finally:
        await front.aclose()
    return out


# as measured: graph parts that read for up to 600 s (SLICE_SECONDS), here and in the worker
# processes
LONG_JOBS = {"zapomni.workers.outcome.SLICE_SECONDS": 600,
             "zapomni.workers.graph.SLICE_SECONDS": 600}


async def bench(args: argparse.Namespace) -> dict:
    set_constants(LONG_JOBS)
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     query_url=f"http://127.0.0.1:{free_port()}",
                                     max_queue_depth=1_000_000, graph_auto=False)
        texts = paragraphs()
        result = {"paging": await paging(settings, texts, args.chunks)}
        result["ner_sample"] = await ner_sample(settings, texts, args.sample)
        print(json.dumps(result["ner_sample"]), flush=True)
        result["cancel"] = await cancels(settings, args.docs)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--docs", type=int, default=800)
    parser.add_argument("--probe", choices=("new", "old"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        print(json.dumps(asyncio.run(probe(args.url, args.namespace, args.probe))))
        return
    result = asyncio.run(bench(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "graph_bounds.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
