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

Written with the workers' store functions (25 distractors per memory) into `zapomni up`'s
FalkorDB; searched in process (search_memory, the query service's own function, query
vectors cached in Redis), each variant: every question once to warm (the first ask, where
every term's postings are read), then timed in hybrid mode, then nDCG@10 of hybrid and
keyword. Variants: every posting of each pool term read and summed (the pool as it was
chosen before the threshold algorithm: its first read unbounded); the threshold algorithm
over each term's best postings with the first reads as they were before KEYWORD_FIRST (three
walks of a long pool term: its count, its best 1,000, its members); the same with the
product's first read (services/query/postings.py: one walk). For each, the postings read on
the first ask of a question: rows that crossed the wire, members, and the postings FalkorDB
iterated for them (every query that reads a term, counts included, walks all its postings).
``--profile``: each FalkorDB query of the last variant timed. Prints a table; writes
tests/bench/results/keyword_scale.json. Not part of the test suite.
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
from zapomni.services.query import frequencies
from zapomni.services.query import postings as postings_cache
from zapomni.services.query.search import QUERY_CACHE_MAX, QUERY_CACHE_TTL, search_memory
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.embedding.vector_cache import VectorCache
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, indexes_building
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


# the first reads as they were before KEYWORD_FIRST (main 48b9fe2): every question term
# counted in one query, then each pool term read best first beside its members
OLD_COUNT = ("UNWIND $terms AS term CALL db.idx.fulltext.queryNodes('Chunk', term) "
             "YIELD node AS c RETURN term, count(c)")
OLD_MEMBERS = ("CALL db.idx.fulltext.queryNodes('Chunk', $term) YIELD node AS c "
               "RETURN string.join(collect(toString(id(c))), ',')")


async def three_walks(graph, words: list[str], common: float) -> dict:
    """postings.read_first as it was: the words counted, then each in no more than
    ``common`` chunks read FIRST_READ deep (whole if it has no more), with its members if it
    has more."""
    from zapomni.shared.store import cypher_search

    run_cells, first = postings_cache.run_cells, postings_cache.FIRST_READ
    counts = dict.fromkeys(words, 0) | dict(await run_cells(graph, OLD_COUNT, {"terms": words}))
    pool = [w for w in words if 0 < counts[w] <= common]
    limits = {w: first if counts[w] > first else postings_cache.EVERY for w in pool}
    long = [w for w in pool if counts[w] > first]
    found = await asyncio.gather(*(run_cells(graph, cypher_search.KEYWORD_TOP, {
        "term": w, "limit": limits[w] + 1}) for w in pool), *(
        run_cells(graph, OLD_MEMBERS, {"term": w}) for w in long))
    members = dict(zip(long, found[len(pool):], strict=True))
    tops = {w: postings_cache.as_top(rows, limits[w], postings_cache.as_members(members[w])
                                     if w in members else None)
            for w, rows in zip(pool, found[: len(pool)], strict=True)}
    empty = postings_cache.as_top([], None)
    return {w: (counts[w], None if counts[w] > common else tops.get(w, empty)) for w in words}


class Reads:
    """What the keyword signal reads (postings.run_cells, wrapped): rows with a score that
    crossed the wire (first reads, deeper reads, probes), members (node ids only, as one
    string), and the postings FalkorDB walked for them: every query that reads a term (its
    count, first read, best postings, members or probes) walks every posting of it, its
    document frequency (known once the question's terms are counted)."""

    def __init__(self) -> None:
        self.rows, self.members, self.walks = 0, 0, []
        self.plain = postings_cache.run_cells

    def __enter__(self) -> Reads:
        from zapomni.shared.store import cypher_search as cs

        async def counted(graph, query, params=None):
            found = await self.plain(graph, query, params)
            if query == cs.KEYWORD_FIRST:
                self.walks.append(params["term"])
                self.rows += len(found[0][3])
                self.members += len(found[0][2].split(",")) if found[0][2] else 0
            elif query in (cs.KEYWORD_TOP, OLD_MEMBERS):
                self.walks.append(params["term"])
                self.rows += len(found) if query == cs.KEYWORD_TOP else 0
                self.members += len(found[0][0].split(",")) if query == OLD_MEMBERS else 0
            elif query == OLD_COUNT:
                self.walks += params["terms"]
            elif query == cs.KEYWORD_PROBE:
                self.walks += [term for term, _ in params["probes"]]
                self.rows += len(found)
            return found

        postings_cache.run_cells = counted
        return self

    def walked(self) -> int:
        """The postings walked so far (the walks' terms, by their counted frequencies)."""
        return sum(frequencies.CACHE._entries.get(("default", t), (None, 0))[1]
                   for t in self.walks)

    def __exit__(self, *exc) -> None:
        postings_cache.run_cells = self.plain


async def variant(name: str, store, embedder, client, settings, queries, doc_of) -> dict:
    frequencies.CACHE.clear()
    postings_cache.CACHE.clear()
    rows, members, walked = [], [], []
    with Reads() as reads:
        cold = []
        for query in queries:
            before = reads.rows, reads.members, reads.walked()
            times, _ = await ask(store, embedder, client, settings, [query], "hybrid")
            cold += times
            rows.append(reads.rows - before[0])
            members.append(reads.members - before[1])
            walked.append(reads.walked() - before[2])
        warm, hybrid = await ask(store, embedder, client, settings, queries, "hybrid")
        warm_rows = reads.rows + reads.members - sum(rows) - sum(members)
    timed, keyword = await ask(store, embedder, client, settings, queries, "keyword")

    def quality(ranked: list[list[str]]) -> float:
        return round(float(np.mean([ndcg([doc_of.get(m, m) for m in r], q.relevant)
                                    for q, r in zip(queries, ranked, strict=True)])), 4)

    row = {"variant": name, "cold_p50": pct(cold, 50), "cold_p95": pct(cold, 95),
           "p50": pct(warm, 50), "p95": pct(warm, 95), "keyword_p50": pct(timed, 50),
           "keyword_p95": pct(timed, 95), "ndcg_hybrid": quality(hybrid),
           "ndcg_keyword": quality(keyword), "rows_p50": pct(rows, 50), "rows_p95": pct(rows, 95),
           "members_p50": pct(members, 50), "members_p95": pct(members, 95),
           "walked_p50": pct(walked, 50), "walked_p95": pct(walked, 95),
           "warm_rows": warm_rows, "held": postings_cache.CACHE.held,
           "top10": hybrid, "keyword_top10": keyword}
    print(f"  {name}: hybrid p50/p95 {row['p50']}/{row['p95']} ms (first ask "
          f"{row['cold_p50']}/{row['cold_p95']}), keyword {row['keyword_p50']}/"
          f"{row['keyword_p95']} ms, nDCG@10 hybrid {row['ndcg_hybrid']} "
          f"keyword {row['ndcg_keyword']}; first ask read p50/p95 {row['rows_p50']}/"
          f"{row['rows_p95']} rows, {row['members_p50']}/{row['members_p95']} members, "
          f"walked {row['walked_p50']}/{row['walked_p95']}; "
          f"warm pass read {warm_rows}; cache held {row['held']}", flush=True)
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
    one_walk = postings_cache.read_first
    for name, first, read_first in (
            ("every posting read", postings_cache.EVERY, one_walk),
            ("threshold, three walks (before)", postings_cache.FIRST_READ, three_walks),
            ("threshold, one walk", postings_cache.FIRST_READ, one_walk)):
        plain = postings_cache.FIRST_READ
        postings_cache.FIRST_READ, postings_cache.read_first = first, read_first
        try:
            report["variants"].append(await variant(name, store, embedder, client, settings,
                                                    queries, doc_of))
        finally:
            postings_cache.FIRST_READ, postings_cache.read_first = plain, one_walk
    report["read_costs"] = await read_costs(graph, [q.text for q in queries])
    if args.profile:
        print("profile (threshold, the defaults), warm:", flush=True)
        report["profile"] = await profile(store, embedder, client, settings, queries)
    await client.aclose()
    await store.aclose()
    return report


async def read_costs(graph, questions: list[str]) -> dict:
    """What reading a term costs per posting, for the terms of the questions with 2,000 to
    20,000 postings (the long lists; fastest of 3 each): walking it (its count), its best
    1,000 with scores, its members (the three first reads of a long pool term before
    KEYWORD_FIRST), KEYWORD_FIRST (a pool term; a common term, counted only), and every
    posting with its score."""
    from zapomni.services.query.keyword import terms
    from zapomni.shared.store import cypher_search
    from zapomni.shared.store.graphstore import run_cells

    words = sorted({w for q in questions for w in terms(q)})
    counts = dict(await run_cells(graph, OLD_COUNT, {"terms": words}))
    long = sorted(w for w, n in counts.items() if 2_000 <= n <= 20_000)[:20]
    every = postings_cache.EVERY
    reads = {"count": (OLD_COUNT, lambda t: {"terms": [t]}),
             "best 1,000": (cypher_search.KEYWORD_TOP, lambda t: {"term": t, "limit": 1001}),
             "members": (OLD_MEMBERS, lambda t: {"term": t}),
             "one walk": (cypher_search.KEYWORD_FIRST, lambda t: {
                 "term": t, "limit": 1000, "common": every}),
             "one walk, counted only": (cypher_search.KEYWORD_FIRST, lambda t: {
                 "term": t, "limit": 1000, "common": 0}),
             "every posting with its score": (cypher_search.KEYWORD_TOP, lambda t: {
                 "term": t, "limit": every})}
    out = {"terms": len(long), "postings": sum(counts[t] for t in long)}
    for name, (query, params) in reads.items():
        spent = 0.0
        for term in long:
            times = []
            for _ in range(3):
                started = time.perf_counter()
                await run_cells(graph, query, params(term))
                times.append(time.perf_counter() - started)
            spent += min(times)
        out[name] = round(spent / max(1, out["postings"]) * 1e6, 3)
    three = out["count"] + out["best 1,000"] + out["members"]
    out["one walk / three"] = round(out["one walk"] / three, 3)
    out["counted only / count"] = round(out["one walk, counted only"] / out["count"], 3)
    print(f"  per posting (us), {out['terms']} terms of 2k-20k postings: " + ", ".join(
        f"{name} {out[name]}" for name in reads) + f"; one walk / the three "
        f"{out['one walk / three']}, counted only / count {out['counted only / count']}",
        flush=True)
    return out


def table(report: dict) -> str:
    """Top 10s compared with the first variant (every posting read): the share of questions
    whose list is identical, and of hits shared."""
    base = report["variants"][0]
    lines = [f"{report['chunks']:,} chunks, {report['queries']} SciFact questions; in process, "
             "query vector cached", "",
             "| variant | hybrid p50 / p95 ms | first ask p50 / p95 ms | keyword p50 / p95 ms | "
             "nDCG@10 hybrid | nDCG@10 keyword | hybrid top 10 as the first (hits) | "
             "keyword top 10 as the first (hits) | first ask rows read p50 / p95 | "
             "members read p50 / p95 | postings walked p50 / p95 | cache held MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["variants"]:
        lines.append(f"| {row['variant']} | {row['p50']} / {row['p95']} | {row['cold_p50']} / "
                     f"{row['cold_p95']} | {row['keyword_p50']} / {row['keyword_p95']} | "
                     f"{row['ndcg_hybrid']} | {row['ndcg_keyword']} | "
                     f"{overlap(base['top10'], row['top10'])} | "
                     f"{overlap(base['keyword_top10'], row['keyword_top10'])} | "
                     f"{row['rows_p50']} / {row['rows_p95']} | {row['members_p50']} / "
                     f"{row['members_p95']} | {row['walked_p50']} / {row['walked_p95']} | "
                     f"{row['held'] / 1e6:.1f} |")
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
                        help="time each FalkorDB query of the last variant's searches")
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
