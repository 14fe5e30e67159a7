"""The curve to 1M chunks: ingest through the workers into one namespace, 10k -> 100k -> 1M,
and at each point the ingest rate, FalkorDB's memory, search latency and HNSW recall.

    ./dev bench curve [--sizes 10000 100000 1000000] [--workers 2] [--queries 200]
                      [--passages 60 120] [--deadline HH:MM] [--preload 0.9]
                      [--data-dir tests/bench/results/curve-data] [--resume]

The stack is `zapomni up` (``--workers`` workers, entity extraction off) with Ollama played by
tests/support/table_ollama.py: real MiniLM vectors of real passages looked up by text, a
chunk's vector the normalised sum of its passages' (no latency: this measures the store).
Documents are ``--passages`` real passages drawn at random, added through the front's code
path, at most ``--window`` tasks outstanding (the queue stays bounded); chunking as configured
(256 tokens, 32 overlap, paragraphs first). A document's paragraphs are runs of 2-4 passages
on lines of their own, each fitting a chunk, so a chunk is such a run and its vector the sum
of its passages': the table's 3,000 passages make ~10^10 runs and a 1M store's chunks are
distinct (a passage a chunk, as cut at paragraphs before, repeats each vector ~330 times at
1M: one such run read recall 0.67 at 100k on ids, nearly all of it ties).

At each size (a leg: from the size before to this one): the ingest rate and the CPU per chunk
written of FalkorDB's server and, beside it, of the workers (/proc, sampled with the chunk
count every 10 s while the workers ingest; the server also holds the queue and the embedding
cache), over the leg and "at the size" (its last 10%); FalkorDB's RSS and RSS per chunk;
search_memory through the query service over HTTP, vector and hybrid, the query vector
cached (each question asked once before timing); recall@10 of a raw k=10 HNSW query against
the exact top 10 (ties with the 10th count), computed by numpy over the stored vectors read
back page by page (never all in memory). ``--deadline`` (UTC) stops a leg early; the row
then says so. Then issue 34's targets, read from the largest leg against the one nearest a
tenth of its size.

**Resume.** The stack's data (``--data-dir``, FalkorDB's append-only file) and the curve's
state beside it (tests/bench/curve_legs.py: the options, each leg's samples and the rows
measured) outlive a stopped run (Ctrl-C, SIGTERM, the deadline, a crash: the state is
rewritten whole at every sample). ``--resume`` starts `zapomni up` again on the same
directory, waits for the jobs the stopped run left queued, keeps the legs already measured
and continues from the chunk count the store holds; a leg's rate and CPU per chunk sum the
runs' stretches, never the time stopped. A new run refuses a directory that holds one.

``--preload F`` reaches each size's first share F without the queue: the same documents,
cut by the workers' chunker, written with the workers' own store functions (write_memory,
write_chunks, link_chunks, mark_ready) straight into FalkorDB, four at a time; then the
workers ingest the rest of the leg, and the row's ingest rate is theirs over that rest
(at the size, not averaged from zero). Through the workers the whole curve took 2 hours
here (2026-11-26: 424 chunks/s at 10k, 133 at 1M; docs/benchmarks.md); FalkorDB's own work
per chunk (HNSW insert, full-text postings) is the same either way.
Prints each leg, a table and the targets; writes tests/bench/results/curve.json. Not part
of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import signal
import time
from collections import deque
from pathlib import Path

import numpy as np
import redis.asyncio

from tests.bench import curve_legs as legs
from tests.bench.scaling import TABLE
from tests.bench.vectors import pct, rss_by_process, search_service, write_ready
from tests.support.servers import ThreadedServer
from tests.support.stack import Stack
from tests.support.table_ollama import TableOllama, fidelity
from tests.support.vectors import corpus, embedded, questions
from tests.support.workers import ENDED
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.embedding.embed import to_params
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, indexes_building
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.shared.tasks import tasks
from zapomni.shared.text.chunking import chunker_for

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
COUNT = "MATCH (c:Chunk) RETURN count(c)"
PAGE = ("MATCH (c:Chunk) WHERE id(c) > $after RETURN id(c), c.id, c.text "
        "ORDER BY id(c) LIMIT $n")
SAMPLE = "MATCH (c:Chunk) RETURN c.text, c.embedding LIMIT $n"
# a resumed run's FalkorDB loads its data and rebuilds its indexes before `zapomni up` is up:
# at 15k chunks 6.7 s, at 1M 45 min (2026-11-27, 5.8 GB; `zapomni up` waits while it works)
STARTUP_S = 2 * 3600
# a paragraph of passages fits one 256-token chunk: these passages run >= 2.6 characters a
# MiniLM token (99% of them; 2026-11-27)
PARAGRAPH_CHARS = 600
RAW_QUERY = ("CALL db.idx.vector.queryNodes('Chunk', 'embedding', $k, vecf32($v)) "
             "YIELD node RETURN node.id, node.text")


async def chunk_count(redis: redis.asyncio.Redis, graph) -> int:
    if not await redis.exists(graph.name):  # nothing ingested yet
        return 0
    return (await graph.ro_query(COUNT)).result_set[0][0]


async def ingest_to(front: Front, redis: redis.asyncio.Redis, graph, target: int,
                    make_docs, args: argparse.Namespace, checkpoint) -> dict:
    """Add documents until the namespace holds ``target`` chunks (or the deadline passes);
    ``checkpoint(count)`` at the start, every ``SAMPLE_S`` and at the end."""
    have = await chunk_count(redis, graph)
    await checkpoint(have)
    first, added_docs, per_doc = have, 0, 10.0
    pending: deque[str] = deque()
    started = shown = sampled = time.perf_counter()
    stopped = False
    while True:
        if await retire(redis, pending):  # the count read at every retirement:
            have = await chunk_count(redis, graph)  # a stale one overshoots the size
            per_doc = max(1.0, (have - first) / max(1, added_docs - len(pending)))
        stopped = stopped or past(args.deadline)
        room = args.window - len(pending)
        wanted = 0 if stopped else int((target - have) / per_doc) - len(pending) + 1
        if added_docs == len(pending):  # nothing finished yet: per_doc is still a guess
            wanted = min(wanted, 8 - len(pending))
        for text in make_docs(min(room, max(0, wanted))):
            receipt = await ops.add_memory(front, decode_add_memory(text, None, None))
            pending.append(receipt.task_id)
            added_docs += 1
        if not pending:
            break
        if time.perf_counter() - sampled >= legs.SAMPLE_S:
            sampled = time.perf_counter()
            have = await chunk_count(redis, graph)
            await checkpoint(have)
        if time.perf_counter() - shown >= 30:
            shown = time.perf_counter()
            print(f"  {have:,} / {target:,} chunks, {len(pending)} tasks outstanding, "
                  f"{(have - first) / (shown - started):.0f} chunks/s", flush=True)
        await asyncio.sleep(0.2)
    await checkpoint(await chunk_count(redis, graph))
    return {"stopped_early": stopped, "docs": added_docs}


async def retire(redis: redis.asyncio.Redis, pending: deque[str]) -> int:
    """Finished tasks off the front of ``pending``, oldest first; how many."""
    retired = 0
    while pending:
        record = await tasks.get_task(redis, pending[0])
        if record is None or record.state not in ENDED:
            break
        if record.state != "done":
            raise AssertionError(f"task {record.task_id} ended {record.state}: {record.error}")
        pending.popleft()
        retired += 1
    return retired


async def preload(store: GraphStore, redis: redis.asyncio.Redis, server: TableOllama,
                  target: int, make_docs) -> dict:
    """Documents written straight into FalkorDB until the namespace holds ``target`` chunks
    (see the module's ``--preload``); a progress line every 30 s."""
    graph = store.graph("default")
    settings = store.settings
    # the workers' embedder names its model so (shared/embedding/embed_ollama.py); another
    # name is refused
    prop = await prepare_namespace(store, "default", f"ollama:{settings.ollama_model}", 384)
    chunker = chunker_for(Settings.from_env(environ={}))
    have = first = await chunk_count(redis, graph)
    started = shown = time.perf_counter()

    async def one(text: str) -> int:
        chunks = await asyncio.to_thread(chunker.split, text)
        await write_ready(graph, text, chunks, server.lookup([c.text for c in chunks]), prop,
                          linked=True)
        return len(chunks)

    while have < target:
        wanted = max(1, min(4, (target - have) // 23))  # ~23 chunks a document
        have += sum(await asyncio.gather(*(one(t) for t in make_docs(wanted))))
        if time.perf_counter() - shown >= 30:
            shown = time.perf_counter()
            print(f"  preloaded {have:,} / {target:,} chunks, "
                  f"{(have - first) / (shown - started):.0f} chunks/s", flush=True)
    seconds = time.perf_counter() - started
    return {"preloaded": have - first, "preload_per_s": round((have - first) / seconds, 1)}


def past(deadline: str) -> bool:
    if not deadline:
        return False
    now = datetime.datetime.now(datetime.UTC)
    hour, minute = (int(x) for x in deadline.split(":"))
    stop = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if stop < now - datetime.timedelta(hours=12):  # after midnight
        stop += datetime.timedelta(days=1)
    return now >= stop


async def exact_truth(graph, server: TableOllama, queries: np.ndarray,
                      page: int = 20_000) -> list[tuple[set[str], float]]:
    """Each query's exact top-10 chunk ids by cosine and the 10th cosine, page by page over
    the stored chunks.
    A chunk's vector is recomputed from its stored text by the server that embedded it (the
    same function, no model): reading 384 floats back through the client costs ~4 ms a
    chunk, an hour at 1M. ``stored_match`` checks the recomputed vectors against the stored
    ones on the first page."""
    best_scores = np.full((len(queries), 10), -np.inf, dtype=np.float32)
    best_ids = np.full((len(queries), 10), "", dtype=object)
    after = -1
    while True:
        rows = (await graph.ro_query(PAGE, {"after": after, "n": page}, timeout=600_000)
                ).result_set
        if not rows:
            break
        after = rows[-1][0]
        ids = np.array([r[1] for r in rows], dtype=object)
        vectors = server.lookup([r[2] for r in rows])
        scores = np.hstack([best_scores, queries @ vectors.T])
        names = np.hstack([best_ids, np.broadcast_to(ids, (len(queries), len(ids)))])
        top = np.argpartition(-scores, 10, axis=1)[:, :10]
        best_scores = np.take_along_axis(scores, top, axis=1)
        best_ids = np.take_along_axis(names, top, axis=1)
    return [(set(ids), float(scores.min())) for ids, scores in
            zip(best_ids.tolist(), best_scores, strict=True)]


async def stored_match(graph, server: TableOllama, count: int = 500) -> float:
    """Largest difference between stored vectors and the server's vectors of their texts."""
    rows = (await graph.ro_query(SAMPLE, {"n": count})).result_set
    stored = np.asarray([r[1] for r in rows], dtype=np.float32)
    return float(np.abs(stored - server.lookup([r[0] for r in rows])).max())


async def recall(graph, server: TableOllama, queries: np.ndarray,
                 truth: list[tuple[set[str], float]]) -> dict:
    """A result is a hit when it is one of the exact top 10 or as close to the question as
    the 10th (a tie: two chunks of the same passages have the same vector, and either is
    an exact answer)."""
    hits, times = 0, []
    for vector, (want, tenth) in zip(queries, truth, strict=True):
        started = time.perf_counter()
        result = await graph.ro_query(RAW_QUERY, {"k": 10, "v": to_params(vector[None, :])[0]})
        times.append((time.perf_counter() - started) * 1000)
        rows = result.result_set[:10]
        close = server.lookup([row[1] for row in rows]) @ vector >= tenth - 1e-6
        hits += sum(row[0] in want or tied for row, tied in zip(rows, close, strict=True))
    return {"recall_at_10": round(hits / (10 * len(truth)), 4),
            "hnsw_k10_p50": pct(times, 50), "hnsw_k10_p95": pct(times, 95)}


async def measure(stack: Stack, graph, redis_client, server: TableOllama, asked: list[str],
                  queries: np.ndarray) -> dict:
    while await indexes_building(graph):
        await asyncio.sleep(0.5)
    info = await redis_client.info("memory")
    assert stack.process is not None
    rss = rss_by_process(stack.process.pid)
    query_url = f"http://127.0.0.1:{stack.ports['--query-port']}"
    search = {mode: await search_service(query_url, asked[:100], mode, stack.query_secret)
              for mode in ("vector", "hybrid")}
    started = time.perf_counter()
    truth = await exact_truth(graph, server, queries)
    exact_s = time.perf_counter() - started
    return {"falkordb_rss_mb": rss.get("falkordb"), "used_memory_mb":
            round(info["used_memory"] / 2**20, 1), "rss_mb": rss,
            "vector": search["vector"], "hybrid": search["hybrid"],
            **await recall(graph, server, queries, truth), "exact_scan_s": round(exact_s, 1),
            "stored_vs_recomputed": await stored_match(graph, server)}


async def run(args: argparse.Namespace, state: dict, stack: Stack, server: TableOllama,
              passages: list[str], asked: list[str], queries: np.ndarray) -> list[dict]:
    """Each leg not measured yet, in order of size; the rows of all (earlier runs' too)."""
    db_url = f"redis://127.0.0.1:{stack.ports['--falkordb-port']}"
    settings = Settings.from_env(environ={}, falkordb_url=db_url, redis_url=f"{db_url}/0",
                                 max_queue_depth=1_000_000, request_timeout=60.0)
    store = GraphStore(settings)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    front = Front(settings)
    first = (state["runs"] - 1) << 32  # each run its own documents: a resumed one never
    seed = iter(range(first, first + 2**32))  # repeats the stopped run's

    def make_docs(n: int) -> list[str]:
        return documents(passages, n, *args.passages, seed=next(seed)) if n else []

    try:
        if state["runs"] > 1:
            print(f"resuming at {await chunk_count(client, store.graph('default')):,} chunks "
                  f"(run {state['runs']})", flush=True)
            await legs.drain(client)
        for size in sorted(args.sizes):
            if legs.measured(state, size) is not None:
                print(f"leg {size:,}: measured by an earlier run, kept", flush=True)
                continue
            row = await leg(args, state, size, stack, store, client, front, server, make_docs,
                            asked, queries)
            print(legs.line(row), flush=True)
            if row["stopped_early"]:
                break
    finally:
        await front.aclose()
        await client.aclose()
        await store.aclose()
    return state["rows"]


async def leg(args: argparse.Namespace, state: dict, size: int, stack: Stack,
              store: GraphStore, client: redis.asyncio.Redis, front: Front,
              server: TableOllama, make_docs, asked: list[str], queries: np.ndarray) -> dict:
    """The namespace brought to ``size`` chunks and measured there; its row saved."""
    graph = store.graph("default")
    loaded = {}
    if args.preload:
        print(f"preloading to {int(size * args.preload):,} chunks", flush=True)
        loaded = await preload(store, client, server, int(size * args.preload), make_docs)
    assert stack.process is not None

    async def checkpoint(count: int) -> None:
        legs.sample(state, size, count, stack.process.pid)
        legs.save(args.data_dir, state)

    print(f"ingesting to {size:,} chunks", flush=True)
    row = {"size": size, "workers": args.workers,
           **await ingest_to(front, client, graph, size, make_docs, args, checkpoint),
           **loaded, **legs.figures(state, size),
           **await measure(stack, graph, client, server, asked, queries),
           "chunks": await chunk_count(client, graph),
           "at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")}
    row["rss_per_chunk_kb"] = round(row["falkordb_rss_mb"] * 1024 / row["chunks"], 2)
    state["rows"].append(row)
    legs.save(args.data_dir, state)
    (RESULTS / "curve.json").write_text(json.dumps(state["rows"], indent=2))
    return row


async def curve(args: argparse.Namespace, state: dict, server: TableOllama,
                passages: list[str], asked: list[str], queries: np.ndarray) -> list[dict]:
    """`zapomni up` on the curve's data directory (a resumed run's FalkorDB replays its
    append-only file) and the legs run against it; stopped however the run ends."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with ThreadedServer(server.app) as http:
        stack = Stack(args.data_dir)
        stack.start(workers=args.workers, timeout=STARTUP_S, env={
            "ZAPOMNI_OLLAMA_URL": http.url, "ZAPOMNI_GRAPH_AUTO": "false"})
        try:
            return await run(args, state, stack, server, passages, asked, queries)
        finally:
            stack.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--passages", type=int, nargs=2, default=[60, 120])
    parser.add_argument("--window", type=int, default=64, help="tasks outstanding at most")
    parser.add_argument("--real", type=int, default=TABLE,
                        help="real passages in the server's table (embedded once, cached)")
    parser.add_argument("--deadline", default="", help="UTC HH:MM: stop adding then")
    parser.add_argument("--preload", type=float, default=0.0,
                        help="share of each size written without the queue (0 to 0.99)")
    parser.add_argument("--data-dir", type=Path, default=RESULTS / "curve-data",
                        help="the stack's data and the curve's state")
    parser.add_argument("--resume", action="store_true",
                        help="continue the curve in --data-dir where its run stopped")
    args = parser.parse_args()
    args.data_dir = args.data_dir.resolve()
    state = legs.open_state(args.data_dir, args)
    task = asyncio.current_task()
    assert task is not None  # a SIGTERM stops the run as Ctrl-C does: the stack stops cleanly
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    passages, vectors = corpus(args.real, args.real)
    asked = questions(args.queries)
    queries = embedded(asked, progress=False)
    server = TableOllama(passages + asked, np.vstack([vectors, queries]))
    try:
        rows = await curve(args, state, server, passages, asked, queries)
    except asyncio.CancelledError:
        print(f"curve: stopped; the same command with --resume continues it from "
              f"{args.data_dir}", flush=True)
        raise
    print(legs.table(rows))
    print(legs.targets(rows))
    print(f"server answers: {server.exact} whole, {server.joined} joined, "
          f"{server.perturbed} perturbed")
    sample = documents(passages, 16, *args.passages, seed=10**6)
    print("joined chunks' cosine to the model's own vector: "
          f"{chunk_fidelity(server, sample)}")


def documents(passages: list[str], count: int, low: int, high: int, seed: int) -> list[str]:
    """``count`` texts of ``low``..``high`` passages drawn at random. A text's paragraphs (cut
    at blank lines, each a chunk of its own) are runs of 2-4 passages on lines of their own, at
    most PARAGRAPH_CHARS long: 3,000 passages make ~10^10 such runs, so the chunks of a 1M
    store are distinct (a passage a chunk would repeat each ~330 times)."""
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        drawn = rng.choice(len(passages), int(rng.integers(low, high + 1)), replace=False)
        paragraphs: list[list[str]] = []
        want = 0
        for passage in (passages[i] for i in drawn):
            if (not paragraphs or len(paragraphs[-1]) >= want
                    or sum(map(len, paragraphs[-1])) + len(passage) > PARAGRAPH_CHARS):
                paragraphs.append([])
                want = int(rng.integers(2, 5))
            paragraphs[-1].append(passage)
        texts.append("\n\n".join("\n".join(lines) for lines in paragraphs))
    return texts


def chunk_fidelity(server: TableOllama, sample: list[str]) -> float:
    """On chunks cut the way the workers cut them."""
    chunker = chunker_for(Settings.from_env(environ={}))
    texts = [c.text for doc in sample for c in chunker.split(doc)][:64]
    return round(fidelity(server, texts), 4)


if __name__ == "__main__":
    asyncio.run(main())
