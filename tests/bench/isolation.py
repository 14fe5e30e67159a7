"""Scoped tokens: 3 tokens x 5 namespaces x every tool, resource and prompt, called over HTTP.

    ./dev bench isolation

The matrix of tests/support/isolation.py that tests/integration/test_isolation.py asserts on,
run against its own FalkorDB, query service and front (HTTP, ZAPOMNI_MCP_TOKENS), with a
worker ingesting the seeds. Prints the
calls, the out-of-scope calls that answered, the answers that differ between an out-of-scope
namespace that exists and one that does not, writes from refused calls, and in-scope reads that
differ from the shared token's (all must be 0), with up to 10 examples of each; writes
tests/bench/results/isolation.json.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import tempfile
import time
from pathlib import Path

from tests.support.isolation import ADMIN, Matrix, run_matrix, seed, tokens_setting
from tests.support.servers import ThreadedServer, falkordb_process
from zapomni.services.mcp.http import http_app
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.capacity import QUEUE_NAME

RESULTS = Path(__file__).resolve().parents[2] / "tests" / "bench" / "results"


async def measure(settings: Settings, root: Path) -> dict:
    with ThreadedServer(http_app(settings)) as server:
        async with Matrix(f"{server.url}/mcp", settings.redis_url,
                          QUEUE_NAME) as matrix:
            seeds = await seed(matrix, settings)
            started = time.perf_counter()
            verdict = await run_matrix(matrix, seeds, str(root))
            seconds = time.perf_counter() - started
    examples = {name: getattr(verdict, name)[:10] for name in (
        "out_of_scope_succeeded", "revealing", "refused_but_wrote", "in_scope_refused",
        "in_scope_writes_failed", "in_scope_differs")}
    return {**verdict.summary(), "seconds": round(seconds, 1), "examples": examples}


def main() -> None:
    logging.getLogger("fastmcp").setLevel(logging.CRITICAL)  # it logs every refused call
    root = Path(tempfile.mkdtemp(prefix="zapomni-isolation-"))
    (root / "files").mkdir()
    (root / "files" / "harbour.md").write_text("# Harbour\nThe crane lifts forty containers.")
    with falkordb_process() as url:
        settings = Settings.from_env(
            environ={}, redis_url=f"{url}/0", falkordb_url=url,
            query_url=f"http://127.0.0.1:{free_port()}", query_secret=secrets.token_hex(16),
            mcp_token=ADMIN, mcp_tokens=tokens_setting(), ingest_roots=str(root))
        port = int(settings.query_url.rsplit(":", 1)[1])
        with ThreadedServer(build_app(settings), port=port):
            result = asyncio.run(measure(settings, root / "files"))
    for key, value in result.items():
        print(f"{key:<28} {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "isolation.json").write_text(json.dumps(result, indent=2))
    bad = [k for k in ("out_of_scope_succeeded", "answers_revealing_existence",
                       "refused_but_wrote", "in_scope_refused", "in_scope_writes_failed",
                       "in_scope_reads_differing") if result[k]]
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
