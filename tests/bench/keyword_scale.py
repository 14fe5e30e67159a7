"""The keyword signal at 100k chunks: SciFact's labelled abstracts mixed into 100k unrelated
real passages, hybrid latency and nDCG@10 for each way of doing the keyword signal's work.

    ./dev bench keyword_scale [--distractors 100000] [--queries 300] [--profile]

SciFact (../shared/data/scifact: 5,183 abstracts, one memory and one chunk each) and
``--distractors`` passages of this machine's own text (Python's standard library sources and
docstrings, /usr/share/doc, the virtualenv's packages; split at blank lines into 300-1,200
characters, duplicates out). No vector is the model's (embedding 100k passages takes hours on
a loaded 2-core host): every passage and question gets a fixed random projection of its
hashed word counts, unit length, so similar texts get similar vectors and the HNSW index has
structure; the questions' projections are put in the query service's embedding cache. The
vector signal is then a second lexical signal, so hybrid nDCG here is not the product's; the
keyword signal, the part changed and measured, is the same.

Written with the workers' store functions (25 distractors per memory; they write the keyword
postings too) into `zapomni up`'s FalkorDB; searched in process (search_memory, the query
service's own function, query vectors cached in Redis), each variant: every question once
(the first ask), then timed again in hybrid mode, then nDCG@10 of hybrid and keyword.
Variants: the pool from the workers' postings, BM25 summed over every posting of each pool
term (services/query/postings.py, the product); the same with every question term choosing
the pool (no COMMON_TERM_SHARE cut); and the exhaustive sum the pool was before, idf x
FalkorDB's term score summed over every posting in FalkorDB (cypher_search.KEYWORD_POOL,
without filters): the reference the issue's nDCG target names. For each, the postings read
a search. ``--profile``: each FalkorDB query of the product's searches timed. Prints a
table; writes tests/bench/results/keyword_scale.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import gzip
import hashlib
import json
import re
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import redis.asyncio

from tests.bench.retrieval import load_beir, ndcg
from tests.support.stack import Stack
from zapomni.services.query import search
from zapomni.services.query.search import QUERY_CACHE_MAX, QUERY_CACHE_TTL, search_memory
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.embedding.vector_cache import VectorCache
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_search
from zapomni.shared.store import postings as shared_postings
from zapomni.shared.store.graphstore import GraphStore, indexes_building
from zapomni.shared.store.graphstore import run as run_query
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.text.words import WORD
from zapomni.workers.store import mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
PER_MEMORY = 25
PARAGRAPH = re.compile(r"\n\s*\n")
SOURCES = (Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}",
           Path("/usr/share/doc"), Path(sys.prefix) / "lib")


def files() -> Iterator[Path]:
    for root in SOURCES:
        if root.is_dir():
            yield from sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (
                ".py", ".txt", ".md", ".rst", ".gz", "") and p.stat().st_size < 2_000_000)


def read(path: Path) -> str:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return ""


def distractors(count: int) -> list[str]:
    """``count`` distinct passages of 300-1,200 characters: paragraphs joined until long
    enough (none: the labelled set alone)."""
    seen: dict[str, None] = {}
    if count <= 0:
        return []
    for path in files():
        passage = ""
        for paragraph in PARAGRAPH.split(read(path)):
            paragraph = paragraph.strip()
            if not paragraph or len(paragraph) > 1200:
                continue
            passage = f"{passage}\n\n{paragraph}" if passage else paragraph
            if len(passage) >= 300:
                if len(passage) <= 1200:
                    seen.setdefault(passage, None)
                passage = ""
                if len(seen) == count:
                    return list(seen)
    raise SystemExit(f"this machine has only {len(seen):,} distinct passages")


def projected(texts: list[str], dim: int = 384, buckets: int = 1 << 14) -> np.ndarray:
    """Unit vectors: hashed word counts through a fixed Gaussian projection."""
    matrix = np.random.default_rng(7).standard_normal((buckets, dim)).astype(np.float32)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    bucket: dict[str, int] = {}
    for i, text in enumerate(texts):
        words = WORD.findall(text.lower())
        idx = [(bucket.get(w) or bucket.setdefault(w, zlib.crc32(w.encode()) % buckets + 1))
               - 1 for w in words] or [0]
        out[i] = matrix[idx].sum(axis=0)
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


async def cache_queries(client, texts: list[str], vectors: np.ndarray) -> None:
    """The questions' vectors where search_memory looks first (services/query/search.py)."""
    cache = VectorCache("zapomni:qemb", OnnxEmbedder.name, QUERY_CACHE_TTL, QUERY_CACHE_MAX)
    await vector_cache.write(client, cache, texts, vectors)


async def write(graph, texts: list[str], vectors: np.ndarray, names: list[str],
                per_memory: int) -> float:
    """Memories of ``per_memory`` chunks each (the memory id named by ``names``); chunks/s."""
    async def one(first: int) -> None:
        rows = range(first, min(len(texts), first + per_memory))
        text, spans = "", []
        for idx, row in enumerate(rows):
            begin = len(text) + (1 if text else 0)
            text = f"{text}\n{texts[row]}" if text else texts[row]
            spans.append(ChunkSpan(idx=idx, text=texts[row], char_start=begin,
                                   char_end=len(text), tokens=0))
        memory = names[first]
        job = IngestJob(task_id=memory, memory_id=memory, namespace="default", text=text,
                        content_hash=memory, created_at=time.time())
        await write_memory(graph, job, len(spans))
        await write_chunks(graph, memory, spans, vectors[first : first + len(spans)])
        await mark_ready(graph, memory, memory)

    started = time.perf_counter()
    firsts = list(range(0, len(texts), per_memory))
    for batch in range(0, len(firsts), 4):
        await asyncio.gather(*(one(f) for f in firsts[batch : batch + 4]))
    return len(texts) / (time.perf_counter() - started)


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


async def ask(store, embedder, client, settings, queries, mode: str) -> tuple[list, list]:
    times, ranked = [], []
    for query in queries:
        request = decode_search(query.text, 10, None, None, mode=mode)
        started = time.perf_counter()
        response = await search_memory(store, embedder, client, settings, request)
        times.append((time.perf_counter() - started) * 1000)
        ranked.append([hit.memory_id for hit in response.results])
    return times, ranked


class Reads:
    """The postings a search reads from the workers' keyword postings (postings.read_terms,
    wrapped)."""

    def __init__(self) -> None:
        self.postings = 0
        self.plain = shared_postings.read_terms

    def __enter__(self) -> Reads:
        plain = self.plain

        async def counted(graph, terms):
            arrays, *rest = await plain(graph, terms)
            self.postings += sum(len(a) for a in arrays)
            return arrays, *rest

        shared_postings.read_terms = counted
        return self

    def __exit__(self, *exc) -> None:
        shared_postings.read_terms = self.plain


async def falkordb_sum(graph, weighted, pool: int, params: dict) -> list:
    """The pool as it was: idf x FalkorDB's term score summed over every posting of each pool
    term, in FalkorDB (KEYWORD_POOL with no filter set)."""
    return await run_query(graph, cypher_search.KEYWORD_POOL, {**params, "weighted": weighted,
                                                         "pool": pool}, read_only=True)


async def variant(name: str, store, embedder, client, settings, queries, doc_of) -> dict:
    read = []
    with Reads() as reads:
        cold = []
        for query in queries:
            before = reads.postings
            times, _ = await ask(store, embedder, client, settings, [query], "hybrid")
            cold += times
            read.append(reads.postings - before)
        warm, hybrid = await ask(store, embedder, client, settings, queries, "hybrid")
    timed, keyword = await ask(store, embedder, client, settings, queries, "keyword")

    def quality(ranked: list[list[str]]) -> float:
        return round(float(np.mean([ndcg([doc_of.get(m, m) for m in r], q.relevant)
                                    for q, r in zip(queries, ranked, strict=True)])), 4)

    row = {"variant": name, "cold_p50": pct(cold, 50), "cold_p95": pct(cold, 95),
           "p50": pct(warm, 50), "p95": pct(warm, 95), "keyword_p50": pct(timed, 50),
           "keyword_p95": pct(timed, 95), "ndcg_hybrid": quality(hybrid),
           "ndcg_keyword": quality(keyword), "read_p50": pct(read, 50), "read_p95": pct(read, 95),
           "top10": hybrid, "keyword_top10": keyword}
    print(f"  {name}: hybrid p50/p95 {row['p50']}/{row['p95']} ms (first ask "
          f"{row['cold_p50']}/{row['cold_p95']}), keyword {row['keyword_p50']}/"
          f"{row['keyword_p95']} ms, nDCG@10 hybrid {row['ndcg_hybrid']} "
          f"keyword {row['ndcg_keyword']}; postings read a search p50/p95 {row['read_p50']}/"
          f"{row['read_p95']}", flush=True)
    return row


async def profile(store, embedder, client, settings, queries) -> dict:
    """Warm hybrid searches with every FalkorDB query timed at the client (the query service's
    own ``execute``, wrapped here) beside the CPU time of the whole search in this process."""
    from zapomni.shared.store import (
        cypher_graph,
        cypher_lists,
        cypher_memories,
        cypher_moves,
        cypher_schema,
        cypher_search,
        graphstore,
    )

    modules = (cypher_schema, cypher_memories, cypher_graph, cypher_search, cypher_lists,
               cypher_moves)
    names = {text: name for module in modules for name, text in vars(module).items()
             if isinstance(text, str)}
    names |= {text: f"{name}[{key}]" for name, table in vars(cypher_moves).items()
              if isinstance(table, dict) for key, text in table.items() if isinstance(text, str)}
    timed: dict[str, list[float]] = {}
    plain = graphstore.execute

    async def execute(graph, query, params=None, **kwargs):
        started = time.perf_counter()
        result = await plain(graph, query, params, **kwargs)
        name = names.get(query, query[:40])
        timed.setdefault(name, []).append((time.perf_counter() - started) * 1000)
        if hasattr(result, "run_time_ms"):
            timed.setdefault(f"{name} (FalkorDB's own)", []).append(result.run_time_ms)
        return result

    graphstore.execute = execute
    cpu = []
    try:
        for query in queries:
            request = decode_search(query.text, 10, None, None, mode="hybrid")
            started = time.process_time()
            await search_memory(store, embedder, client, settings, request)
            cpu.append((time.process_time() - started) * 1000)
    finally:
        graphstore.execute = plain
    report = {name: {"calls": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95)}
              for name, ms in sorted(timed.items())}
    report["cpu per search"] = {"calls": len(cpu), "p50": pct(cpu, 50), "p95": pct(cpu, 95)}
    for name, row in report.items():
        print(f"  {name}: {row['calls']} calls, p50 / p95 {row['p50']} / {row['p95']} ms",
              flush=True)
    return report


async def run(args: argparse.Namespace, stack: Stack) -> dict:
    docs, queries = load_beir("scifact", "scifact", "train.tsv")
    queries = queries[:: max(1, len(queries) // args.queries)][: args.queries]
    others = distractors(args.distractors)
    print(f"{len(docs):,} abstracts, {len(queries)} questions, {len(others):,} distractor "
          "passages; projecting", flush=True)
    vectors = projected([d.text for d in docs] + others + [q.text for q in queries])
    doc_vectors, other_vectors = vectors[: len(docs)], vectors[len(docs) : -len(queries)]
    db_url = f"redis://127.0.0.1:{stack.ports['--falkordb-port']}"
    settings = Settings.from_env(environ={}, falkordb_url=db_url, redis_url=f"{db_url}/0")
    store = GraphStore(settings)
    embedder = OnnxEmbedder()
    await prepare_namespace(store, "default", embedder.name, 384)
    graph = store.graph("default")
    names = [hashlib.sha256(t.encode()).hexdigest()[:32] for t in others]
    print("writing", flush=True)
    rate = await write(graph, others, other_vectors, names, PER_MEMORY)
    doc_names = [f"scifact-{d.id}" for d in docs]
    await write(graph, [d.text for d in docs], doc_vectors, doc_names, 1)
    while await indexes_building(graph):
        await asyncio.sleep(0.1)
    doc_of = {name: d.id for name, d in zip(doc_names, docs, strict=True)}
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await cache_queries(client, [q.text for q in queries], vectors[-len(queries):])
    report: dict = {"chunks": len(others) + len(docs), "write_per_s": round(rate, 1),
                    "queries": len(queries), "variants": []}
    del others, names, vectors, other_vectors, doc_vectors
    gc.collect()
    gc.freeze()  # the passages this process wrote are no garbage collector's work in a search
    plain = search.keyword_pool, search.COMMON_TERM_SHARE
    for name, pool, share in (
            ("postings, BM25 over every posting", plain[0], plain[1]),
            ("postings, every term chooses", plain[0], 1.0),
            ("FalkorDB's sum over every posting (before)", falkordb_sum, plain[1])):
        search.keyword_pool, search.COMMON_TERM_SHARE = pool, share
        try:
            report["variants"].append(await variant(name, store, embedder, client, settings,
                                                    queries, doc_of))
        finally:
            search.keyword_pool, search.COMMON_TERM_SHARE = plain
    if args.profile:
        print("profile (the product), warm:", flush=True)
        report["profile"] = await profile(store, embedder, client, settings, queries)
    await client.aclose()
    await store.aclose()
    return report


def table(report: dict) -> str:
    """Top 10s compared with the first variant (the product): the share of questions
    whose list is identical, and of hits shared."""
    base = report["variants"][0]
    lines = [f"{report['chunks']:,} chunks, {report['queries']} SciFact questions; in process, "
             "query vector cached", "",
             "| variant | hybrid p50 / p95 ms | first ask p50 / p95 ms | keyword p50 / p95 ms | "
             "nDCG@10 hybrid | nDCG@10 keyword | hybrid top 10 as the first (hits) | "
             "keyword top 10 as the first (hits) | postings read a search p50 / p95 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in report["variants"]:
        lines.append(f"| {row['variant']} | {row['p50']} / {row['p95']} | {row['cold_p50']} / "
                     f"{row['cold_p95']} | {row['keyword_p50']} / {row['keyword_p95']} | "
                     f"{row['ndcg_hybrid']} | {row['ndcg_keyword']} | "
                     f"{overlap(base['top10'], row['top10'])} | "
                     f"{overlap(base['keyword_top10'], row['keyword_top10'])} | "
                     f"{row['read_p50']} / {row['read_p95']} |")
    return "\n".join(lines)


def overlap(before: list[list[str]], after: list[list[str]]) -> str:
    same = np.mean([a == b for a, b in zip(before, after, strict=True)])
    shared = np.mean([len(set(a) & set(b)) / max(1, len(set(a))) for a, b in
                      zip(before, after, strict=True)])
    return f"{same:.1%} ({shared:.1%})"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distractors", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--profile", action="store_true",
                        help="time each FalkorDB query of the product's searches")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zapomni-keyword-") as tmp:
        stack = Stack(Path(tmp))
        stack.start(workers=1)
        try:
            report = await run(args, stack)
        finally:
            stack.stop()
    print(table(report))
    RESULTS.mkdir(parents=True, exist_ok=True)
    for row in report["variants"]:
        row.pop("top10")
        row.pop("keyword_top10")
    (RESULTS / "keyword_scale.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
