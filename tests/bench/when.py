"""What event time costs a question: reading its time words, and search on a 500-turn
namespace with and without the steps issue 32 added to every search.

    ./dev bench when [--rounds 10] [--parse-rounds 200]

Time words: services/query/when.py's read_time and timeline.asked_order over the 98
questions of LongMemEval-S dev and the generated questions of tests/bench/currency.py,
``--parse-rounds`` times; the mean and p99 per question (target: <= 1 ms).

Search: the first haystack of ``./dev bench longmemeval`` (its store under
tests/bench/.cache/longmemeval-turns: run that benchmark first), ~500 turns in one namespace,
asked its own 98 questions as_of their dates through the query service's search_memory in
this process, one at a time, in two arms side by side in blocks of 14, the order rotating:
"issue 32" (as it is) and "without" (the time prior and the newer-statement step replaced by
the identity: what this issue adds to every search). p50/p95 of each arm, and the p95
difference as the median and 5-95% range over resampled blocks. Writes
tests/bench/results/when.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import numpy as np

from tests.bench.currency import ATTRIBUTES
from tests.bench.longmemeval import haystack_store, load
from tests.bench.retrieval import RESULTS
from zapomni.services.query import search as search_module
from zapomni.services.query.search import search_memory
from zapomni.services.query.timeline import asked_order
from zapomni.services.query.when import read_time
from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore

ARMS = ("issue 32", "without")
BLOCK = 14


def parse_cost(questions: list[tuple[str, float]], rounds: int) -> dict:
    per: list[float] = []
    for _ in range(rounds):
        for text, as_of in questions:
            started = time.perf_counter()
            asked_order(read_time(text, as_of), text)
            per.append(time.perf_counter() - started)
    us = np.array(per) * 1e6
    return {"questions": len(questions), "rounds": rounds,
            "mean_us": round(float(us.mean()), 1), "p99_us": round(float(np.percentile(us, 99)),
                                                                   1)}


async def identity_prior(graph, candidates, when, query=""):
    return candidates


async def identity_currency(graph, candidates, order, prop):
    return candidates


async def block(arm: str, store, embedder, redis, settings, requests) -> list[float]:
    real = (search_module.time_prior, search_module.newer_first)
    if arm == "without":
        search_module.time_prior, search_module.newer_first = identity_prior, identity_currency
    try:
        out = []
        for request in requests:
            started = time.perf_counter()
            await search_memory(store, embedder, redis, settings, request)
            out.append(time.perf_counter() - started)
        return out
    finally:
        search_module.time_prior, search_module.newer_first = real


def p(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(values) * 1000, q)), 2)


async def search_cost(rounds: int) -> dict:
    import redis.asyncio

    questions = load("turns", None)
    namespace = questions[0].namespace
    async with haystack_store("turns") as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     access_tracking=False, onnx_threads=1)
        store = GraphStore(settings)
        embedder = make_embedder(settings)
        client = redis.asyncio.Redis.from_url(settings.redis_url)
        requests = [SearchRequest(query=q.text, namespace=namespace, as_of=q.as_of)
                    for q in questions]
        try:
            await block("issue 32", store, embedder, client, settings, requests)  # warm
            groups = []
            for round_ in range(rounds):
                for number, first in enumerate(range(0, len(requests), BLOCK)):
                    order = ARMS if (number + round_) % 2 == 0 else ARMS[::-1]
                    groups.append({arm: await block(arm, store, embedder, client, settings,
                                                    requests[first:first + BLOCK])
                                   for arm in order})
        finally:
            await client.aclose()
            await embedder.aclose()
            await store.aclose()
    rng = np.random.default_rng(7)
    gaps = []
    for _ in range(1000):
        picked = [groups[i] for i in rng.integers(0, len(groups), len(groups))]
        gaps.append(p([t for g in picked for t in g["issue 32"]], 95)
                    - p([t for g in picked for t in g["without"]], 95))
    arms = {arm: {"searches": sum(len(g[arm]) for g in groups),
                  "p50_ms": p([t for g in groups for t in g[arm]], 50),
                  "p95_ms": p([t for g in groups for t in g[arm]], 95),
                  "mean_ms": round(statistics.fmean(t for g in groups for t in g[arm]) * 1000,
                                   2)} for arm in ARMS}
    return {"namespace": namespace, "memories": len(questions[0].items), "arms": arms,
            "p95_difference_ms": [round(float(np.percentile(gaps, q)), 2) for q in (50, 5, 95)]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--parse-rounds", type=int, default=200)
    args = parser.parse_args()
    asked = [(q.text, q.as_of) for q in load("turns", None)]
    asked += [(form.format(s="Mira"), 1.7e9) for _, mine, theirs in ATTRIBUTES.values()
              for form in (*mine[2:], *theirs[2:])]
    parsing = parse_cost(asked, args.parse_rounds)
    print(f"time words: {parsing['mean_us']} us a question on average, p99 "
          f"{parsing['p99_us']} us ({parsing['questions']} questions x {args.parse_rounds}; "
          f"target <= 1 ms: {'met' if parsing['p99_us'] <= 1000 else 'missed'})", flush=True)
    searching = await search_cost(args.rounds)
    for arm, row in searching["arms"].items():
        print(f"{arm:9} {row['searches']} searches: p50 {row['p50_ms']} ms, p95 "
              f"{row['p95_ms']} ms, mean {row['mean_ms']} ms")
    mid, low, high = searching["p95_difference_ms"]
    print(f"p95 difference: {mid:+.2f} ms [{low:+.2f}, {high:+.2f}] over resampled blocks "
          f"({searching['memories']} turns in {searching['namespace']})")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "when.json").write_text(json.dumps({"parsing": parsing, "search": searching},
                                                  indent=2))


if __name__ == "__main__":
    asyncio.run(main())
