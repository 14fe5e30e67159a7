"""LongMemEval-S dev: does search find the chat sessions that answer a question about them?

    ./dev bench longmemeval [--store turns sessions] [--questions N] [--workers 2]
                            [--ranks relevance memory] [--no-as-of] [--dump FILE]
                            [--tune timeline.TIME_WEIGHT=0.2 ...]

../shared/data/longmemeval_s_dev/questions.jsonl.gz: 98 questions of LongMemEval-S (cleaned),
a fifth of each type, each over its own haystack of ~50 chat sessions (~500 turns). The 7
abstention questions (ids ending ``_abs``: nothing to find) are left out. Each question's
haystack goes in a namespace of its own, through the product's paths: the front's code path
(validation, task records, the queue), real worker processes (chunks, vectors, entities) and
the query service over HTTP.

``--store turns`` (the default): every turn one memory, with its session's date as event time
(metadata ``occurred_at``), its ``role`` (user or assistant) and the session as ``thread``,
added in order. ``--store sessions``, for comparison: every session one memory (its turns as
"role: content" lines), the session's date as event time. Each question is asked with
``as_of`` its question_date (``--no-as-of``: without), default search (hybrid, limit 100;
``--ranks`` adds rank="memory"), and its latency measured apart at limit 10.

Scored at session level, as the peers publish (../shared/data/README.md): R@k = share of the
evidence sessions (``answer_session_ids``) among the first k distinct sessions of the ranked
results; any@k = at least one of them there; nDCG@10 over sessions (binary gain); and at
turn level (``--store turns``), turn R@k = share of the evidence turns (``has_answer``) among
the first k results. Per question type and overall.

The haystacks stay in a store of their own under tests/bench/.cache (longmemeval-turns,
longmemeval-sessions: FalkorDB's snapshot, with the chunk vectors), so a run that stops
resumes at the first question not fully ingested, and a later run only asks the questions
(delete the folder to ingest again, e.g. after a change to what ingest stores). ``--tune``
sets a measured constant of a query-service module for the run (the service runs in this
process), to measure another value. Prints tables; writes
tests/bench/results/longmemeval-<store>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import importlib
import json
import math
import re
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.bench.retrieval import CACHE, DATA, RESULTS, mean, percentile
from tests.support.servers import ThreadedServer
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import ensure_binaries, free_port, start_server, stop_process
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.ids import memory_id
from zapomni.shared.protocol.validation import decode_add_memory, normalise_text
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import migrate_store
from zapomni.shared.tasks import tasks

QUESTIONS = DATA / "longmemeval_s_dev" / "questions.jsonl.gz"
LIMIT = 100  # results asked per question: enough distinct sessions for R@10
LATENCY_LIMIT = 10  # what an agent asks; the latency pass
DONE = "bench:lme:done:"  # a Redis key per namespace whose ingest (and entities) finished
WINDOW = 3  # namespaces queued ahead of the one waited for
KS = (5, 10)

# every haystack's chunk vectors kept a year, so a re-run embeds nothing again
KEEP_VECTORS = {"zapomni.workers.resources.CACHE_MAX": 400_000,
         "zapomni.workers.resources.CACHE_DAYS": 365}


@dataclass
class Item:
    text: str
    metadata: dict
    owners: list[tuple[str, int]]  # (session id, turn index; -1 for a whole session)


@dataclass
class Question:
    id: str
    type: str
    text: str
    as_of: float
    evidence: set[str]  # session ids
    evidence_turns: set[tuple[str, int]]
    items: list[Item] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return "lme-" + re.sub(r"[^a-z0-9_-]", "-", self.id.lower())[:60]


def when(date: str) -> float:
    """'2023/03/27 (Mon) 00:49' -> unix seconds (read as UTC)."""
    return datetime.strptime(date[:10] + date[-5:], "%Y/%m/%d%H:%M").replace(
        tzinfo=UTC).timestamp()


def load(store: str, limit: int | None) -> list[Question]:
    with gzip.open(QUESTIONS, "rt") as lines:
        raw = [json.loads(line) for line in lines]
    out = []
    for q in raw:
        if q["question_id"].endswith("_abs"):
            continue
        question = Question(q["question_id"], q["question_type"], q["question"],
                            when(q["question_date"]), set(q["answer_session_ids"]), set())
        for sid, date, turns in zip(q["haystack_session_ids"], q["haystack_dates"],
                                    q["haystack_sessions"], strict=True):
            question.evidence_turns |= {(sid, i) for i, t in enumerate(turns)
                                        if t.get("has_answer")}
            stamp = datetime.fromtimestamp(when(date), UTC).isoformat()
            if store == "turns":
                question.items += [Item(t["content"], {"thread": sid, "role": t["role"],
                                                       "occurred_at": stamp}, [(sid, i)])
                                   for i, t in enumerate(turns) if t["content"].strip()]
            else:
                text = "\n\n".join(f"{t['role']}: {t['content']}" for t in turns)
                question.items.append(Item(text, {"occurred_at": stamp}, [(sid, -1)]))
        out.append(question)
    return out[:limit] if limit else out


def owners(question: Question) -> dict[str, list[tuple[str, int]]]:
    """memory id -> the (session, turn) it holds: the same text twice is one memory."""
    by_memory: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for item in question.items:
        _, content_hash = normalise_text(item.text)
        by_memory[memory_id(question.namespace, content_hash)].extend(item.owners)
    return by_memory


# ---- ingest: resumable per namespace -----------------------------------------------------


async def add_items(front: Front, question: Question) -> list[str]:
    """Every item of the haystack through the front's add path; the ingest task ids."""
    ids = []
    for item in question.items:
        receipt = await ops.add_memory(front, decode_add_memory(item.text, item.metadata,
                                                                question.namespace))
        ids.append(receipt.task_id)
    return ids


async def settle(client: redis.asyncio.Redis, question: Question, ids: list[str]) -> None:
    """Until every ingest task and the entity extraction after it are done; then the
    namespace is marked done."""
    await wait_tasks(client, ids, timeout=7200, until=("done",))
    records = await asyncio.gather(*(tasks.get_task(client, i) for i in dict.fromkeys(ids)))
    followers = [r.graph_task_id for r in records if r is not None and r.graph_task_id]
    await wait_tasks(client, followers, timeout=7200, until=("done",))
    await client.set(DONE + question.namespace, "1")


async def migrate(settings: Settings) -> None:
    """The cached haystacks brought to the stored shape this code reads, as workers do at
    start-up: a run that only asks starts no worker, and the query service reads a namespace
    as it finds it (a version 2 store read by version 5 had no keyword postings: the keyword
    signal found nothing, 2026-11-28)."""
    store = GraphStore(settings)
    started = time.perf_counter()
    try:
        changed = await migrate_store(store)
    finally:
        await store.aclose()
    if changed:
        print(f"migrated {len(changed)} haystacks to the current stored shape "
              f"({time.perf_counter() - started:.0f} s)", flush=True)


async def ingest(settings: Settings, questions: list[Question], workers: int) -> float:
    """Ingest the haystacks not yet done; seconds it took (0 when all were done)."""
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    todo = [q for q in questions if not await client.exists(DONE + q.namespace)]
    if not todo:
        await client.aclose()
        return 0.0
    print(f"ingesting {len(todo)} of {len(questions)} haystacks "
          f"({sum(len(q.items) for q in todo):,} memories)", flush=True)
    started = time.perf_counter()
    front = Front(settings)
    queued: list[tuple[Question, list[str]]] = []
    try:
        with worker_processes(settings, workers, ZAPOMNI_ONNX_THREADS=str(max(1, 2 // workers)),
                              constants=KEEP_VECTORS):
            for done, question in enumerate(todo, start=1):
                queued.append((question, await add_items(front, question)))
                if len(queued) > WINDOW:
                    await settle(client, *queued.pop(0))
                if done % 10 == 0:
                    await client.bgsave()
                    print(f"  {done}/{len(todo)} queued, {time.perf_counter() - started:.0f} s",
                          flush=True)
            for waiting in queued:
                await settle(client, *waiting)
    finally:
        await front.aclose()
        await client.aclose()
    return time.perf_counter() - started


@contextlib.asynccontextmanager
async def haystack_store(store: str) -> AsyncIterator[str]:
    """A FalkorDB server over tests/bench/.cache/longmemeval-<store>: it loads the snapshot
    left by the last run and saves one at the end (graphs, vectors and done marks kept)."""
    folder = CACHE / f"longmemeval-{store}"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = start_server(ensure_binaries(), port, folder, persistent=False)
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        client = redis.asyncio.Redis(port=port)
        with contextlib.suppress(redis.exceptions.ResponseError):  # a BGSAVE under way
            await client.save()
        await client.aclose()
        stop_process(server, timeout=300)


# ---- asking ----------------------------------------------------------------------------


def ranked_owners(hits: list, by_memory: dict[str, list[tuple[str, int]]]
                  ) -> tuple[list[str], list[tuple[str, int]]]:
    """The distinct sessions and turns of the results, in order."""
    sessions: dict[str, None] = {}
    turns: dict[tuple[str, int], None] = {}
    for hit in hits:
        for owner in by_memory.get(hit.memory_id, []):
            sessions.setdefault(owner[0])
            turns.setdefault(owner)
    return list(sessions), list(turns)


def ndcg(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, s in enumerate(ranked[:k]) if s in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
    return dcg / ideal if ideal else 0.0


def scores(question: Question, sessions: list[str], turns: list[tuple[str, int]]) -> dict:
    row = {}
    for k in KS:
        found = question.evidence & set(sessions[:k])
        row[f"R@{k}"] = len(found) / len(question.evidence)
        row[f"any@{k}"] = float(bool(found))
    row["nDCG@10"] = ndcg(sessions, question.evidence)
    if question.evidence_turns:
        for k in KS:
            row[f"turn R@{k}"] = (len(question.evidence_turns & set(turns[:k]))
                                  / len(question.evidence_turns))
    return row


async def ask(http: httpx2.AsyncClient, question: Question, limit: int, rank: str,
              as_of: bool) -> tuple[list, float]:
    body = msgspec.json.encode(SearchRequest(
        query=question.text, limit=limit, namespace=question.namespace, rank=rank,
        as_of=question.as_of if as_of else None))
    started = time.perf_counter()
    response = await http.post("/v1/search", content=body,
                               headers={"content-type": "application/json"})
    seconds = time.perf_counter() - started
    response.raise_for_status()
    return msgspec.json.decode(response.content, type=SearchResponse).results, seconds


async def evaluate(settings: Settings, questions: list[Question], rank: str, as_of: bool,
                   dump: list | None) -> tuple[list[dict], list[float]]:
    rows, latencies = [], []
    with ThreadedServer(build_app(settings), port=free_port()) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=120) as http:
            for question in questions:
                by_memory = owners(question)
                hits, _ = await ask(http, question, LIMIT, rank, as_of)
                sessions, turns = ranked_owners(hits, by_memory)
                rows.append({"id": question.id, "type": question.type,
                             **scores(question, sessions, turns)})
                if dump is not None:
                    dump.append({"id": question.id, "type": question.type,
                                 "question": question.text, "rank": rank,
                                 "evidence": sorted(question.evidence),
                                 "sessions": sessions[:20],
                                 "hits": [{"memory_id": h.memory_id, "score": h.score,
                                           "occurred_at": h.occurred_at,
                                           "owners": by_memory.get(h.memory_id, []),
                                           "why": msgspec.to_builtins(h.why),
                                           "text": h.text[:200]} for h in hits[:30]]})
            for question in questions:  # latency: what an agent asks, query vector cached
                latencies.append((await ask(http, question, LATENCY_LIMIT, rank, as_of))[1])
    return rows, latencies


def summary(rows: list[dict]) -> list[dict]:
    """Per question type, then all: the mean of each metric."""
    keys = [k for k in rows[0] if k not in ("id", "type")]
    groups = defaultdict(list)
    for row in rows:
        groups[row["type"]].append(row)
    out = []
    for name, members in [*sorted(groups.items()), ("all", rows)]:
        line = {"type": name, "questions": len(members)}
        for key in keys:
            line[key] = mean([m[key] for m in members if key in m])
        out.append(line)
    return out


def table(lines: list[dict]) -> str:
    header = list(lines[0])
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(line[h]) for h in header) + " |" for line in lines]
    return "\n".join(out)


TARGETS = {"R@5": 0.97, "any@5": 0.99, "nDCG@10": 0.95}
TYPE_TARGET = 0.93  # R@5 of every question type


def verdict(lines: list[dict]) -> list[str]:
    overall = lines[-1]
    said = [f"{key} {overall[key]:.3f} (target >= {target}: "
            f"{'met' if overall[key] >= target else 'missed'})"
            for key, target in TARGETS.items()]
    low = [f"{line['type']} {line['R@5']:.3f}" for line in lines[:-1]
           if line["R@5"] < TYPE_TARGET]
    said.append(f"every type R@5 >= {TYPE_TARGET}: " + ("met" if not low else
                                                         "missed (" + ", ".join(low) + ")"))
    return said


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", nargs="+", default=["turns"], choices=["turns", "sessions"])
    parser.add_argument("--questions", type=int, default=None, help="only the first N")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ranks", nargs="+", default=["relevance"],
                        choices=["relevance", "memory"])
    parser.add_argument("--no-as-of", action="store_true",
                        help="ask without as_of (the question's date)")
    parser.add_argument("--dump", type=Path, help="write each question's results here (JSON)")
    parser.add_argument("--tune", nargs="+", default=[], metavar="MODULE.NAME=VALUE",
                        help="a constant of zapomni.services.query.MODULE for this run")
    args = parser.parse_args()
    for tune in args.tune:
        name, value = tune.split("=", 1)
        module, constant = name.rsplit(".", 1)
        target = importlib.import_module(f"zapomni.services.query.{module}")
        setattr(target, constant, type(getattr(target, constant))(value))
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": []}
    dump: list | None = [] if args.dump else None
    for store in args.store:
        questions = load(store, args.questions)
        async with haystack_store(store) as url:
            settings = Settings.from_env(
                environ={}, redis_url=f"{url}/0", falkordb_url=url,
                query_url=f"http://127.0.0.1:{free_port()}", max_queue_depth=1_000_000,
                max_queue_bytes=2**31)
            await migrate(settings)
            seconds = await ingest(settings, questions, args.workers)
            memories = sum(len(q.items) for q in questions)
            if seconds:
                print(f"{store}: ingest {seconds:.0f} s ({memories / seconds:.1f} memories/s)",
                      flush=True)
            for rank in args.ranks:
                rows, latencies = await evaluate(settings, questions, rank, not args.no_as_of,
                                                 dump)
                lines = summary(rows)
                print(f"\n{store}, rank {rank}, as_of {'off' if args.no_as_of else 'on'}: "
                      f"search p50 {percentile(latencies, 0.5)} ms, p95 "
                      f"{percentile(latencies, 0.95)} ms (limit {LATENCY_LIMIT})")
                print(table(lines))
                for line in verdict(lines):
                    print(line)
                report["runs"].append({"store": store, "rank": rank, "ingest_s": round(seconds),
                                       "memories": memories, "summary": lines, "rows": rows,
                                       "p50_ms": percentile(latencies, 0.5),
                                       "p95_ms": percentile(latencies, 0.95),
                                       "latency_mean_ms": round(statistics.fmean(latencies)
                                                                * 1000, 1)})
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "longmemeval-" + "-".join(args.store)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    if args.dump:
        args.dump.write_text(json.dumps(dump))


if __name__ == "__main__":
    asyncio.run(main())
