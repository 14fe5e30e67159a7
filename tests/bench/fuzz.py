"""Long fuzz of every MCP tool through fastmcp's client over HTTP (tests/support/fuzz.py).

    ./dev bench fuzz [--examples 5000] [--seed N]

Prints calls by outcome and by tool, and every internal error, leak, refusal not in our style
(``field: what is wrong``) or write from a refused call (all must be 0); writes
tests/bench/results/fuzz.json. The test suite runs 400 calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed
from hypothesis import settings as hypothesis_settings

from tests.support.fuzz import Target, calls, front_over_http
from tests.support.servers import ThreadedServer, falkordb_process
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.settings import Settings

RESULTS = Path(__file__).resolve().parents[2] / "tests" / "bench" / "results"


def fuzz(target: Target, examples: int, random_seed: int | None) -> None:
    @hypothesis_settings(max_examples=examples, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))
    @given(calls())
    def one_call(call) -> None:
        target.call(*call)

    if random_seed is not None:
        one_call = seed(random_seed)(one_call)
    one_call()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    logging.getLogger("fastmcp").setLevel(logging.CRITICAL)  # it logs every refused call
    with falkordb_process() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     query_url=f"http://127.0.0.1:{free_port()}")
        port = int(settings.query_url.rsplit(":", 1)[1])
        with ThreadedServer(build_app(settings), port=port), \
                front_over_http(settings) as target:
            started = time.perf_counter()
            fuzz(target, args.examples, args.seed)
            elapsed = time.perf_counter() - started
    tally = target.tally
    bad = {kind: sum(1 for b in tally.bad if b.startswith(kind))
           for kind in ("internal error", "leak", "style", "refused but wrote")}
    result = {"calls": tally.calls, "seconds": round(elapsed, 1),
              "outcomes": dict(tally.outcomes), "by_tool": dict(sorted(tally.by_tool.items())),
              "internal_errors": bad["internal error"], "leaks": bad["leak"],
              "refusals_not_in_our_style": bad["style"],
              "writes_from_refused_calls": bad["refused but wrote"], "examples": tally.bad[:20]}
    for key, value in result.items():
        print(f"{key:<26} {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fuzz.json").write_text(json.dumps(result, indent=2))
    raise SystemExit(1 if tally.bad else 0)


if __name__ == "__main__":
    main()
