"""build_context: its latency at 10k memories beside search_memory's, and how often a context
holds the evidence of a LoCoMo question.

    ./dev bench context [--queries 300] [--questions N] [--memories 8 50] [--workers 2]
                        [--skip-latency] [--skip-locomo]

Latency: 10,000 memories in one namespace, LoCoMo's 1,297 turns (one thread per session, in
order) and sentences of the evaluation sets (tests/support/vectors.py), written with the
worker's own store functions (write_memory, write_chunks, mark_ready) with real MiniLM
vectors cached on disk (tests/bench/.cache/vectors): this times reads, not the embedder, and
no entities are extracted (the graph signal finds nothing, for both calls alike). The query
service runs in this process over HTTP; every query is asked once first (its vector is then
cached, as in tests/bench/vectors.py). Then, alternately, search_memory (limit 10) and
build_context (a LoCoMo session as thread; defaults: 16 turns, 8 memories, 2,000 tokens).

LoCoMo: each conversation its own namespace, its turns added through the front and real
worker processes (entities extracted too), one thread per session, as ``./dev bench
retrieval`` does. For each question with evidence, build_context(question, thread = the
conversation's last session, so the history is its last turns) at token_budget 150, 500 and
2,000: the share of questions whose evidence turns are all in the context (history or
memories), beside search_memory's R@10 (and all evidence in its top 10) for the same
questions, and beside search's results cut to the same budget (memory lines as a context
shows them, with the current message: issue 32's target is a context that holds all the
evidence at least as often). Categories 1-4 as the retrieval benchmark reports them; 5
(adversarial) apart. Prints tables; writes tests/bench/results/context.json. A context's
search ranks with services/query/context.py RANK (relevance); search_memory by relevance (its
default).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import time
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.bench.retrieval import (
    DATA,
    Query,
    cached_store,
    ingest,
    jsonl,
    load_locomo,
    percentile,
    reset,
)
from tests.support.servers import ThreadedServer
from tests.support.vectors import embedded, passages, questions
from zapomni.services.query.app import build_app
from zapomni.services.query.context import (
    CURRENT,
    MEMORIES,
    TokenCounter,
    context_memory,
    memory_line,
)
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.answers import Context, SearchResponse
from zapomni.shared.protocol.api import ContextRequest, SearchRequest
from zapomni.shared.protocol.ids import memory_id
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, indexes_building
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
SIZE = 10_000
LATENCY_NAMESPACE = "context-10k"
BUDGETS = (150, 500, 2000)
_encode = msgspec.json.Encoder().encode


# ---- 10k memories, written the way a worker writes them -------------------------------------

def turns() -> list[tuple[str, str]]:
    """LoCoMo's turns as the retrieval benchmark adds them: (text, thread), in order."""
    return [(f"[{t['date_time']}] {t['speaker']}: {t['text']}",
             f"{t['conv']} session {t['session']}") for t in jsonl(DATA / "locomo" / "turns.jsonl")]


async def write_corpus(settings: Settings, size: int) -> list[str]:
    """``size`` memories of one chunk each, the turns first; returns the threads."""
    chat = turns()
    texts = [t for t, _ in chat] + passages(size - len(chat))
    vectors = embedded(texts)
    threads = [thread for _, thread in chat] + [""] * (size - len(chat))
    store = GraphStore(settings)
    await prepare_namespace(store, LATENCY_NAMESPACE, OnnxEmbedder.name, 384)
    graph = store.graph(LATENCY_NAMESPACE)
    ids = [memory_id(LATENCY_NAMESPACE, hashlib.sha256(t.encode()).hexdigest()) for t in texts]
    before = {i: ids[i - 1] for i in range(1, len(chat)) if threads[i] == threads[i - 1]}
    started, now = time.perf_counter(), time.time() - size  # one second apart, in order

    async def one(i: int) -> None:
        text = texts[i]
        job = IngestJob(task_id=f"task_{i}", memory_id=ids[i], namespace=LATENCY_NAMESPACE,
                        text=text, content_hash=ids[i], created_at=now + i,
                        thread=threads[i], after=before.get(i, ""),
                        metadata_json=json.dumps({"thread": threads[i]} if threads[i] else {}))
        await write_memory(graph, job, 1)
        span = ChunkSpan(idx=0, text=text, char_start=0, char_end=len(text),
                         tokens=len(text.split()))
        await write_chunks(graph, ids[i], [span], vectors[i : i + 1])
        await mark_ready(graph, ids[i], job.task_id)

    for start in range(0, size, 8):
        await asyncio.gather(*(one(i) for i in range(start, min(size, start + 8))))
    while await indexes_building(graph):
        await asyncio.sleep(0.1)
    await store.aclose()
    print(f"{size:,} memories written in {time.perf_counter() - started:.0f} s", flush=True)
    return list(dict.fromkeys(t for t in threads if t))


async def post(http: httpx2.AsyncClient, path: str, body: msgspec.Struct,
               kind: type) -> tuple[float, object]:
    started = time.perf_counter()
    response = await http.post(path, content=_encode(body),
                               headers={"content-type": "application/json"})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed, msgspec.json.decode(response.content, type=kind)


async def latency(http: httpx2.AsyncClient, threads: list[str], count: int) -> dict:
    asked = [q[:2000] for q in questions(count)]
    for text in asked:  # the first ask embeds the query and caches its vector
        await post(http, "/v1/search", SearchRequest(query=text, namespace=LATENCY_NAMESPACE),
                   SearchResponse)
    times: dict[str, list[float]] = {"search_memory": [], "build_context": []}
    for i, text in enumerate(asked):
        calls = [("search_memory", "/v1/search", SearchRequest(
                     query=text, namespace=LATENCY_NAMESPACE), SearchResponse),
                 ("build_context", "/v1/context", ContextRequest(
                     query=text, namespace=LATENCY_NAMESPACE,
                     thread=threads[i % len(threads)]), Context)]
        for name, path, body, kind in calls[:: 1 if i % 2 else -1]:  # alternate the order
            times[name].append((await post(http, path, body, kind))[0])
    row = {name: {"p50_ms": percentile(t, 0.5), "p95_ms": percentile(t, 0.95),
                  "p99_ms": percentile(t, 0.99)} for name, t in times.items()}
    row["queries"] = len(asked)
    row["ratio_p95"] = round(row["build_context"]["p95_ms"] / row["search_memory"]["p95_ms"], 2)
    return row


# ---- LoCoMo: the evidence in the context ----------------------------------------------------

def sample(queries: list[Query], count: int | None) -> list[Query]:
    if not count or count >= len(queries):
        return queries
    step = len(queries) / count
    return [queries[int(i * step)] for i in range(count)]


def share(values: list[float]) -> float:
    return round(statistics.fmean(values), 4) if values else 0.0


def by_category(queries: list[Query], values: list[float]) -> dict[str, float]:
    main = [v for q, v in zip(queries, values, strict=True) if q.category in (1, 2, 3, 4)]
    adversarial = [v for q, v in zip(queries, values, strict=True) if q.category == 5]
    return {"cat1-4": share(main), "cat5": share(adversarial)}


COUNTER = TokenCounter()


async def search_cut_row(http: httpx2.AsyncClient, queries: list[Query], owners: dict,
                         budget: int) -> dict:
    """search_memory's results as a context would show them (memory lines under their
    heading, with the current message), cut where the next one would pass ``budget``."""
    complete, recall, kept = [], [], []
    for q in queries:
        _, found = await post(http, "/v1/search", SearchRequest(
            query=q.text[:2000], namespace=q.namespace, limit=100), SearchResponse)
        spent = COUNTER.count(f"{CURRENT}\n{q.text[:2000]}") + COUNTER.count(MEMORIES)
        held = []
        for hit in found.results:
            cost = COUNTER.count(memory_line(context_memory(hit)))
            if spent + cost > budget:
                break
            spent += cost
            held.append(hit.memory_id)
        docs = {d for mid in held for d in owners[(q.namespace, mid)]}
        complete.append(float(q.relevant <= docs))
        recall.append(len(docs & q.relevant) / len(q.relevant))
        kept.append(len(held))
    return {"token_budget": budget, "all_in_context": by_category(queries, complete),
            "recall_in_context": by_category(queries, recall),
            "results_kept": round(statistics.fmean(kept), 1)}


async def search_rows(http: httpx2.AsyncClient, queries: list[Query], owners: dict) -> dict:
    recall, complete = [], []
    for q in queries:
        _, found = await post(http, "/v1/search", SearchRequest(
            query=q.text[:2000], namespace=q.namespace, limit=10), SearchResponse)
        docs = {d for hit in found.results for d in owners[(q.namespace, hit.memory_id)]}
        recall.append(len(docs & q.relevant) / len(q.relevant))
        complete.append(float(q.relevant <= docs))
    return {"R@10": by_category(queries, recall), "all@10": by_category(queries, complete)}


async def context_row(http: httpx2.AsyncClient, queries: list[Query], owners: dict,
                      last: dict[str, str], budget: int, memories: int) -> dict:
    complete, recall, times, counts = [], [], [], []
    for q in queries:
        elapsed, context = await post(http, "/v1/context", ContextRequest(
            query=q.text[:2000], namespace=q.namespace, thread=last[q.namespace],
            token_budget=budget, memories=memories), Context)
        held = [item.memory_id for item in (*context.history, *context.memories)]
        docs = {d for mid in held for d in owners[(q.namespace, mid)]}
        complete.append(float(q.relevant <= docs))
        recall.append(len(docs & q.relevant) / len(q.relevant))
        times.append(elapsed)
        info = context.metadata
        counts.append((info.history_count, info.memory_count, info.total_tokens,
                       info.truncated))
    return {"token_budget": budget, "memories": memories,
            "all_in_context": by_category(queries, complete),
            "recall_in_context": by_category(queries, recall),
            "turns": round(statistics.fmean(c[0] for c in counts), 1),
            "memories_kept": round(statistics.fmean(c[1] for c in counts), 1),
            "tokens": round(statistics.fmean(c[2] for c in counts)),
            "truncated": share([float(c[3]) for c in counts]),
            "p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95)}


async def locomo(settings: Settings, http: httpx2.AsyncClient, args: argparse.Namespace
                 ) -> dict:
    docs, queries = load_locomo()
    queries = sample(queries, args.questions)
    last: dict[str, str] = {}
    for doc in docs:  # turns come in order: a conversation's last thread is its last session
        last[doc.namespace] = doc.metadata["thread"]
    owners, seconds, graphed = await ingest(settings, docs, args.workers)
    print(f"LoCoMo: {len(docs)} turns searchable in {seconds:.0f} s, entities in "
          f"{graphed:.0f} s; {len(queries)} questions", flush=True)
    report = {"questions": len(queries), "search": await search_rows(http, queries, owners),
              "contexts": [], "search_cut": []}
    for budget in BUDGETS:
        report["search_cut"].append(await search_cut_row(http, queries, owners, budget))
        print(json.dumps(report["search_cut"][-1]), flush=True)
        for memories in args.memories:
            row = await context_row(http, queries, owners, last, budget, memories)
            print(json.dumps(row), flush=True)
            report["contexts"].append(row)
    return report


# ---- running and printing -------------------------------------------------------------------

def tables(report: dict) -> str:
    lines = []
    if "latency" in report:
        lat = report["latency"]
        lines += [f"at {SIZE:,} memories, {lat['queries']} queries (query vector cached)",
                  "| call | p50 ms | p95 ms | p99 ms |", "|---|---|---|---|"]
        lines += [f"| {name} | {lat[name]['p50_ms']} | {lat[name]['p95_ms']} | "
                  f"{lat[name]['p99_ms']} |" for name in ("search_memory", "build_context")]
        lines += [f"build_context p95 / search_memory p95: {lat['ratio_p95']}", ""]
    if "locomo" in report:
        loc = report["locomo"]
        s = loc["search"]
        lines += [f"LoCoMo, {loc['questions']} questions (categories 1-4; adversarial 5 apart)",
                  "| context | all evidence in it | evidence recall | adversarial: all in "
                  "it | turns | memories | tokens | truncated | p50 / p95 ms |",
                  "|---|---|---|---|---|---|---|---|---|",
                  f"| search_memory top 10 | {s['all@10']['cat1-4']} | {s['R@10']['cat1-4']} "
                  f"(R@10) | {s['all@10']['cat5']} | | 10 | | | |"]
        for r in loc["search_cut"]:
            lines.append(f"| search_memory cut to {r['token_budget']:,} tokens | "
                         f"{r['all_in_context']['cat1-4']} | {r['recall_in_context']['cat1-4']} "
                         f"| {r['all_in_context']['cat5']} | | {r['results_kept']} | | | |")
        for r in loc["contexts"]:
            lines.append(
                f"| build_context {r['token_budget']:,} tokens, {r['memories']} memories | "
                f"{r['all_in_context']['cat1-4']} | {r['recall_in_context']['cat1-4']} | "
                f"{r['all_in_context']['cat5']} | {r['turns']} | {r['memories_kept']} | "
                f"{r['tokens']} | {r['truncated']} | {r['p50_ms']} / {r['p95_ms']} |")
    return "\n".join(lines)


async def run(args: argparse.Namespace, url: str) -> dict:
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{free_port()}",
                                 max_queue_depth=1_000_000)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await reset(client)
    await client.aclose()
    report: dict = {}
    port = int(settings.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(settings), port=port) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
            if not args.skip_latency:
                threads = await write_corpus(settings, SIZE)
                report["latency"] = await latency(http, threads, args.queries)
                print(json.dumps(report["latency"]), flush=True)
            if not args.skip_locomo:
                report["locomo"] = await locomo(settings, http, args)
    return report


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=300, help="latency: queries asked")
    parser.add_argument("--questions", type=int, help="LoCoMo: a sample of this many")
    parser.add_argument("--memories", type=int, nargs="+", default=[8, 50])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-locomo", action="store_true")
    args = parser.parse_args()
    async with cached_store() as url:
        report = await run(args, url)
    print()
    print(tables(report))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "context.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
