"""Code search: where-is questions over real source files, syntax-aware chunks against plain.

    ./dev bench code_search [--modes hybrid vector keyword]

The sources of the installed Python's asyncio package and of urllib3 (its Python files and
its JavaScript web worker) go in through the front's code path, each file one memory with
metadata source (the path under site-packages), type "code" and language, twice: into the
namespace "code" (language set: the CodeSplitter of shared/text/chunking.py) and into "text"
(no language: the plain TextSplitter). Entity extraction is off (graph_auto false): this
bench compares splitters; the code graph and graph mode are tests/bench/code_graph.py's. Real
arq workers (in-process, burst) embed and write;
every question (tests/bench/code_questions.json) is searched with limit 5 in each mode.

Metrics, per namespace and mode: file@1 and file@5 (the answer's file is the first result /
among the first five), lines@5 (a result among the first five is from that file and its
start_line..end_line overlaps the answer's definition), MRR@5 of the file. A Python answer
is a dotted name resolved with ast in the installed file, so its lines follow the installed
version; a JavaScript answer is the line holding a given string. Prints a table and writes
tests/bench/results/code_search.json.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio

from tests.support.servers import falkordb_process
from tests.support.workers import run_workers
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.text.chunking import chunker_for

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = Path(__file__).with_name("code_questions.json")
RESULTS = ROOT / "tests" / "bench" / "results"
LANGUAGES = {".py": "python", ".js": "javascript"}
NAMESPACES = {"code": True, "text": False}  # namespace -> language in the metadata
STORED = "MATCH (m:Memory) WHERE m.ready = true OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c) " \
         "RETURN count(DISTINCT m), count(c)"


@dataclass
class Question:
    text: str
    file: str
    lines: tuple[int, int]  # the answer's definition, 1-based, inclusive


def package_roots() -> dict[str, Path]:
    """The folders memories' sources are relative to: the stdlib's for asyncio,
    site-packages for urllib3."""
    import urllib3

    return {"asyncio": Path(sysconfig.get_paths()["stdlib"]),
            "urllib3": Path(urllib3.__file__).parents[1]}


def source_files() -> dict[str, str]:
    """source (e.g. "asyncio/tasks.py") -> text, for every non-empty .py and .js file."""
    files = {}
    for package, root in package_roots().items():
        for path in sorted((root / package).rglob("*")):
            if path.suffix in LANGUAGES and "__pycache__" not in path.parts:
                text = path.read_text(encoding="utf-8")
                if text.strip():
                    files[path.relative_to(root).as_posix()] = text
    return files


def definition_lines(text: str, symbol: str) -> tuple[int, int]:
    """The lines of a dotted name's last definition (an overload's implementation)."""
    scope: list[ast.stmt] = ast.parse(text).body
    node: ast.stmt | None = None
    for part in symbol.split("."):
        found = [n for n in scope if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                                                   | ast.ClassDef) and n.name == part]
        if not found:
            raise LookupError(f"{symbol}: no {part}")
        node = found[-1]
        scope = getattr(node, "body", [])
    assert node is not None and node.end_lineno is not None
    return node.lineno, node.end_lineno


def load_questions(files: dict[str, str]) -> list[Question]:
    questions = []
    for item in json.loads(QUESTIONS.read_text())["questions"]:
        text = files[item["file"]]
        if "symbol" in item:
            lines = definition_lines(text, item["symbol"])
        else:
            line = text[:text.index(item["needle"])].count("\n") + 1
            lines = (line, line)
        questions.append(Question(item["q"], item["file"], lines))
    return questions


async def ingest(settings: Settings, files: dict[str, str], namespaces: list[str]) -> float:
    """Every file into each namespace; seconds until the queue is empty."""
    front = Front(settings)
    try:
        for namespace in namespaces:
            with_language = NAMESPACES[namespace]
            for source, text in files.items():
                metadata = {"source": source, "type": "code"}
                if with_language:
                    metadata["language"] = LANGUAGES[Path(source).suffix]
                await ops.add_memory(front, decode_add_memory(text, metadata, namespace))
    finally:
        await front.aclose()
    started = time.perf_counter()
    await run_workers(settings, timeout=7200)
    return time.perf_counter() - started


async def stored(settings: Settings, namespace: str) -> dict[str, int]:
    """Searchable memories and their chunks: what the questions were asked of (a task that
    failed under load leaves its file out, and the table must say so)."""
    store = GraphStore(settings)
    try:
        rows = await run(store.graph(namespace), STORED, read_only=True)
    finally:
        await store.aclose()
    return {"memories": int(rows[0][0]), "chunks": int(rows[0][1])}


async def ask(settings: Settings, questions: list[Question], namespace: str,
              mode: str) -> dict:
    store, client = GraphStore(settings), redis.asyncio.Redis.from_url(settings.redis_url)
    embedder = make_embedder(settings)
    file1 = file5 = lines5 = 0
    reciprocal, latencies = [], []
    try:
        for q in questions:
            started = time.perf_counter()
            hits = (await search_memory(store, embedder, client, settings, SearchRequest(
                query=q.text, limit=5, namespace=namespace, mode=mode))).results
            latencies.append(time.perf_counter() - started)
            sources = [h.source for h in hits]
            file1 += bool(sources[:1] == [q.file])
            file5 += q.file in sources
            reciprocal.append(1 / (sources.index(q.file) + 1) if q.file in sources else 0.0)
            lines5 += any(h.source == q.file and h.start_line is not None
                          and h.start_line <= q.lines[1] and h.end_line >= q.lines[0]
                          for h in hits)
    finally:
        await store.aclose()
        await client.aclose()
        await embedder.aclose()
    n = len(questions)
    return {"namespace": namespace, "mode": mode, "questions": n,
            "file@1": round(file1 / n, 3), "file@5": round(file5 / n, 3),
            "lines@5": round(lines5 / n, 3), "MRR@5": round(statistics.fmean(reciprocal), 3),
            "p50_ms": round(statistics.median(latencies) * 1000, 1)}


def chunk_counts(settings: Settings, files: dict[str, str]) -> dict[str, int]:
    chunker = chunker_for(settings)
    return {namespace: sum(len(chunker.split(text, LANGUAGES[Path(source).suffix]
                                             if with_language else ""))
                           for source, text in files.items())
            for namespace, with_language in NAMESPACES.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", nargs="+", default=["hybrid", "vector", "keyword"],
                        choices=["hybrid", "vector", "keyword"])
    parser.add_argument("--namespaces", nargs="+", default=list(NAMESPACES),
                        choices=list(NAMESPACES))
    args = parser.parse_args()
    files = source_files()
    questions = load_questions(files)
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     graph_auto=False, max_queue_depth=100_000)
        chunks = chunk_counts(settings, files)
        print(f"{len(files)} files ({sum(map(len, files.values())):,} characters), "
              f"{len(questions)} questions; chunks: {chunks}", flush=True)
        seconds = await ingest(settings, files, args.namespaces)
        kept = {namespace: await stored(settings, namespace) for namespace in args.namespaces}
        print(f"ingested in {seconds:.0f} s; searchable: {kept}", flush=True)
        rows = [{**await ask(settings, questions, namespace, mode), **kept[namespace]}
                for namespace in args.namespaces for mode in args.modes]
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "code_search.json").write_text(json.dumps({
        "python": sys.version.split()[0], "files": len(files), "chunks": chunks,
        "ingest_s": round(seconds, 1), "rows": rows}, indent=2))
    print(f"of {len(files)} files", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
