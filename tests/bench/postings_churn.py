"""The keyword postings after a namespace's history, against a fresh ingest of what it holds
now (issue 45's target): 100k memories added, 50k deleted, 20k replaced by a new text (as a
file ingested again), a twentieth of the writes run twice (a job that ran again), all through
the workers' store functions on a real FalkorDB server (workers/store.py: the postings' real
write path; deletes and replacements eight at a time, as workers run them), with the workers'
upkeep (shared/store/compaction.py) run every ``--every`` operations as its cron would; then
the live memories written once into a second namespace.

    ./dev bench postings_churn [--adds 100000] [--deletes 50000] [--updates 20000]
                               [--again 0.05] [--every 2000] [--queries 300] [--repeats 5]

No embeddings: the postings are written from a chunk's text alone and never read a vector,
so each chunk gets a small random one and the namespaces no vector index (measuring them
would time MiniLM, not the postings). The texts: LongMemEval's haystack turns and SciFact's
abstracts (../shared/data), cut into pieces of ~64 words, one chunk a memory.

Prints the bytes the server holds for each namespace's postings (MEMORY USAGE, by key), the
document frequencies, words and chunks counted against a recount from the chunks the graph
holds, and the keyword signal's time (services/query/search.py's keyword_signal, in
process: the terms' sizes, the pool from the postings, its rows, BM25 over them), each
question asked of both namespaces in turn, ``--repeats`` times. Bytes and counts are
deterministic (``--seed``); times are the host's. Writes tests/bench/results/postings_churn.json.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import time
from pathlib import Path

import numpy as np

from tests.support import postings as support
from tests.support.servers import falkordb_server
from zapomni.services.query.search import (
    KEYWORD_POOL,
    candidate_depth,
    filter_params,
    keyword_signal,
)
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.settings import Settings
from zapomni.shared.store import compaction
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.text.words import WORD, worth_matching

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "tests" / "bench" / "results"
PIECE_WORDS = 64
BATCH = 50  # memories a batch writes (the workers gather small memories in batches)
CONCURRENT = 8  # deletes and replacements at once


def texts(count: int) -> list[str]:
    """``count`` distinct pieces of ~PIECE_WORDS words, in the files' order."""
    out: dict[str, None] = {}

    def cut(text: str) -> None:
        words = text.split()
        for at in range(0, len(words), PIECE_WORDS):
            piece = " ".join(words[at : at + PIECE_WORDS])
            if len(piece) > 40:
                out.setdefault(piece)

    with gzip.open(DATA / "longmemeval_s_dev" / "questions.jsonl.gz", "rt") as lines:
        for line in lines:
            for session in json.loads(line)["haystack_sessions"]:
                for turn in session:
                    cut(turn["content"])
            if len(out) >= count:
                return list(out)[:count]
    with open(DATA / "scifact" / "corpus.jsonl") as lines:
        for line in lines:
            doc = json.loads(line)
            cut(doc["title"] + ". " + doc["text"])
            if len(out) >= count:
                return list(out)[:count]
    raise SystemExit(f"postings_churn: {len(out):,} texts in {DATA}, {count:,} needed")


def plan(args: argparse.Namespace) -> list[str]:
    ops = ["add"] * args.adds + ["delete"] * args.deletes + ["update"] * args.updates
    random.Random(args.seed).shuffle(ops)
    return ops


class History:
    """The churned namespace: what it holds now."""

    def __init__(self, graph, pool: list[str], seed: int, again: float) -> None:
        self.graph, self.pool = graph, iter(pool)
        self.jobs: list = []  # the jobs of the memories it holds
        self.rng = random.Random(seed + 1)
        self.again = again
        self.deferred = 0

    async def window(self, ops: list[str]) -> None:
        """A window of operations: its adds as one batch (written again for a share of them:
        a job that ran again), then its replacements' new texts and its deletes, CONCURRENT
        at a time (as that many workers would)."""
        jobs = [support.job_of("churn", next(self.pool)) for op in ops if op == "add"]
        if jobs:
            await support.add(self.graph, jobs)
            self.jobs += jobs
            again = [job for job in jobs if self.rng.random() < self.again]
            if again:
                await support.add(self.graph, again)
        gone, new = [], []
        for op in ops:
            if op == "add":
                continue
            if not self.jobs:
                self.deferred += 1
                continue
            at = self.rng.randrange(len(self.jobs))
            gone.append(self.jobs[at].memory_id)
            self.jobs[at] = self.jobs[-1]
            self.jobs.pop()
            if op == "update":
                new.append(support.job_of("churn", next(self.pool)))
        self.jobs += new
        await together([support.add_one(self.graph, job) for job in new])
        await together([support.delete(self.graph, memory) for memory in gone])


async def together(calls: list) -> None:
    for at in range(0, len(calls), CONCURRENT):
        await asyncio.gather(*calls[at : at + CONCURRENT])


async def upkeep(graph) -> int:
    """What the workers' cron does for a namespace (workers/upkeep.py), until done."""
    await compaction.reconcile(graph)
    return await compaction.compact(graph)


async def ingest(graph, jobs: list) -> None:
    for start in range(0, len(jobs), BATCH):
        await support.add(graph, jobs[start : start + BATCH])


def questions(jobs: list, count: int, seed: int) -> list[str]:
    """Four words worth matching from each of ``count`` live memories."""
    rng = random.Random(seed + 2)
    out = []
    for job in rng.sample(jobs, min(count, len(jobs))):
        words = [w for w in WORD.findall(job.text.lower()) if worth_matching(w)]
        if words:
            out.append(" ".join(rng.sample(words, min(4, len(words)))))
    return out


async def ask(graph, question: str, total: int) -> tuple[float, list]:
    request = decode_search(question, 10, None, None, mode="keyword")
    params = {**filter_params(request), "depth": candidate_depth(request)}
    started = time.perf_counter()
    ranked = await keyword_signal(graph, request, params, total, KEYWORD_POOL)
    return (time.perf_counter() - started) * 1000, [(row[1], round(s, 9)) for row, s in ranked]


async def timings(churned, fresh, asked: list[str], repeats: int) -> dict:
    totals = [(await support.recount(g)).chunks for g in (churned, fresh)]
    times: list[list[float]] = [[], []]
    same = 0
    for question in asked:  # warm: each question once on each
        a = (await ask(churned, question, totals[0]))[1]
        b = (await ask(fresh, question, totals[1]))[1]
        same += sorted(s for _, s in a) == sorted(s for _, s in b)
    for _ in range(repeats):
        for question in asked:
            for i, graph in enumerate((churned, fresh)):
                times[i].append((await ask(graph, question, totals[i]))[0])
    out = {name: {"p50": round(float(np.percentile(t, 50)), 2),
                  "p95": round(float(np.percentile(t, 95)), 2)}
           for name, t in zip(("churned", "fresh"), times, strict=True)}
    out["p95 ratio"] = round(out["churned"]["p95"] / out["fresh"]["p95"], 3)
    out["same scores"] = f"{same} of {len(asked)}"
    return out


async def check(graph) -> dict:
    have, want = await support.counted(graph), await support.recount(graph)
    return {"chunks": want.chunks, "words": want.words, "stems": len(want.df),
            "df equal to a recount": have.df == want.df, "words equal": have.words == want.words,
            "chunks equal": have.chunks == want.chunks}


async def run(args: argparse.Namespace) -> dict:
    ops = plan(args)
    pool = texts(args.adds + args.updates)
    load = {"load at start": os.getloadavg()}
    with falkordb_server() as url:
        store = GraphStore(Settings.from_env(environ={}, falkordb_url=url,
                                             redis_url=f"{url}/0", request_timeout=60.0))
        try:
            churned, fresh = store.graph("churn"), store.graph("fresh")
            await support.prepare(churned)
            await support.prepare(fresh)
            history = History(churned, pool, args.seed, args.again)
            started, steps = time.monotonic(), 0
            for at in range(0, len(ops), 100):
                await history.window(ops[at : at + 100])
                if (at + 100) // args.every > at // args.every:
                    steps += await upkeep(churned)
                    print(f"{at + 100:,} operations, {len(history.jobs):,} live, "
                          f"{time.monotonic() - started:.0f} s", flush=True)
            history_s = time.monotonic() - started
            left = await support.postings_bytes(churned)
            stats = (await compaction.stats_of(churned))._asdict()
            steps += await upkeep(churned)  # the passes due by now
            jobs = history.jobs
            started = time.monotonic()
            await ingest(fresh, jobs)
            fresh_s = time.monotonic() - started
            churned_bytes, fresh_bytes = (await support.postings_bytes(churned),
                                          await support.postings_bytes(fresh))
            asked = questions(jobs, args.queries, args.seed)
            load["load before timing"] = os.getloadavg()
            timed = await timings(churned, fresh, asked, args.repeats)
            load["load at end"] = os.getloadavg()
            return {
                "operations": {"adds": args.adds, "deletes": args.deletes,
                               "updates": args.updates, "again": args.again,
                               "deferred": history.deferred, "upkeep every": args.every,
                               "compaction steps": steps, "seconds": round(history_s),
                               "fresh ingest seconds": round(fresh_s)},
                "bytes": {"churned, as the upkeep left it": left, "its stats then": stats,
                          "churned, after the passes due": churned_bytes,
                          "fresh": fresh_bytes,
                          "ratio": round(sum(churned_bytes.values())
                                         / sum(fresh_bytes.values()), 3),
                          "ratio as left": round(sum(left.values())
                                                 / sum(fresh_bytes.values()), 3)},
                "counts": {"churned": await check(churned), "fresh": await check(fresh)},
                "keyword signal ms": timed, **load}
        finally:
            await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adds", type=int, default=100_000)
    parser.add_argument("--deletes", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--again", type=float, default=0.05)
    parser.add_argument("--every", type=int, default=2_000,
                        help="operations between two runs of the upkeep")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=45)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "postings_churn.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
