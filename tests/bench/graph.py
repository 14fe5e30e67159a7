"""Knowledge-graph benchmark: entity precision on a hand-checked sample, graph-build
throughput with one and two workers, and search latency while a build runs.

    ./dev bench graph [--docs 1500] [--queries 200]

1. Precision: the 50 HotpotQA paragraphs of tests/data/entity_spotcheck.jsonl go through the
   worker's extractor; each stored entity is looked up in the hand-checked list (is it a whole,
   real name in that text?). Entities the list does not cover are counted, not guessed.
2. Throughput: SciFact abstracts are ingested through the front and worker processes with
   automatic extraction off, then ``build_graph(rebuild=True)`` runs with 1 and 2 worker
   processes; chunks/s from the task's start to done.
3. Search while building: hybrid search p50/p95 over SciFact claims with the workers idle and
   again while a rebuild runs.
Vectors come from the retrieval benchmark's cache (tests/bench/.cache) when it has them.
Prints a table and writes tests/bench/results/graph.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.bench.retrieval import (
    DATA,
    LOADERS,
    RESULTS,
    cached_store,
    ingest,
    jsonl,
    percentile,
    reset,
)
from tests.support.servers import ThreadedServer
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.api import BuildGraph, SearchRequest
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.workers.extract import EntityModel

ROOT = Path(__file__).resolve().parents[2]
SPOTCHECK = ROOT / "tests" / "data" / "entity_spotcheck.jsonl"


def precision(settings: Settings) -> dict:
    judged = {(r["doc"], r["name"]): r["correct"] for r in jsonl(SPOTCHECK)}
    ids = {doc for doc, _ in judged}
    docs = [d for d in jsonl(DATA / "hotpotqa_train100" / "corpus.jsonl") if d["_id"] in ids]
    found = EntityModel(settings.spacy_model).extract(
        [f"{d['title']}\n\n{d['text']}" for d in docs])
    verdicts, unjudged = [], 0
    for doc, entities in zip(docs, found, strict=True):
        for name, _, _ in entities.mentions.values():
            if (doc["_id"], name) in judged:
                verdicts.append(judged[(doc["_id"], name)])
            else:
                unjudged += 1
    return {"passages": len(docs), "entities": len(verdicts) + unjudged,
            "precision": round(sum(verdicts) / max(1, len(verdicts)), 3),
            "not_in_the_list": unjudged}


async def build(settings: Settings, workers: int) -> dict:
    front = Front(settings)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        receipt = await ops.build_graph(front, BuildGraph(namespace="scifact", rebuild=True))
        with worker_processes(settings, workers, ZAPOMNI_ONNX_THREADS="1"):
            await wait_tasks(client, [receipt.task_id], timeout=3600)
        record = await tasks.get_task(client, receipt.task_id)
    finally:
        await client.aclose()
        await front.aclose()
    seconds = max(1e-9, record.finished_at - record.started_at)
    rate = record.total / seconds
    return {"workers": workers, "chunks": record.total, "seconds": round(seconds, 1),
            "chunks_per_s": round(rate, 1), "per_worker": round(rate / workers, 1),
            "entities": record.entities, "relations": record.relations}


async def latencies(http: httpx2.AsyncClient, queries: list, until=None) -> list[float]:
    """Hybrid searches, once over the queries, or round and round until ``until`` is set."""
    out = []
    while True:
        for q in queries:
            body = msgspec.json.encode(SearchRequest(query=q.text[:2000], limit=10,
                                                     namespace=q.namespace))
            started = time.perf_counter()
            response = await http.post("/v1/search", content=body,
                                       headers={"content-type": "application/json"})
            response.raise_for_status()
            out.append(time.perf_counter() - started)
            if until is not None and until.is_set():
                return out
        if until is None:
            return out


async def search_during_build(settings: Settings, http: httpx2.AsyncClient,
                              queries: list) -> dict:
    await latencies(http, queries[:20])  # warm the query-embedding cache
    idle = await latencies(http, queries)
    done = asyncio.Event()

    async def rebuild() -> None:
        try:
            await build(settings, 1)
        finally:
            done.set()

    builder = asyncio.create_task(rebuild())
    busy = await latencies(http, queries, until=done)
    await builder
    return {"idle_p50_ms": percentile(idle, 0.5), "idle_p95_ms": percentile(idle, 0.95),
            "building_p50_ms": percentile(busy, 0.5),
            "building_p95_ms": percentile(busy, 0.95), "searches_while_building": len(busy)}


async def run(args: argparse.Namespace, url: str) -> dict:
    query_port = free_port()
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{query_port}",
                                 max_queue_depth=1_000_000, graph_auto=False)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await reset(client)
    await client.aclose()
    result: dict = {"precision": precision(settings)}
    print(json.dumps(result["precision"]), flush=True)
    docs, queries = LOADERS["scifact"]()
    _, seconds, _ = await ingest(settings, docs[:args.docs], workers=2)
    print(f"{args.docs} abstracts searchable in {seconds:.1f}s", flush=True)
    result["build"] = []
    for workers in (1, 2):
        result["build"].append(await build(settings, workers))
        print(json.dumps(result["build"][-1]), flush=True)
    with ThreadedServer(build_app(settings), port=query_port) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
            result["search"] = await search_during_build(settings, http,
                                                         queries[:args.queries])
    print(json.dumps(result["search"]), flush=True)
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=1500)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    async with cached_store() as url:
        result = await run(args, url)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "graph.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
