"""FalkorDB in cluster mode: write and search per shard, memory per node, failover time.

    ./dev bench cluster [--chunks 2000] [--queries 50] [--batch 32]

Six embedded servers (3 masters + 3 replicas, tests/support/cluster.py), one namespace per
master and setting. Writes are the ingest job's own per part (write_memory, write_chunks,
mark_ready; ``--batch`` chunks a part) through the cluster client, of real MiniLM vectors
(tests/support/vectors.py; 2,000 embedded, the rest joined pairs): first each shard alone
without waiting for its replica and then with WAIT 1 after each part (what
ZAPOMNI_FALKORDB_WAIT_REPLICAS=1 adds to a job), then all three shards at once with WAIT.
Search is the query service's search_memory (vector and hybrid) of the evaluation sets'
questions, timed on a second pass (the query vectors then come from the Redis cache, so the
figure is the store's and fusion's, not the model's). Memory: each node's RSS and
used_memory at the end. Failover: a master killed (-9) -> its replica is master -> the first
write to a namespace on that shard succeeds through the cluster client.
Prints a table; writes tests/bench/results/cluster.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from pathlib import Path

import msgspec
import numpy as np
from redis.asyncio import Redis
from redis.cluster import key_slot

from tests.bench.writes import spans
from tests.support.cluster import Cluster, cluster_info, falkordb_cluster, role
from tests.support.servers import falkordb_process
from tests.support.vectors import corpus, questions
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.protocol.errors import ZapomniError
from zapomni.shared.protocol.jobs import IngestJob
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.settings import Settings
from zapomni.shared.store import replication
from zapomni.shared.store.graphstore import GraphStore, graph_name, run
from zapomni.shared.store.migrate import prepare_namespace
from zapomni.workers.store import mark_ready, write_chunks, write_memory

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
REAL = 2000  # passages embedded (once, cached); the rest are joined pairs


def shard_namespaces(cluster: Cluster, tag: str) -> dict[int, str]:
    """One namespace per master: master port -> name."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < 3:
        name = f"{tag}-{i}"
        found.setdefault(cluster.master_of(key_slot(graph_name(name).encode())).port, name)
        i += 1
    return found


async def write(store: GraphStore, namespace: str, texts: list[str], vectors: np.ndarray,
                batch: int, rows: range) -> float:
    """Seconds the ingest job's writes of these rows take, part by part, each part confirmed
    on a replica when the store's settings ask for it."""
    graph = store.graph(namespace)
    await prepare_namespace(store, namespace, OnnxEmbedder.name, 384)
    started = time.perf_counter()
    for start in range(rows.start, rows.stop, batch):
        since = await replication.mark(store, namespace)
        memory = f"{namespace}-{start}"
        part = texts[start : min(start + batch, rows.stop)]
        job = IngestJob(task_id=memory, memory_id=memory, namespace=namespace,
                        text="\n".join(part), content_hash=memory, created_at=time.time())
        await write_memory(graph, job, len(part))
        await write_chunks(graph, memory, spans(part), vectors[start : start + len(part)])
        await mark_ready(graph, memory, memory)
        await replication.confirm(store, namespace, since)
    return time.perf_counter() - started


async def write_shard(stores: dict[str, GraphStore], names: dict[str, str], texts: list[str],
                      vectors: np.ndarray, batch: int, rounds: int = 4) -> dict[str, float]:
    """Chunks/s into one shard without and with WAIT, in alternating rounds (so both see
    the same load on a shared host)."""
    seconds = dict.fromkeys(stores, 0.0)
    step = len(texts) // rounds
    for r in range(rounds):
        for key, store in stores.items():
            seconds[key] += await write(store, names[key], texts, vectors, batch,
                                        range(r * step, (r + 1) * step))
    return {f"chunks_s_{key}": round(step * rounds / s, 1) for key, s in seconds.items()}


async def searches(store: GraphStore, redis: Redis, settings: Settings, namespace: str,
                   asked: list[str], mode: str) -> dict[str, float]:
    embedder = OnnxEmbedder()
    for _warm_then_timed in range(2):
        seconds = []
        for question in asked:
            started = time.perf_counter()
            await search_memory(store, embedder, redis, settings,
                                decode_search(question, 10, None, namespace, mode))
            seconds.append(time.perf_counter() - started)
    ms = np.array(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p95_ms": round(float(np.percentile(ms, 95)), 1)}


def current_epoch(cluster: Cluster) -> int:
    """The cluster's configuration epoch: each failover raises it."""
    return int(cluster_info(cluster.live()[0])["cluster_current_epoch"])


def memory(cluster: Cluster) -> list[dict]:
    rows = []
    for node in cluster.live():
        with contextlib.closing(node.client()) as client:
            used = int(client.info("memory")["used_memory"])
        status = Path(f"/proc/{node.process.pid}/status").read_text()
        rss = next(int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("VmRSS:"))
        rows.append({"port": node.port, "role": role(node), "rss_mib": round(rss / 1024, 1),
                     "used_memory_mib": round(used / 2**20, 1)})
    return rows


async def failover(cluster: Cluster, store: GraphStore, namespace: str) -> dict[str, float]:
    """Kill the namespace's master; watch its replica's role and, at the same time, write
    to the namespace until a write succeeds. Seconds from the kill to each."""
    master = cluster.master_of(key_slot(graph_name(namespace).encode()))
    replicas = [n for n in cluster.live() if n is not master and role(n) == "slave"]
    killed = time.perf_counter()
    cluster.kill(master)

    async def promoted() -> float:
        while True:
            for node in replicas:
                if await asyncio.to_thread(role, node) == "master":
                    return time.perf_counter() - killed
            await asyncio.sleep(0.02)

    async def written() -> float:
        while True:
            try:
                await run(store.graph(namespace), "MERGE (p:Probe {id: 1}) SET p.at = $at",
                          {"at": time.time()})
                return time.perf_counter() - killed
            except ZapomniError:
                await asyncio.sleep(0.02)

    up, wrote = await asyncio.gather(promoted(), written())
    return {"kill_to_promoted_s": round(up, 2), "kill_to_first_write_s": round(wrote, 2)}


async def measure(cluster: Cluster, queue_url: str, args: argparse.Namespace) -> dict:
    texts, vectors = corpus(args.chunks, REAL)
    empty = {n["port"]: n for n in memory(cluster)}
    base = Settings.from_env(environ={}, falkordb_url=cluster.url, falkordb_cluster=True,
                             redis_url=f"{queue_url}/0")
    waiting = msgspec.structs.replace(base, falkordb_wait_replicas=1)
    stores = {"no_wait": GraphStore(base), "wait_1": GraphStore(waiting)}
    names = {key: shard_namespaces(cluster, key.replace("_", "")) for key in stores}
    epoch = current_epoch(cluster)
    shards: dict[int, dict] = {}
    for port in names["no_wait"]:
        shard = {key: names[key][port] for key in stores}
        shards[port] = {"port": port, "namespace": shard["wait_1"],
                        **await write_shard(stores, shard, texts, vectors, args.batch)}
        print(shards[port], flush=True)
    for other in stores.values():
        await other.aclose()
    store = GraphStore(waiting, max_connections=8)
    together = shard_namespaces(cluster, "together")
    started = time.perf_counter()
    await asyncio.gather(*(write(store, ns, texts, vectors, args.batch, range(len(texts)))
                           for ns in together.values()))
    aggregate = round(3 * len(texts) / (time.perf_counter() - started), 1)
    redis = Redis.from_url(waiting.redis_url)
    asked = questions(args.queries)
    for row in shards.values():
        for mode in ("vector", "hybrid"):
            timing = await searches(store, redis, waiting, row["namespace"], asked, mode)
            row.update({f"{mode}_{k}": v for k, v in timing.items()})
        print(row, flush=True)
    nodes = memory(cluster)
    held = 3 * len(texts)  # chunks each node holds: its shard's three namespaces
    for node in nodes:
        before = empty[node["port"]]
        node["rss_kib_per_chunk"] = round((node["rss_mib"] - before["rss_mib"]) * 1024 / held, 2)
        node["used_kib_per_chunk"] = round(
            (node["used_memory_mib"] - before["used_memory_mib"]) * 1024 / held, 2)
    unplanned = current_epoch(cluster) - epoch  # failovers under load, none asked for
    down = await failover(cluster, store, next(iter(together.values())))
    await redis.aclose()
    await store.aclose()
    return {"chunks_per_namespace": len(texts), "batch": args.batch,
            "node_timeout_ms": args.node_timeout, "shards": list(
        shards.values()), "all_three_at_once_chunks_s": aggregate, "nodes": nodes,
        "failover": down, "unplanned_failovers": unplanned}


def report(result: dict) -> None:
    print("| master port | chunks/s, no wait | chunks/s, WAIT 1 | vector p50 / p95 ms "
          "| hybrid p50 / p95 ms |")
    print("|---|---|---|---|---|")
    for s in result["shards"]:
        print(f"| {s['port']} | {s['chunks_s_no_wait']} | {s['chunks_s_wait_1']} "
              f"| {s['vector_p50_ms']} / {s['vector_p95_ms']} "
              f"| {s['hybrid_p50_ms']} / {s['hybrid_p95_ms']} |")
    print(f"all three shards at once, WAIT 1: {result['all_three_at_once_chunks_s']} chunks/s")
    print("| node | role | RSS MiB | used_memory MiB | RSS KiB / chunk | used KiB / chunk |")
    print("|---|---|---|---|---|---|")
    for n in result["nodes"]:
        print(f"| {n['port']} | {n['role']} | {n['rss_mib']} | {n['used_memory_mib']} "
              f"| {n['rss_kib_per_chunk']} | {n['used_kib_per_chunk']} |")
    print(f"failover: {result['failover']}; unplanned failovers during the run: "
          f"{result['unplanned_failovers']}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=2000, help="per namespace")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--node-timeout", type=int, default=3000,
                        help="ms before a silent master is failed over")
    args = parser.parse_args()
    with falkordb_process() as queue_url, \
            falkordb_cluster(node_timeout_ms=args.node_timeout) as cluster:
        result = await measure(cluster, queue_url, args)
    report(result)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cluster.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
