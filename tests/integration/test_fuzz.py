"""Every MCP tool, fuzzed through fastmcp's client over HTTP (tests/support/fuzz.py).

No internal error, no message that leaks internals, no refusal in another style than
``field: what is wrong``, no write from a refused call. The default run draws 400 calls, and
200 more by each of two tokens scoped to some namespaces (one read-only): nothing is accepted
outside a token's scope either. ``./dev bench fuzz --examples N`` runs longer and prints the
counts."""

from __future__ import annotations

from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from tests.support.fuzz import (
    SCOPED_TOKENS,
    TOOLS,
    calls,
    front_over_http,
    scoped_settings,
    styled,
)
from zapomni.shared.tasks.capacity import QUEUE_NAME

# for each JSON type a tool's schema names, a value of another type a client might send
WRONG = {"string": 5, "integer": "5", "number": "0.5", "boolean": "yes", "object": [1],
         "array": "x"}
MINIMAL = {"text": "x", "items": [{"text": "x"}], "task_id": "task_" + "0" * 32, "query": "q",
           "memory_id": "mem_" + "0" * 32, "name_or_id": "Ada", "thread": "chat",
           "path": "/tmp"}


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


def test_scoped_tokens_are_refused_cleanly_outside_their_scope(settings, query_service):
    settings = scoped_settings(settings)
    tallies = {name: fuzz_with(settings, token) for name, token in SCOPED_TOKENS.items()}
    for name, tally in tallies.items():
        assert tally.calls >= 200 and set(tally.by_tool) == set(TOOLS), (name, tally.by_tool)
        assert tally.outcomes["internal"] == 0 and not tally.bad, (name, tally.bad)
        assert tally.outcomes["accepted"] > 10, (name, tally.outcomes)


def fuzz_with(settings, token: str):
    """200 calls with ``token``; its tally."""
    with front_over_http(settings, token) as target:
        @hypothesis_settings(max_examples=200, deadline=None, database=None, derandomize=True,
                             suppress_health_check=list(HealthCheck))
        @given(calls())
        def one_call(call) -> None:
            tool, arguments = call
            target.call(tool, arguments)
            assert not target.tally.bad, target.tally.bad

        one_call()
    return target.tally


def schema_type(prop: dict) -> str:
    return next(o["type"] for o in prop.get("anyOf", [prop]) if o.get("type") != "null")


JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
              dict: "object"}


def wrong_value(prop: dict):
    """A value of none of the types the argument takes (as_of takes a string or a number)."""
    types = {o.get("type") for o in prop.get("anyOf", [prop])}
    if "number" in types:
        types.add("integer")
    value = WRONG[schema_type(prop)]
    if JSON_TYPES[type(value)] not in types:
        return value
    return next(v for v in (5, "5", "yes", [1], {"k": 1}) if JSON_TYPES[type(v)] not in types)


def test_every_tool_refuses_wrong_types_unknown_and_missing_arguments_in_our_words(
        settings, query_service):
    """Read from each tool's advertised schema, so a new tool or argument is covered too."""
    with front_over_http(settings) as target:
        tools = target.loop.run_until_complete(target.client.list_tools())
        assert {t.name for t in tools} == set(TOOLS)
        sent = []
        for tool in tools:
            props, required = tool.input_schema["properties"], tool.input_schema.get("required", [])
            minimal = {name: MINIMAL[name] for name in required}
            cases = [(name, minimal | {name: wrong_value(prop)}, "expected ")
                     for name, prop in props.items()]
            cases += [(name, {k: v for k, v in minimal.items() if k != name},
                       "required but missing; send ") for name in required]
            cases.append(("colour", minimal | {"colour": "red"}, "unknown argument; "))
            for field, arguments, words in cases:
                assert target.call(tool.name, arguments) == "invalid", (tool.name, arguments)
                text = target.last
                assert text.startswith(f"{field}: {words}"), (tool.name, arguments, text)
                assert styled(text, tool.name, arguments), text
                sent.append(tool.name)
        assert not target.tally.bad, target.tally.bad  # and nothing was written
    assert len(sent) >= 3 * len(TOOLS)


def test_the_largest_text_goes_over_http_and_one_more_character_is_refused(settings,
                                                                           query_service):
    with front_over_http(settings) as target:
        assert target.call("add_memory", {"text": "é" * 10_000_000}) == "accepted"
        assert target.call("add_memory", {"text": "x" * 10_000_001}) == "invalid"
        queued = target.redis.zcard(QUEUE_NAME)
        assert not target.tally.bad
    assert queued == 1
