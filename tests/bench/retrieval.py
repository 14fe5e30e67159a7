"""Retrieval benchmark on public data (../shared/data), through the product's own paths.

    ./dev bench retrieval [--datasets scifact locomo hotpotqa musique] [--workers 2]
                          [--ollama URL --ollama-model NAME]

Documents go in through the front's code path (validation, task records, the arq queue) and
real worker processes; every query goes through the query service over HTTP in each mode.
Chunk vectors are cached in the benchmark's own FalkorDB/Redis (tests/bench/.cache), keyed by
model and text, so re-runs skip embedding; a first run from nothing works too, slower.
Prints a table and writes tests/bench/results/retrieval.json. Metric definitions:
docs/benchmarks.md, "Retrieval quality".
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.support.servers import ThreadedServer
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query import entities, hits, search
from zapomni.services.query.app import build_app
from zapomni.services.query.search import WEIGHTS
from zapomni.services.stack.falkordb import ensure_binaries, free_port, start_server, stop_process
from zapomni.shared.protocol.answers import SearchHit, SearchResponse
from zapomni.shared.protocol.api import SEARCH_MODES, SearchRequest
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.graphstore import run as run_graph
from zapomni.shared.tasks import tasks

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
CACHE = ROOT / "tests" / "bench" / ".cache"
RESULTS = ROOT / "tests" / "bench" / "results"


@dataclass
class Doc:
    id: str
    text: str
    namespace: str
    metadata: dict = field(default_factory=dict)


@dataclass
class Query:
    id: str
    text: str
    namespace: str
    relevant: set[str]
    category: int = 0


def jsonl(path: Path) -> list[dict]:
    with path.open() as lines:
        return [json.loads(line) for line in lines]


def qrels(path: Path) -> dict[str, set[str]]:
    relevant: dict[str, set[str]] = defaultdict(set)
    for line in path.read_text().splitlines()[1:]:
        qid, doc, score = line.split("\t")
        if int(score) > 0:
            relevant[qid].add(doc)
    return relevant


def load_beir(name: str, folder: str, labels: str) -> tuple[list[Doc], list[Query]]:
    docs = [Doc(d["_id"], f"{d['title']}\n\n{d['text']}".strip(), name)
            for d in jsonl(DATA / folder / "corpus.jsonl")]
    rel = qrels(DATA / folder / "qrels" / labels)
    queries = [Query(q["_id"], q["text"], name, rel[q["_id"]])
               for q in jsonl(DATA / folder / "queries.jsonl") if rel.get(q["_id"])]
    return docs, queries


def load_locomo() -> tuple[list[Doc], list[Query]]:
    docs = [Doc(t["dia_id"], f"[{t['date_time']}] {t['speaker']}: {t['text']}",
                f"locomo-{t['conv']}",
                {"speaker": t["speaker"], "session": t["session"], "date_time": t["date_time"],
                 # one thread per session, added in order: search reads turns in context
                 "thread": f"{t['conv']} session {t['session']}"})
            for t in jsonl(DATA / "locomo" / "turns.jsonl")]
    queries = [Query(q["_id"], q["question"], f"locomo-{q['conv']}", set(q["evidence"]),
                     int(q["category"]))
               for q in jsonl(DATA / "locomo" / "qa.jsonl") if q["evidence"]]
    return docs, queries


LOADERS = {
    "scifact": lambda: load_beir("scifact", "scifact", "train.tsv"),
    "locomo": load_locomo,
    "hotpotqa": lambda: load_beir("hotpotqa", "hotpotqa_train100", "dev.tsv"),
    "musique": lambda: load_beir("musique", "musique_train100", "dev.tsv"),
}


# ---- metrics ------------------------------------------------------------------------------

def ndcg(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def recall(ranked: list[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant)


def all_found(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    return float(relevant <= set(ranked[:k]))


def mean(values: list[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def score(name: str, queries: list[Query], ranked: list[list[str]]) -> dict:
    if name == "locomo":
        row = {f"R@{k}": mean([recall(r, q.relevant, k) for q, r in zip(queries, ranked,
                                                                          strict=True)
                               if q.category in (1, 2, 3, 4)]) for k in (5, 10)}
        for category in (1, 2, 3, 4, 5):
            row[f"R@10 cat{category}"] = mean([recall(r, q.relevant, 10) for q, r in
                                               zip(queries, ranked, strict=True)
                                               if q.category == category])
        return row
    row = {"nDCG@10": mean([ndcg(r, q.relevant) for q, r in zip(queries, ranked, strict=True)]),
           "R@10": mean([recall(r, q.relevant, 10) for q, r in zip(queries, ranked,
                                                                   strict=True)])}
    if name == "scifact":
        row["R@100"] = mean([recall(r, q.relevant, 100) for q, r in zip(queries, ranked,
                                                                        strict=True)])
    else:
        row["AllSup@10"] = mean([all_found(r, q.relevant) for q, r in zip(queries, ranked,
                                                                          strict=True)])
    return row


# ---- running ------------------------------------------------------------------------------

async def reset(client: redis.asyncio.Redis) -> None:
    """Empty everything but the chunk-embedding cache."""
    async for key in client.scan_iter(count=1000):
        if not key.startswith(b"zapomni:emb:"):
            await client.delete(key)


async def ingest(settings: Settings, docs: list[Doc],
                 workers: int) -> tuple[dict, float, float]:
    """Add every document through the front, run worker processes until all are done and
    their entities are extracted. Returns owners, seconds to searchable, seconds to graph."""
    front = Front(settings)
    owners: dict[tuple[str, str], list[str]] = defaultdict(list)
    receipts = []
    try:
        for doc in docs:
            receipt = await ops.add_memory(front, decode_add_memory(doc.text, doc.metadata,
                                                                    doc.namespace))
            owners[(doc.namespace, receipt.memory_id)].append(doc.id)
            receipts.append(receipt)
    finally:
        await front.aclose()
    started = time.perf_counter()
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        with worker_processes(settings, workers,
                              ZAPOMNI_ONNX_THREADS=str(max(1, 2 // workers))):
            ids = [r.task_id for r in receipts]
            await wait_tasks(client, ids, timeout=7200, until=("done", "failed"))
            searchable = time.perf_counter() - started
            followers = [record.graph_task_id for record in await asyncio.gather(
                *(tasks.get_task(client, i) for i in ids)) if record.graph_task_id]
            await wait_tasks(client, followers, timeout=7200, until=("done", "failed"))
    finally:
        await client.aclose()
    return owners, searchable, time.perf_counter() - started


Asked = tuple[list[str], float, list[float], list[SearchHit]]


async def ask(http: httpx2.AsyncClient, q: Query, mode: str, owners: dict) -> Asked:
    """One question in one mode: its documents in rank order, seconds, scores and hits."""
    body = msgspec.json.encode(SearchRequest(query=q.text[:2000], limit=100,
                                             namespace=q.namespace, mode=mode.split("-")[0]))
    search.WEIGHTS = {**WEIGHTS, "graph": 0.0} if mode.endswith(NO_GRAPH) else WEIGHTS
    try:
        started = time.perf_counter()
        response = await http.post("/v1/search", content=body,
                                   headers={"content-type": "application/json"})
        seconds = time.perf_counter() - started
    finally:
        search.WEIGHTS = WEIGHTS
    response.raise_for_status()
    hits = msgspec.json.decode(response.content, type=SearchResponse).results
    docs: dict[str, float] = {}
    for hit in hits:
        for doc in owners[(q.namespace, hit.memory_id)]:
            docs.setdefault(doc, hit.score)
    return list(docs), seconds, list(docs.values()), hits


async def search_all(http: httpx2.AsyncClient, queries: list[Query], modes: list[str],
                     owners: dict) -> dict[str, list[list]]:
    """Every question in every mode, each question in all modes before the next (a change in
    the host's load falls on every mode alike), after one untimed vector search of each (the
    query-vector cache would otherwise charge the first mode with embedding every question).
    Per mode: rankings, seconds, scores and hits, one of each per question."""
    for q in queries:
        await ask(http, q, "vector", owners)
    runs: dict[str, list[list]] = {mode: [[], [], [], []] for mode in modes}
    for q in queries:
        for mode in modes:
            for column, value in zip(runs[mode], await ask(http, q, mode, owners),
                                     strict=True):
                column.append(value)
    return runs


NO_GRAPH = "-no-graph"  # hybrid with the graph signal's weight at 0 (search.WEIGHTS)
MODES = (*SEARCH_MODES, "hybrid" + NO_GRAPH)

# graph mode's results checked against the graph itself: how many of a result's chunk's
# entities the question names, and how many are one hop from one it names
EXPLAINED = """
UNWIND $chunks AS cid MATCH (c:Chunk {id: cid})
OPTIONAL MATCH (c)-[:MENTIONS]->(e:Entity) WHERE e.id IN $named
WITH c, cid, count(e) AS direct
OPTIONAL MATCH (c)-[:MENTIONS]->(:Entity)-[:RELATED]-(s:Entity) WHERE s.id IN $named
RETURN cid, direct, count(s)
"""


async def question_entities(settings: Settings, queries: list[Query]) -> list[dict]:
    """What the graph signal reads for each question (entities.named_in): the entities it
    names with the chunks that mention each, its neighbours, and the namespace's chunks."""
    store = GraphStore(settings)
    totals: dict[str, int] = {}
    features = []
    try:
        for q in queries:
            graph = store.graph(q.namespace)
            if q.namespace not in totals:
                totals[q.namespace] = int((await run_graph(
                    graph, "MATCH (c:Chunk) RETURN count(c)", read_only=True))[0][0])
            named = await entities.named_in(graph, q.text[:2000])
            near = await entities.with_neighbours(graph, named)
            features.append({"direct": sorted([e, named.mentions[e]] for e in named.direct),
                             "near": len(near.near), "total": totals[q.namespace],
                             "joins": search.graph_joins(named, totals[q.namespace])})
    finally:
        await store.aclose()
    return features


async def unexplained(settings: Settings, queries: list[Query], features: list[dict],
                      found: list[list[SearchHit]]) -> dict:
    """Graph mode's results that mention no entity of the question nor a neighbour of one
    (checked in the graph; target 0), those found through a neighbour only, and those whose
    why["graph"] names no entity."""
    store = GraphStore(settings)
    counts = {"unexplained": 0, "via_neighbour": 0, "why_empty": 0}
    try:
        for q, feature, hits in zip(queries, features, found, strict=True):
            if not hits:
                continue
            rows = await run_graph(store.graph(q.namespace), EXPLAINED, {
                "chunks": [h.chunk_id for h in hits],
                "named": [e for e, _ in feature["direct"]]}, read_only=True)
            counts["unexplained"] += sum(1 for _, direct, near in rows if not direct + near)
            counts["via_neighbour"] += sum(1 for _, direct, near in rows if near and not direct)
            counts["why_empty"] += sum(1 for h in hits if not (
                h.why["graph"].entities or h.why["graph"].via))
    finally:
        await store.aclose()
    return counts


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p))] * 1000, 1)


async def run(args: argparse.Namespace, url: str) -> list[dict]:
    overrides = {"ollama_url": args.ollama, "ollama_model": args.ollama_model} \
        if args.ollama else {}
    query_port = free_port()
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{query_port}",
                                 max_queue_depth=1_000_000, **overrides)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await reset(client)
    await client.aclose()
    rows = []
    for name in args.datasets:
        docs, queries = LOADERS[name]()
        owners, seconds, graphed = await ingest(settings, docs, args.workers)
        print(f"{name}: {len(docs)} docs searchable in {seconds:.1f}s, entities "
              f"extracted in {graphed:.1f}s", flush=True)
        for row in await search_modes(args, settings, name, queries, owners):
            rows.append({**row, "ingest_s": round(seconds, 1), "graph_s": round(graphed, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


async def search_modes(args: argparse.Namespace, settings: Settings, name: str,
                       queries: list[Query], owners: dict) -> list[dict]:
    """Every mode's scores on one data set, through a query service with ``settings`` (in this
    process: hybrid-no-graph is hybrid asked while the graph's weight is 0). Graph mode's
    results are checked against the graph (``unexplained``)."""
    rows = []
    features = await question_entities(settings, queries)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        (args.dump / f"{name}-entities.json").write_text(json.dumps(features))
    with ThreadedServer(build_app(settings), port=free_port()) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
            runs = await search_all(http, queries, args.modes, owners)
    for mode in args.modes:
        ranked, latencies, scores, found = runs[mode]
        if args.dump:
            dump(args.dump, name, mode, queries, ranked, scores, latencies)
        checked = await unexplained(settings, queries, features, found) \
            if mode == "graph" else {}
        if mode == "hybrid":  # the share of questions the graph joins for
            checked = {"graph_joins": mean([f["joins"] for f in features])}
        rows.append({"dataset": name, "mode": mode, "cap": hits.MAX_PER_MEMORY,
                     "pool": search.KEYWORD_POOL,
                     "queries": len(queries), **score(name, queries, ranked),
                     "p50_ms": percentile(latencies, 0.5),
                     "p95_ms": percentile(latencies, 0.95), **checked})
    return rows


@contextlib.asynccontextmanager
async def cached_store() -> AsyncIterator[str]:
    """A FalkorDB server over the benchmark cache (tests/bench/.cache): yields its URL, and
    at the end keeps only the embedding keys. No AOF: replaying every graph write at
    start-up is slow; the cache is an RDB snapshot taken once the graphs are gone."""
    CACHE.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(ensure_binaries(), port, CACHE / "falkordb", persistent=False)
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        client = redis.asyncio.Redis(port=port)
        await reset(client)
        await client.save()
        await client.aclose()
        stop_process(server, timeout=120)


def dump(folder: Path, name: str, mode: str, queries: list[Query], ranked: list[list[str]],
         scores: list[list[float]], latencies: list[float]) -> None:
    """Every query's ranked documents, scores and seconds, for studying fusion offline."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}-{mode}.json").write_text(json.dumps([
        {"id": q.id, "category": q.category, "relevant": sorted(q.relevant), "ranked": r,
         "scores": s, "seconds": t}
        for q, r, s, t in zip(queries, ranked, scores, latencies, strict=True)]))


def table(rows: list[dict]) -> str:
    lines = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        subset = [r for r in rows if r["dataset"] == name]
        header = list(dict.fromkeys(h for r in subset for h in r))  # modes add columns
        lines.append(" | ".join(header))
        lines += [" | ".join(str(r.get(h, "")) for h in header) for r in subset]
        lines.append("")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=list(LOADERS), choices=list(LOADERS))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ollama", default="", help="an Ollama URL instead of the ONNX model")
    parser.add_argument("--ollama-model", default="nomic-embed-text")
    parser.add_argument("--dump", type=Path, help="write each query's ranking here (JSON)")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args()
    async with cached_store() as url:
        rows = await run(args, url)
    print()
    print(table(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "retrieval.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
