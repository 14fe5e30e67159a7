"""Code graph: symbol entities judged against Python's ast, and graph-mode where-is answers.

    ./dev bench code_graph [--sample 200] [--seed 35] [--modes graph hybrid]

The code-search corpus (tests/bench/code_search.py: the installed asyncio and urllib3, one
memory per file with its source and language) goes in through the front into one namespace
with entity extraction on (graph_auto true): every ingest is followed by its graph task, as
for a user. Then:

1. Precision: ``--sample`` entities drawn at random (seeded) from the namespace's graph, each
   judged against an independent parser: Python's ``ast`` on the same installed file must hold
   a definition of that dotted name (module, class, function, method, or a module-level
   UPPER_CASE constant) of that kind, starting and ending on the entity's lines. A module is
   its file's dotted name over all its lines; another entity of the JavaScript file is judged
   by its first line naming it. An entity without a source
   (what spaCy writes) is a miss. Misses are printed (a sample).
2. The 42 where-is questions of tests/bench/code_questions.json, searched with limit 5 in each
   of ``--modes``: file@1, file@5, lines@5, MRR@5 as in code_search.

Prints a table and writes tests/bench/results/code_graph.json.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import random
import sys
import time
from pathlib import Path

from tests.bench.code_search import ask, ingest, load_questions, source_files, stored
from tests.support.servers import falkordb_process
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
NAMESPACE = "code"
ENTITIES = ("MATCH (e:Entity) RETURN e.id, e.name, e.type, e.source, e.start_line, e.end_line "
            "ORDER BY e.id")


def module_name(source: str) -> str:
    parts = source.rsplit(".", 1)[0].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def ast_definitions(text: str, module: str) -> dict[str, tuple[str, int, int]]:
    """dotted name -> (kind, first line, last line) of every definition ast sees at module
    and class level (functions inside functions are locals, not symbols)."""
    tree = ast.parse(text)
    found: dict[str, tuple[str, int, int]] = {}

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                name = f"{prefix}.{node.name}"
                found[name] = ("class", first_line(node), node.end_lineno or node.lineno)
                visit(node.body, name, True)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "method" if in_class else "function"
                found[f"{prefix}.{node.name}"] = (kind, first_line(node),
                                                   node.end_lineno or node.lineno)
            elif not in_class and prefix == module:
                for target in assigned(node):
                    found[f"{prefix}.{target}"] = ("constant", node.lineno,
                                                    node.end_lineno or node.lineno)
            if isinstance(node, ast.If | ast.Try):  # definitions under if/try at this level
                inner = [*node.body, *getattr(node, "orelse", []),
                         *[s for h in getattr(node, "handlers", []) for s in h.body],
                         *getattr(node, "finalbody", [])]
                visit(sorted(inner, key=lambda s: s.lineno), prefix, in_class)

    visit(tree.body, module, False)
    return found


def first_line(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A decorated definition starts at its first decorator."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def assigned(node: ast.stmt) -> list[str]:
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AnnAssign) else [])
    return [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]


def judge(row: list, files: dict[str, str], parsed: dict) -> str:
    """'' when the entity is right, else why not."""
    _, name, kind, source, start, end = row
    if not source or source not in files:
        return f"no source file ({source!r})"
    text = files[source]
    if kind == "module":
        truth = ("module", 1, text.count("\n") + (not text.endswith("\n")))
        return "" if name == module_name(source) and (kind, start, end) == truth \
            else f"a module is {module_name(source)} at {truth}"
    if not source.endswith(".py"):
        lines = text.splitlines()
        line = lines[start - 1] if start and 0 < start <= len(lines) else ""
        return "" if name.rsplit(".", 1)[-1] in line else f"line {start} does not name it"
    if source not in parsed:
        parsed[source] = ast_definitions(text, module_name(source))
    truth = parsed[source].get(name)
    if truth is None:
        return "ast has no such definition"
    if truth != (kind, start, end):
        return f"ast says {truth}, graph says {(kind, start, end)}"
    return ""


async def precision(settings: Settings, files: dict[str, str], sample: int,
                    seed: int) -> dict:
    store = GraphStore(settings)
    try:
        rows = await run(store.graph(NAMESPACE), ENTITIES, read_only=True)
    finally:
        await store.aclose()
    drawn = random.Random(seed).sample(rows, min(sample, len(rows)))
    parsed: dict = {}
    verdicts = [(row, judge(row, files, parsed)) for row in drawn]
    misses = [(row, why) for row, why in verdicts if why]
    for row, why in misses[:15]:
        print(f"  miss: {row[1]} ({row[2]}) {row[3]}:{row[4]}-{row[5]}: {why}")
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[str(row[2])] = kinds.get(str(row[2]), 0) + 1
    return {"entities": len(rows), "types": kinds, "judged": len(drawn),
            "precision": round(1 - len(misses) / max(1, len(drawn)), 3)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--modes", nargs="+", default=["graph", "hybrid"],
                        choices=["graph", "hybrid", "vector", "keyword"])
    args = parser.parse_args()
    files = source_files()
    questions = load_questions(files)
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     graph_auto=True, max_queue_depth=100_000)
        started = time.perf_counter()
        seconds = await ingest(settings, files, [NAMESPACE])
        kept = await stored(settings, NAMESPACE)
        print(f"{len(files)} files ingested and graphed in {seconds:.0f} s; searchable: {kept}",
              flush=True)
        judged = await precision(settings, files, args.sample, args.seed)
        print(f"entities: {judged}", flush=True)
        rows = [await ask(settings, questions, NAMESPACE, mode) for mode in args.modes]
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "code_graph.json").write_text(json.dumps({
        "python": sys.version.split()[0], "files": len(files), "stored": kept,
        "seconds": round(time.perf_counter() - started, 1), "entities": judged,
        "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
