"""Many small memories: conversation turns one add each, through the queue into workers.

    ./dev bench turns [--turns 25000] [--per-conversation 500] [--workers 2]
                      [--producers 8] [--graph-auto] [--raw-sample 2000] [--queries 100]

Turns of LongMemEval-S dev haystacks (../shared/data), a turn over 900 characters cut at
its line breaks into pieces of ~400 (each piece a turn), the distinct ones of 150-900
characters kept (~100 tokens); each question's haystack a conversation of its first
``--per-conversation`` (500) turns, in a namespace of its own, each session a thread.
``--producers`` conversations at a time are added turn by turn through the front's code
path (add_memory: validation, claim, task record, queue), in order, while worker processes
(their model loaded, as in service) ingest them; a refused add ("temporarily unavailable")
waits a second and is sent again, and every refusal is counted with the queue's bytes at
that moment against ZAPOMNI_MAX_QUEUE_BYTES. The clock runs from the first add to the last
task done. The ceiling is the raw embedder in this process, in the same run: the product's
chunks of a sample of the turns through the same model, both cores, no cache (as ./dev
bench ingest), before the run and after it (the mean: the host's load moves). The CPU of
every process (workers, FalkorDB/Redis, the front's code in this process) per turn is
compared with the model's own per chunk on one thread: a ratio the host's load does not
move. Then search p50/p95 on a conversation of 500 turns (its question and sampled turns
as queries, through the query service's HTTP API, each asked once before it is timed).

Prints the figures and writes tests/bench/results/turns.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import statistics
import time
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.support.graph import stored
from tests.support.servers import ThreadedServer, falkordb_process
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import cpu_seconds, free_port
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.api import AddReceipt, SearchRequest
from zapomni.shared.protocol.errors import Overloaded
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import capacity
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.shared.tasks.heartbeat import count_alive
from zapomni.shared.text.chunking import chunker_for

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "longmemeval_s_dev" / "questions.jsonl.gz"
RESULTS = ROOT / "tests" / "bench" / "results"
SHORTEST, LONGEST = 150, 900  # characters of a turn kept: ~35-220 tokens, ~100 on average
PIECE = 400  # a longer turn is cut at line breaks into pieces of about this many characters

Turn = tuple[str, str]  # text, thread


def pieces(text: str) -> list[str]:
    """A turn as turns of ~PIECE characters: whole when it is short, else lines gathered."""
    if len(text) <= LONGEST:
        return [text]
    out, current = [], ""
    for line in (x.strip() for x in text.split("\n")):
        if line:
            current = f"{current}\n{line}" if current else line
        if len(current) >= PIECE:
            out.append(current)
            current = ""
    return [*out, current] if current else out


def conversations(turns: int, per: int) -> list[tuple[str, list[Turn], list[str]]]:
    """(namespace, its turns in order, its question) until ``turns`` turns in all, at most
    ``per`` a conversation; each text appears once over all of them (no embedding is
    served from a cache)."""
    seen: set[str] = set()
    out: list[tuple[str, list[Turn], list[str]]] = []
    total = 0
    with gzip.open(DATA, "rt") as lines:
        for i, line in enumerate(lines):
            q = json.loads(line)
            chat: list[Turn] = []
            for sid, session in zip(q["haystack_session_ids"], q["haystack_sessions"],
                                    strict=True):
                for turn in session:
                    for text in pieces(f"{turn['role']}: {turn['content'].strip()}"):
                        if SHORTEST <= len(text) <= LONGEST and text not in seen:
                            seen.add(text)
                            chat.append((text, sid))
            chat = chat[: min(per, turns - total)]
            if chat:
                out.append((f"conv-{i:03d}", chat, [q["question"]]))
                total += len(chat)
            if total >= turns:
                return out
    return out


def raw_embedder(texts: list[str], threads: int | None = None) -> dict:
    """The ceiling: the product's chunks of these texts through the model alone (both cores,
    as the settings have it; ``threads``: that many instead), wall and CPU time."""
    settings = Settings.from_env(environ={})
    chunker = chunker_for(settings)
    chunks = [c.text for text in texts for c in chunker.split(text)]
    embedder = OnnxEmbedder(threads=settings.onnx_threads if threads is None else threads)
    embedder.embed_sync(chunks[:64])  # warm up
    started, cpu = time.perf_counter(), time.process_time()
    embedder.embed_sync(chunks)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    tokens = [len(embedder._tokenizer.encode(c).ids) for c in chunks[:2000]]
    return {"texts": len(texts), "chunks": len(chunks), "seconds": round(elapsed, 2),
            "chunks_per_s": round(len(chunks) / elapsed, 1),
            "cpu_ms_per_chunk": round(cpu / len(chunks) * 1000, 2),
            "mean_tokens": round(statistics.fmean(tokens), 1)}


class Producer:
    """Adds conversations turn by turn; counts the refusals and the queue's bytes then."""

    def __init__(self, front: Front, cap: int) -> None:
        self.front = front
        self.cap = cap
        self.receipts: list[AddReceipt] = []
        self.refusals: list[dict] = []
        self.latencies: list[float] = []

    async def add(self, namespace: str, chat: list[Turn]) -> None:
        for text, thread in chat:
            memory = decode_add_memory(text, {"thread": thread}, namespace)
            while True:
                began = time.perf_counter()
                try:
                    receipt = await ops.add_memory(self.front, memory)
                except Overloaded as exc:
                    queued = await capacity.queued_bytes(self.front.redis)
                    depth = await self.front.redis.zcard(QUEUE_NAME)
                    self.refusals.append({"bytes": queued, "jobs": depth,
                                          "below_cap": queued + len(text) * 2 < self.cap,
                                          "message": exc.message})
                    await asyncio.sleep(1.0)
                    continue
                self.latencies.append(time.perf_counter() - began)
                self.receipts.append(receipt)
                break


async def wait_ready(client: redis.asyncio.Redis, workers: int, timeout: float = 300) -> None:
    async with asyncio.timeout(timeout):
        while await count_alive(client) < workers:
            await asyncio.sleep(0.1)


async def ingest(settings: Settings, convs: list, workers: int, producers: int) -> dict:
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await client.flushall()
    front = Front(settings)
    producer = Producer(front, settings.max_queue_bytes)
    peak = {"jobs": 0, "bytes": 0}

    async def watch() -> None:
        while True:
            peak["jobs"] = max(peak["jobs"], await client.zcard(QUEUE_NAME))
            peak["bytes"] = max(peak["bytes"], await capacity.queued_bytes(client))
            await asyncio.sleep(0.5)

    server = int((await client.info("server"))["process_id"])
    with worker_processes(settings, workers,
                          ZAPOMNI_ONNX_THREADS=str(max(1, 2 // workers))) as procs:
        await wait_ready(client, workers)
        watcher = asyncio.create_task(watch())
        pids = {"workers": [p.pid for p in procs], "falkordb_and_redis": [server]}
        cpu_before = {k: sum(map(cpu_seconds, v)) for k, v in pids.items()}
        cpu_before["front_and_bench"] = time.process_time()
        started = time.perf_counter()
        pending = list(convs)
        gate = asyncio.Semaphore(producers)

        async def one(namespace: str, chat: list[Turn]) -> None:
            async with gate:
                await producer.add(namespace, chat)

        await asyncio.gather(*(one(ns, chat) for ns, chat, _ in pending))
        added = time.perf_counter() - started
        print(f"added {len(producer.receipts)} turns in {added:.1f} s "
              f"({len(producer.refusals)} refusals)", flush=True)
        await wait_tasks(client, [r.task_id for r in producer.receipts], timeout=7200,
                         until=("done", "failed"))
        elapsed = time.perf_counter() - started
        cpu = {k: sum(map(cpu_seconds, v)) - cpu_before[k] for k, v in pids.items()}
        cpu["front_and_bench"] = time.process_time() - cpu_before["front_and_bench"]
        watcher.cancel()
    failed = 0
    for receipt in producer.receipts:
        raw = await client.hget(f"zapomni:task:{receipt.task_id}", "state")
        failed += raw != b"done"
    await front.aclose()
    chunks = sum([(await stored(settings, ns))["chunks"] for ns, _, _ in convs])
    await client.aclose()
    lat = sorted(producer.latencies)
    below = [r for r in producer.refusals if r["below_cap"]]
    return {
        "turns": len(producer.receipts), "chunks": chunks, "failed": failed,
        "conversations": len(convs), "workers": workers, "producers": producers,
        "seconds": round(elapsed, 1), "adding_seconds": round(added, 1),
        "turns_per_s": round(len(producer.receipts) / elapsed, 1),
        "chunks_per_s": round(chunks / elapsed, 1),
        "add_p50_ms": round(statistics.median(lat) * 1000, 2),
        "add_p95_ms": round(lat[int(len(lat) * 0.95)] * 1000, 2),
        "refusals": len(producer.refusals), "refusals_below_byte_cap": len(below),
        "first_refusal": producer.refusals[0] if producer.refusals else None,
        "peak_jobs": peak["jobs"], "peak_bytes": peak["bytes"],
        "byte_cap": settings.max_queue_bytes,
        "cpu_ms_per_turn": {k: round(v / len(producer.receipts) * 1000, 2)
                            for k, v in cpu.items()},
    }


async def search_latency(settings: Settings, convs: list, queries: int) -> dict:
    """Search p50/p95 in the conversation nearest 500 turns (with its question)."""
    namespace, chat, asked = min(convs, key=lambda c: abs(len(c[1]) - 500))
    step = max(1, len(chat) // max(1, queries - len(asked)))
    texts = (asked + [t[:200] for t, _ in chat[::step]])[:queries]
    port = free_port()
    encode = msgspec.json.Encoder().encode
    times: list[float] = []
    with ThreadedServer(build_app(msgspec.structs.replace(
            settings, query_url=f"http://127.0.0.1:{port}")), port=port) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=60) as http:
            for timed in (False, True):
                for text in texts:
                    body = encode(SearchRequest(query=text, namespace=namespace))
                    began = time.perf_counter()
                    response = await http.post("/v1/search", content=body,
                                               headers={"content-type": "application/json"})
                    response.raise_for_status()
                    if timed:
                        times.append(time.perf_counter() - began)
    times.sort()
    return {"namespace": namespace, "turns": len(chat), "queries": len(times),
            "p50_ms": round(statistics.median(times) * 1000, 1),
            "p95_ms": round(times[int(len(times) * 0.95)] * 1000, 1)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=25_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--per-conversation", type=int, default=500)
    parser.add_argument("--raw-sample", type=int, default=2000,
                        help="turns the raw embedder embeds for its rate (before and after)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--graph-auto", action="store_true",
                        help="read entities after every ingest, as the default settings do")
    args = parser.parse_args()
    convs = conversations(args.turns, args.per_conversation)
    texts = [t for _, chat, _ in convs for t, _ in chat]
    step = max(1, len(texts) // args.raw_sample)
    sample = texts[::step][: args.raw_sample]
    raw = [raw_embedder(sample)]
    print(f"raw embedder: {raw[0]}", flush=True)
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     graph_auto=args.graph_auto)
        run = await ingest(settings, convs, args.workers, args.producers)
        print(json.dumps(run, indent=2), flush=True)
        search = await search_latency(settings, convs, args.queries)
    raw.append(raw_embedder(sample))  # again: the host's load moves during the run
    single = raw_embedder(sample[: len(sample) // 4], threads=1)
    rate = statistics.fmean(r["chunks_per_s"] for r in raw)
    run["efficiency"] = round(run["turns_per_s"] / rate, 3)
    turn_cpu = sum(run["cpu_ms_per_turn"].values())
    run["cpu_efficiency"] = round(single["cpu_ms_per_chunk"] / turn_cpu, 3)
    print(f"raw embedder again: {raw[1]}; one thread: {single}")
    print(f"search: {search}")
    print(f"\nturns/s to searchable {run['turns_per_s']} = {run['efficiency']} x the raw "
          f"embedder's {rate:.1f} chunks/s (mean of before and after; target >= 0.8); CPU "
          f"{turn_cpu:.1f} ms a turn in all processes against {single['cpu_ms_per_chunk']} "
          f"ms a chunk for the model alone on one thread = {run['cpu_efficiency']}; "
          f"refusals below the byte cap: {run['refusals_below_byte_cap']} (target 0); "
          f"search p95 {search['p95_ms']} ms on {search['turns']} turns")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "turns.json").write_text(json.dumps(
        {"raw_embedder": raw, "raw_one_thread": single, "ingest": run, "search": search,
         "args": vars(args)},
        indent=2))


if __name__ == "__main__":
    asyncio.run(main())
