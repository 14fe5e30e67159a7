"""Every MCP tool, fuzzed through fastmcp's client over HTTP (tests/support/fuzz.py).

No internal error, no message that leaks internals, no write from a refused call. The default
run draws 400 calls; ``./dev bench fuzz --examples N`` runs longer and prints the counts."""

from __future__ import annotations

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from tests.support.fuzz import TOOLS, calls, front_over_http


def test_hostile_and_malformed_calls_are_refused_cleanly(settings, query_service):
    with front_over_http(settings) as target:
        @hypothesis_settings(max_examples=400, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(HealthCheck))
        @given(calls())
        def one_call(call) -> None:
            tool, arguments = call
            target.call(tool, arguments)
            assert not target.tally.bad, target.tally.bad

        one_call()
    tally = target.tally
    assert tally.calls >= 400
    assert set(tally.by_tool) == set(TOOLS)  # every tool was called
    assert tally.outcomes["invalid"] > 100 and tally.outcomes["accepted"] > 20, tally.outcomes
    assert tally.outcomes["internal"] == 0


def test_the_largest_text_goes_over_http_and_one_more_character_is_refused(settings,
                                                                           query_service):
    with front_over_http(settings) as target:
        assert target.call("add_memory", {"text": "é" * 10_000_000}) == "accepted"
        assert target.call("add_memory", {"text": "x" * 10_000_001}) == "invalid"
        queued = target.redis.zcard(settings.queue_name)
        assert not target.tally.bad
    assert queued == 1
