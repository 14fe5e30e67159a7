"""Files benchmark: `zapomni ingest` of a real mixed folder against `zapomni up`, then again.

    ./dev bench files [--limit-files 200] [--workers 1] [--root PATH ...]

The folders are ones nobody here wrote: this Python's standard library source and
/usr/share/doc (or the --root paths), each cut to its first --limit-files files in walk
order (__pycache__ left out: compiled files are binary skips, not text). Starts the stack as
the README does (`zapomni up`, entity extraction off: it is a later stage with its own
benchmark), waits until every worker has loaded its model, then runs the CLI's code
(services/cli/ingest.py) until every task has ended: files/s and chunks/s. The ceiling is
the raw embedder in this process, in the same run, on the same files: read and extracted the
same way, cut by the product's chunker, embedded by the same model with the same batch and
threads, model loaded and warmed before its clock starts. Efficiency = end-to-end chunks/s
÷ raw chunks/s. Then the unchanged re-run: its time as a share of the first run's, and what it
added (nothing, if it is idempotent). Prints a table and per-skip-reason counts and writes
JSON to tests/bench/results/files.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.support.graph import stored
from tests.support.stack import Stack
from zapomni.services.cli.ingest import Tally, ingest
from zapomni.shared.embedding.embed_onnx import OnnxEmbedder
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.heartbeat import count_alive
from zapomni.shared.text.chunking import chunker_for
from zapomni.shared.text.files import Loaded, Selection, Skipped, load_file, root_key, walk_files

ROOT = Path(__file__).resolve().parents[2]
EXCLUDE = ("__pycache__", "*.pyc")


def default_roots() -> list[Path]:
    return [Path(sysconfig.get_path("stdlib")), Path("/usr/share/doc")]


def raw_embedder(roots: list[Path], selection: Selection, threads: int) -> dict:
    """The ceiling: the product's chunks of the same files through the model alone."""
    settings = Settings.from_env(environ={})
    chunker = chunker_for(settings)
    texts = [item.text for root in roots for found in walk_files(root, selection)
             if not isinstance(found, Skipped)
             and isinstance(item := load_file(found, root_key(root), selection.max_bytes),
                            Loaded)]
    chunks = [c.text for text in texts for c in chunker.split(text)]
    embedder = OnnxEmbedder(threads=threads)
    embedder.embed_sync(chunks[:32])  # warm up
    started = time.perf_counter()
    embedder.embed_sync(chunks)
    elapsed = time.perf_counter() - started
    return {"files": len(texts), "chunks": len(chunks), "seconds": round(elapsed, 2),
            "chunks_per_s": round(len(chunks) / elapsed, 1)}


def reason_kind(reason: str) -> str:
    """A skip reason without its particulars (sizes, memory ids)."""
    return reason.split(":")[0].split(" (")[0]


async def wait_ready(url: str, workers: int, timeout: float = 600) -> None:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        async with asyncio.timeout(timeout):
            while await count_alive(client) < workers:
                await asyncio.sleep(0.2)
    finally:
        await client.aclose()


async def timed(url: str, roots: list[Path], selection: Selection) -> tuple[float, Tally]:
    started = time.perf_counter()
    tally = await ingest(url, roots, selection=selection)
    return time.perf_counter() - started, tally


async def run(roots: list[Path], selection: Selection, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="zapomni-bench-files-") as data:
        stack = Stack(Path(data))
        os.environ.update(ZAPOMNI_GRAPH_AUTO="false", ZAPOMNI_ONNX_THREADS=str(
            max(1, 2 // workers)), ZAPOMNI_MAX_QUEUE_DEPTH="1000000")
        stack.start(workers=workers)
        try:
            db = f"redis://127.0.0.1:{stack.ports['--falkordb-port']}"
            await wait_ready(f"{db}/0", workers)
            first_s, first = await timed(stack.url, roots, selection)
            counts = await stored(Settings.from_env(environ={}, falkordb_url=db))
            again_s, again = await timed(stack.url, roots, selection)
        finally:
            stack.stop()
    files = first.added + first.replaced
    return {
        "workers": workers, "files": files, "chunks": counts["chunks"],
        "seconds": round(first_s, 2), "files_per_s": round(files / first_s, 2),
        "chunks_per_s": round(counts["chunks"] / first_s, 1),
        "failed": len(first.failed), "rerun_seconds": round(again_s, 2),
        "rerun_share": round(again_s / first_s, 4), "rerun_added": again.added,
        "rerun_replaced": again.replaced, "rerun_unchanged": again.unchanged,
        "skips": dict(Counter(reason_kind(s.reason) for s in first.skipped).most_common()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit-files", type=int, default=200,
                        help="files per root, the first in walk order")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--root", action="append", default=[], type=Path)
    args = parser.parse_args()
    roots = args.root or default_roots()
    selection = Selection(exclude=EXCLUDE, max_files=args.limit_files)
    raw = raw_embedder(roots, selection, threads=2)
    print(f"raw embedder: {raw['chunks']} chunks of {raw['files']} files in {raw['seconds']} s"
          f" = {raw['chunks_per_s']} chunks/s", flush=True)
    row = asyncio.run(run(roots, selection, args.workers))
    row["efficiency"] = round(row["chunks_per_s"] / raw["chunks_per_s"], 3)
    header = ["workers", "files", "chunks", "seconds", "files_per_s", "chunks_per_s",
              "efficiency", "failed", "rerun_seconds", "rerun_share", "rerun_added"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    print("| " + " | ".join(str(row[h]) for h in header) + " |")
    print("skipped, by reason:")
    for reason, count in row["skips"].items():
        print(f"  {count:6d}  {reason}")
    out = ROOT / "tests" / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "files.json").write_text(json.dumps({"roots": [str(r) for r in roots],
                                                "limit_files": args.limit_files,
                                                "raw_embedder": raw, "run": row}, indent=2))


if __name__ == "__main__":
    main()
