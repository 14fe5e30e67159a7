"""Long fuzz of every MCP tool through fastmcp's client over HTTP (tests/support/fuzz.py).

    ./dev bench fuzz [--examples 5000] [--seed N]

Runs ``--examples`` calls with no token (loopback), then half as many with each of the two
scoped tokens (tests/support/fuzz.py SCOPED: one read-only). Prints, per run, calls by outcome
and by tool, and every internal error, leak, refusal not in our style (``field: what is
wrong``), write from a refused call, and call accepted outside its token's scope (all must be
0); writes tests/bench/results/fuzz.json. The test suite runs 400 + 2 x 200 calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import time
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, seed
from hypothesis import settings as hypothesis_settings

from tests.support.fuzz import SCOPED_TOKENS, Target, calls, front_over_http, scoped_settings
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


KINDS = {"internal_errors": "internal error", "leaks": "leak",
         "refusals_not_in_our_style": "style", "writes_from_refused_calls": "refused but wrote",
         "accepted_out_of_scope": "out of scope"}


def run(settings: Settings, token: str | None, examples: int, random_seed: int | None) -> dict:
    with front_over_http(settings, token) as target:
        started = time.perf_counter()
        fuzz(target, examples, random_seed)
        elapsed = time.perf_counter() - started
    tally = target.tally
    result = {"calls": tally.calls, "seconds": round(elapsed, 1),
              "outcomes": dict(tally.outcomes), "by_tool": dict(sorted(tally.by_tool.items()))}
    result |= {key: sum(1 for b in tally.bad if b.startswith(kind))
               for key, kind in KINDS.items()}
    return result | {"examples": tally.bad[:20]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    logging.getLogger("fastmcp").setLevel(logging.CRITICAL)  # it logs every refused call
    runs = {}
    with falkordb_process() as url:
        settings = scoped_settings(Settings.from_env(
            environ={}, redis_url=f"{url}/0", falkordb_url=url,
            query_url=f"http://127.0.0.1:{free_port()}", query_secret=secrets.token_hex(16)))
        port = int(settings.query_url.rsplit(":", 1)[1])
        with ThreadedServer(build_app(settings), port=port):
            runs["no token"] = run(msgspec.structs.replace(settings, mcp_tokens=""), None,
                                   args.examples, args.seed)
            for name, token in SCOPED_TOKENS.items():
                runs[f"token {name}"] = run(settings, token, args.examples // 2, args.seed)
    for name, result in runs.items():
        print(f"-- {name}")
        for key, value in result.items():
            print(f"{key:<26} {value}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fuzz.json").write_text(json.dumps(runs, indent=2))
    raise SystemExit(1 if any(r["examples"] for r in runs.values()) else 0)


if __name__ == "__main__":
    main()
