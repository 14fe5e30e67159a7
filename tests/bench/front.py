"""The front and the query embedding, measured against their limits.

    ./dev bench front [--calls 200]

1. add_memory latency at fastmcp's client over streamable HTTP, for 1 KB, 100 KB and 10 MB
   texts (distinct texts; no workers, so only the front's work is timed), next to the floor
   of the same run: an HTTP round trip of the same body to an endpoint that only reads it
   (what any server must do), and the front's own steps on that text (validate + sha256,
   msgpack the job).
2. The query embedding: uncached (in-process MiniLM) vs cached (Redis hit) p50/p95, as
   search's own ``embed_query`` does it.

Prints a table and writes tests/bench/results/front.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import httpx2
import numpy as np
import redis.asyncio
from fastmcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.servers import ThreadedServer, falkordb_process
from zapomni.services.mcp.http import http_app
from zapomni.services.query.search import embed_query
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.jobs import IngestJob
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.queue import serialize

RESULTS = Path(__file__).resolve().parents[2] / "tests" / "bench" / "results"
SIZES = {"1 KB": 1_000, "100 KB": 100_000, "10 MB": 10_000_000}


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000
    return {f"p{q}": round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99)}


def texts(size: int, count: int) -> list[str]:
    base = "memory " * (size // 7 + 1)
    return [f"{i:08d} {base}"[:size] for i in range(count)]


async def sink(request: Request) -> Response:
    await request.body()
    return Response("{}", media_type="application/json")


async def add_latency(url: str, sink_url: str, size: int, count: int) -> dict:
    bodies = texts(size, count)
    adds, floor, steps = [], [], []
    async with Client(url, timeout=120) as client, httpx2.AsyncClient(timeout=120) as http:
        await client.call_tool("graph_status", {"task_id": "task_" + "0" * 32},
                               raise_on_error=False)  # session warm
        for text in bodies:
            started = time.perf_counter()
            result = await client.call_tool("add_memory", {"text": text})
            adds.append(time.perf_counter() - started)
            assert not result.is_error, result.content
            started = time.perf_counter()
            await http.post(sink_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                            "params": {"name": "add_memory",
                                                       "arguments": {"text": text}}})
            floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            memory = decode_add_memory(text, None, None)
            serialize(IngestJob(task_id="t", memory_id="m", namespace="default",
                                text=memory.text, content_hash=memory.content_hash, tags=[],
                                source="", metadata_json="{}", created_at=0.0))
            steps.append(time.perf_counter() - started)
    return {"add": percentiles(adds), "http_floor": percentiles(floor),
            "validate_hash_msgpack": percentiles(steps)}


async def embedding(settings: Settings, count: int) -> dict:
    embedder = OnnxEmbedder(threads=settings.onnx_threads)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    questions = [f"what did note {i} say about the harbour schedule?" for i in range(count)]
    await embed_query(embedder, client, "warm the model up")
    cold, warm = [], []
    for q in questions:
        started = time.perf_counter()
        await embed_query(embedder, client, q)
        cold.append(time.perf_counter() - started)
    for q in questions:
        started = time.perf_counter()
        await embed_query(embedder, client, q)
        warm.append(time.perf_counter() - started)
    await client.aclose()
    return {"uncached": percentiles(cold), "cached": percentiles(warm)}


async def main_async(args: argparse.Namespace) -> dict:
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     query_url=f"http://127.0.0.1:{free_port()}",
                                     max_queue_depth=1_000_000)
        floor_app = Starlette(routes=[Route("/sink", sink, methods=["POST"])])
        result: dict = {"add_memory": {}}
        with ThreadedServer(http_app(settings)) as front, ThreadedServer(floor_app) as floor:
            for name, size in SIZES.items():
                count = args.calls if size < 1_000_000 else max(10, args.calls // 10)
                result["add_memory"][name] = await add_latency(
                    f"{front.url}/mcp", f"{floor.url}/sink", size, count)
                await redis.asyncio.Redis.from_url(settings.redis_url).flushall()
        result["query_embedding"] = await embedding(settings, args.calls)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    print("add_memory at the client (ms) | p50 | p95 | p99 | HTTP floor p50 / p95 | "
          "validate+hash+msgpack p50")
    for name, row in result["add_memory"].items():
        a, f, s = row["add"], row["http_floor"], row["validate_hash_msgpack"]
        print(f"{name} | {a['p50']} | {a['p95']} | {a['p99']} | {f['p50']} / {f['p95']} | "
              f"{s['p50']}")
    q = result["query_embedding"]
    print(f"query embedding (ms): uncached p50 {q['uncached']['p50']} p95 "
          f"{q['uncached']['p95']}; cached p50 {q['cached']['p50']} p95 {q['cached']['p95']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "front.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
