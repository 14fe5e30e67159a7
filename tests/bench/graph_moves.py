"""Moving a namespace with its knowledge graph: export and import of a file that carries the
graph (version 2) against today's way, an import of the memories alone (version 1) and a
graph task that reads their entities again with spaCy.

    ./dev bench graph_moves [--memories 2000] [--workers 2]

A local FalkorDB server (also the queue's Redis) and a fake Ollama serving hash vectors, as
in ``./dev bench moves``; passages of the evaluation sets written into one namespace, whose
graph a graph task builds (spaCy, as a user's). Then, timed: the export (with vectors) in
this process; its import into a fresh namespace by ``zapomni import``'s code with real
worker processes (no graph task may follow); and the same file with its graph stripped (a
version-1 file) imported into another namespace, with the graph task that follows it run to
its end. Both copies' graphs are compared with the source's (entities, mentions, RELATED
edges and weights). Prints the figures; writes tests/bench/results/graph_moves.json.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import time
from pathlib import Path

import redis.asyncio

from tests.bench.moves import CONSTANTS, MODEL, RESULTS, SOURCE, grow
from tests.support.export_files import version_1
from tests.support.fake_ollama import FakeOllama
from tests.support.servers import ThreadedServer, falkordb_server
from tests.support.vectors import passages
from tests.support.workers import wait_tasks, worker_processes
from zapomni.services.cli.export import export_namespace
from zapomni.services.cli.restore import import_file
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import BuildGraph
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.tasks import tasks

CARRIED, REBUILT = "moves-graph", "moves-rebuilt"
SHAPE = {  # a graph's shape, compared between the source and each copy
    "entities": "MATCH (e:Entity) RETURN count(e)",
    "mentions": "MATCH (:Chunk)-[r:MENTIONS]->(:Entity) RETURN count(r), sum(r.count)",
    "related": "MATCH (:Entity)-[r:RELATED]->(:Entity) RETURN count(r), sum(r.weight)",
    "types": "MATCH (e:Entity) RETURN e.type, count(e) ORDER BY e.type",
    "unread": "MATCH ()-[h:HAS_CHUNK]->(c:Chunk) WHERE h.entities_at IS NULL RETURN count(c)",
}


async def shape(settings: Settings, namespace: str) -> dict:
    store = GraphStore(settings)
    try:
        return {name: await run(store.graph(namespace), cypher, read_only=True)
                for name, cypher in SHAPE.items()}
    finally:
        await store.aclose()


async def build(settings: Settings) -> tasks.TaskRecord:
    """The source's graph, by a graph task over the namespace (the workers are running)."""
    front = Front(settings)
    try:
        receipt = await ops.build_graph(front, BuildGraph(namespace=SOURCE))
        await wait_tasks(front.redis, [receipt.task_id], timeout=3600)
        return await tasks.get_task(front.redis, receipt.task_id)
    finally:
        await front.aclose()


async def imported(settings: Settings, path: Path, namespace: str) -> dict:
    """Import the file and run the graph task that follows (if any) to its end; seconds, to
    when each task's record says it finished (not to the command's next poll)."""
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    try:
        started = time.time()
        record = await import_file(settings, path, namespace, show=False)
        memories = record.finished_at - started
        total = memories
        if record.graph_task_id:
            await wait_tasks(client, [record.graph_task_id], timeout=3600)
            total = (await tasks.get_task(client, record.graph_task_id)).finished_at - started
    finally:
        await client.aclose()
    return {"state": record.state, "message": record.message,
            "graph_task": bool(record.graph_task_id), "import_s": round(memories, 1),
            "graph_s": round(total - memories, 1), "total_s": round(total, 1)}


async def measure(settings: Settings, args: argparse.Namespace, work: Path) -> dict:
    await grow(settings, passages(args.memories), 0, args.memories)
    built = await build(settings)
    source = await shape(settings, SOURCE)
    out = io.BytesIO()
    started = time.perf_counter()
    header = await export_namespace(settings, SOURCE, out, vectors=True, show=False)
    exported = time.perf_counter() - started
    carried, stripped = work / "graph-moves.jsonl.gz", work / "graph-moves-v1.jsonl.gz"
    carried.write_bytes(out.getvalue())
    stripped.write_bytes(version_1(out.getvalue()))
    result = {"memories": args.memories, "workers": args.workers,
              "source_graph": {"chunks": built.total, "seconds": round(
                  built.finished_at - built.started_at, 1), "entities": header.entities},
              "export_s": round(exported, 1), "file_mb": round(carried.stat().st_size / 1e6, 2),
              "file_v1_mb": round(stripped.stat().st_size / 1e6, 2)}
    result["carried"] = await imported(settings, carried, CARRIED)
    result["rebuilt"] = await imported(settings, stripped, REBUILT)
    result["same_graph"] = {name: await shape(settings, name) == source
                            for name in (CARRIED, REBUILT)}
    result["shape"] = {k: v for k, v in source.items() if k != "types"}
    for path in (carried, stripped):
        path.unlink()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="./dev bench graph_moves", description=__doc__)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    fake = FakeOllama(models=(MODEL,), dim=384)
    with falkordb_server() as url, ThreadedServer(fake.app) as ollama:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     ollama_url=ollama.url, ollama_model=MODEL,
                                     graph_auto=True, access_tracking=False,
                                     max_queue_depth=1_000_000)
        RESULTS.mkdir(parents=True, exist_ok=True)
        with worker_processes(settings, args.workers, constants=CONSTANTS):
            result = asyncio.run(measure(settings, args, RESULTS))
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    carried, rebuilt = result["carried"], result["rebuilt"]
    moved = result["export_s"] + carried["total_s"]
    before = result["export_s"] + rebuilt["total_s"]
    result["speedup"] = round(before / moved, 2)
    print(json.dumps(result, indent=2))
    print(f"\n{args.memories:,} memories, {result['source_graph']['chunks']:,} chunks, "
          f"{result['source_graph']['entities']:,} entities, {args.workers} workers:\n"
          f"  export {result['export_s']} s ({result['file_mb']} MB; without the graph "
          f"{result['file_v1_mb']} MB)\n"
          f"  import carrying the graph: {carried['total_s']} s (graph task: "
          f"{carried['graph_task']}); same graph: {result['same_graph'][CARRIED]}\n"
          f"  version-1 import {rebuilt['import_s']} s + graph task {rebuilt['graph_s']} s = "
          f"{rebuilt['total_s']} s; same graph: {result['same_graph'][REBUILT]}\n"
          f"  export + import: {moved:.1f} s against {before:.1f} s ({result['speedup']}x)")
    (RESULTS / "graph_moves.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
