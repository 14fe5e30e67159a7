"""Property-based fuzzing of every MCP tool through fastmcp's real client over HTTP.

``calls()`` draws (tool, arguments): each argument left out, well-formed, hostile (NUL, lone
surrogates, confusables, bidi overrides, Cypher and RediSearch syntax, 10 MB + 1 characters,
deep nesting, huge tag lists) or of the wrong type, sometimes with a field the tool does not
know. ``Target.call`` sends one and sorts the answer: accepted, a clean validation error
(one line in our style: ``field: what is wrong``), a retryable refusal, a JSON-RPC error from
the MCP layer (JSON that is not valid UTF-8 never reaches a tool), an internal error (masked
by the server: must never happen), a message that leaks internals (stack trace, paths, Cypher,
library names: must never happen), a refusal in another style (pydantic's text, a regex:
must never happen), and writes made by a call that was refused (must never happen). With a
token scoped to some namespaces (``SCOPED``), also any call accepted outside its scope or a
write accepted from a read-only token (must never happen). Used by
tests/integration/test_fuzz.py and by ``./dev bench fuzz`` for long runs.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import redis
from fastmcp import Client
from hypothesis import strategies as st

from tests.support.servers import ThreadedServer
from zapomni.services.mcp.http import http_app
from zapomni.services.query.listing import write_cursor
from zapomni.shared.protocol.base import DEFAULT_NAMESPACE
from zapomni.shared.protocol.scopes import Scope, make_scope, refusal
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.capacity import QUEUE_NAME

ROOT = Path(__file__).resolve().parents[2]

HOSTILE = [
    "", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\u202eevil", "\ufeff", "Ｍａｔｃｈ",
    "раураl", "ｍｅｍ_" + "0" * 32, "' OR 1=1 --", "\") RETURN 1 //", "MATCH (n) DETACH DELETE n",
    "}) WITH 1 AS x CALL db.labels() YIELD label RETURN label //", "$param", "`backtick`",
    "*", "@text:(x)|y", "-not", "~fuzzy%", "{a|b}", "\"quoted\"", "[1 TO 2]", "\\", "\n\r\t",
    "../../etc/passwd", "%s%s%n", "{{7*7}}", "<script>alert(1)</script>", "null", "NaN",
    "🦀" * 50, "a" * 300, "default", "zapomni:queue", "mem_" + "0" * 32, "task_" + "f" * 32,
]
class Big(str):
    """10 MB + 1 characters (one over the text limit), shown short in failure reports."""

    def __repr__(self) -> str:
        return f"'x' * {len(self):_}"


BIG = Big("x" * 10_000_001)
WRONG_TYPES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                        st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def strings(max_size: int = 40) -> st.SearchStrategy[str]:
    """Hostile fragments, random text with every code point class (surrogates included),
    and the two joined."""
    anything = st.text(st.one_of(st.characters(codec=None), st.characters(categories=["Cs"])),
                       max_size=max_size)
    return st.one_of(st.sampled_from(HOSTILE), anything,
                     st.builds(lambda a, b: a + b, st.sampled_from(HOSTILE), anything))


def json_values(depth: int = 20) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                       strings(20))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(strings(12), inner, max_size=3)),
        max_leaves=depth)


def nested(levels: int) -> dict:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"k": value}
    return value


def metadata() -> st.SearchStrategy[Any]:
    tags = st.one_of(st.lists(strings(20), max_size=5), st.just(["t"] * 101),
                     st.just(["x" * 129]), WRONG_TYPES)
    return st.one_of(
        st.fixed_dictionaries({}, optional={"tags": tags, "source": st.one_of(strings(), st.just(
            "s" * 513), WRONG_TYPES), "id": strings(), "lang": json_values()}),
        st.dictionaries(strings(20), json_values(), max_size=4),
        st.sampled_from([nested(17), nested(40), {"blob": "b" * 70_000}]),
        WRONG_TYPES)


def _encodable(value: Any) -> bool:
    """A string a cursor can hold (UTF-8: no lone surrogates)."""
    try:
        return isinstance(value, str) and bool(value.encode())
    except UnicodeEncodeError:
        return False


def ids(prefix: str) -> st.SearchStrategy[Any]:
    hexes = st.text("0123456789abcdef", min_size=32, max_size=32).map(lambda h: prefix + h)
    return st.one_of(hexes, strings(), WRONG_TYPES)


GOOD_TEXT = st.one_of(st.sampled_from([h for h in HOSTILE if h.strip()]),
                      st.text(min_size=1, max_size=200).filter(str.strip))
GOOD_NAMESPACE = st.sampled_from(["default", "fuzz", "a-b_c.1"])
GOOD_METADATA = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "tags": st.lists(st.text(min_size=1, max_size=20), max_size=5),
    "source": st.text(max_size=50), "lang": st.sampled_from(["en", "de"])}))
GOOD_FILTERS = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "tags": st.lists(st.text(min_size=1, max_size=20), max_size=3),
    "source": st.text(max_size=20), "source_prefix": st.text(min_size=1, max_size=20),
    "after": st.sampled_from(["2020-01-01", 1_600_000_000]),
    "before": st.sampled_from(["2030-01-01T00:00:00Z", 1.9e9])}))
BAD_FILTERS = st.one_of(
    st.fixed_dictionaries({}, optional={
        "tags": st.lists(strings(20), max_size=3), "tags_all": st.lists(strings(20), max_size=3),
        "source": strings(), "source_prefix": st.one_of(strings(), st.just("p" * 513),
                                                         WRONG_TYPES),
        "after": st.one_of(strings(), st.integers()),
        "before": st.one_of(strings(), st.integers()),
        "metadata": st.dictionaries(strings(12), json_values(3), max_size=3),
        "bogus": strings()}),
    WRONG_TYPES)
TEXT = (GOOD_TEXT, st.one_of(strings(200), st.just(BIG), WRONG_TYPES))
NAMESPACE = (GOOD_NAMESPACE, st.one_of(strings(70), WRONG_TYPES))
METADATA = (GOOD_METADATA, metadata())
LIMIT = (st.integers(1, 50), st.one_of(st.integers(-5, 2000), st.floats(), WRONG_TYPES))
SCORE = (st.floats(0, 1), st.one_of(st.floats(), WRONG_TYPES))
MEMORY_ID = (ids("mem_"), st.one_of(strings(), WRONG_TYPES))
TASK_ID = (ids("task_"), st.one_of(strings(), WRONG_TYPES))
QUERY = (GOOD_TEXT, st.one_of(strings(100), WRONG_TYPES))
# a point in time: ISO-8601 or unix seconds (shared/protocol/times.py)
AS_OF = (st.one_of(st.sampled_from(["2023-05-26", "2023-05-26T12:00:00Z",
                                    "2023-05-26T14:00+02:00"]),
                   st.integers(0, 2_000_000_000), st.floats(-1e10, 1e11)),
         st.one_of(strings(40), st.just(1e13), WRONG_TYPES))
CURSOR = (st.builds(write_cursor, st.sampled_from(["newest", "oldest"]),
                    st.integers(-2**53, 2**53 - 1), st.integers(0, 2**53 - 1),
                    ids("mem_").filter(_encodable)),
          st.one_of(strings(), st.just("x" * 201), WRONG_TYPES))
THREAD = (st.one_of(st.sampled_from(["chat", "a thread", "t" * 512]), GOOD_TEXT),
          st.one_of(strings(40), st.just("t" * 513), WRONG_TYPES))
HISTORY_CURSOR = (st.sampled_from(["WzE1LDE2LCJtZW1fMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMD"
                                   "AwMDAiXQ"]),
          st.one_of(strings(60), st.just("A" * 201), WRONG_TYPES))

# each tool's arguments: (well-formed values, hostile or malformed values)
TOOLS: dict[str, dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]]] = {
    "add_memory": {"text": TEXT, "metadata": METADATA, "namespace": NAMESPACE},
    "add_memories": {"items": (
        st.lists(st.fixed_dictionaries({"text": GOOD_TEXT}, optional={
            "metadata": GOOD_METADATA}), min_size=1, max_size=3),
        st.one_of(st.lists(st.fixed_dictionaries({"text": TEXT[1]}, optional={
            "metadata": metadata(), "extra": strings()}), max_size=3),
            st.just([{"text": "x"}] * 1001), WRONG_TYPES)), "namespace": NAMESPACE},
    "graph_status": {"task_id": TASK_ID},
    "search_memory": {"query": QUERY, "limit": LIMIT, "filters": (GOOD_FILTERS, BAD_FILTERS),
                      "namespace": NAMESPACE, "mode": (st.sampled_from(
                          ["hybrid", "vector", "keyword", "graph"]), strings()),
                      "min_score": SCORE, "rank": (st.sampled_from(["relevance", "memory"]),
                                                   st.one_of(strings(), WRONG_TYPES)),
                      "as_of": AS_OF},
    "get_memory": {"memory_id": MEMORY_ID, "namespace": NAMESPACE},
    "delete_memory": {"memory_id": MEMORY_ID, "namespace": NAMESPACE},
    "get_stats": {"namespace": NAMESPACE},
    "build_graph": {"namespace": NAMESPACE, "memory_ids": (
        st.lists(MEMORY_ID[0], min_size=1, max_size=3),
        st.one_of(st.lists(MEMORY_ID[1], max_size=3), WRONG_TYPES)),
        "rebuild": (st.booleans(), WRONG_TYPES)},
    "cancel_task": {"task_id": TASK_ID},
    "search_entities": {"query": QUERY, "type": (st.sampled_from(["person", "place"]),
                                                 strings()),
                        "limit": LIMIT, "namespace": NAMESPACE},
    "get_entity": {"name_or_id": QUERY, "depth": (st.integers(1, 2), LIMIT[1]),
                   "namespace": NAMESPACE},
    "update_memory": {"memory_id": MEMORY_ID, "text": TEXT, "metadata": (
        st.one_of(GOOD_METADATA, st.just({"tags": None, "lang": None})), metadata()),
        "namespace": NAMESPACE},
    "list_memories": {"namespace": NAMESPACE, "filters": (GOOD_FILTERS, BAD_FILTERS),
                      "limit": (st.integers(1, 200), LIMIT[1]), "cursor": CURSOR,
                      "order": (st.sampled_from(["newest", "oldest"]), strings())},
    "ingest_path": {"path": (st.sampled_from(["/", "/tmp", "/etc/passwd", "/x/../.."]),
                             st.one_of(strings(100), WRONG_TYPES)), "namespace": NAMESPACE,
                    "include": (st.lists(st.sampled_from(["*.py", "docs/*.md"]), max_size=3),
                                st.one_of(st.lists(strings(300), max_size=3),
                                          st.just(["*"] * 51), WRONG_TYPES)),
                    "exclude": (st.lists(st.sampled_from(["*.log", "build"]), max_size=3),
                                st.one_of(st.lists(strings(20), max_size=3), WRONG_TYPES))},
    "reembed": {"namespace": NAMESPACE},
    "get_history": {"thread": THREAD, "namespace": NAMESPACE, "limit": LIMIT,
                    "before": HISTORY_CURSOR},
    "build_context": {"query": QUERY, "thread": THREAD, "namespace": NAMESPACE,
                      "token_budget": (st.integers(100, 100_000), st.one_of(
                          st.integers(-5, 99), st.integers(100_001, 10**12), WRONG_TYPES)),
                      "history_turns": (st.integers(0, 100), LIMIT[1]),
                      "memories": (st.integers(0, 50), LIMIT[1]),
                      "filters": (GOOD_FILTERS, BAD_FILTERS), "as_of": AS_OF,
                      "show_ids": (st.booleans(), WRONG_TYPES)},
}
# the tools that write (not readOnlyHint): a read-only token is refused on every one
WRITES = {"add_memory", "add_memories", "delete_memory", "build_graph", "cancel_task",
          "update_memory", "ingest_path", "reembed"}
# tokens scoped to some of GOOD_NAMESPACE's namespaces: (namespaces, write)
SCOPED = {"reader": (["default", "fuzz"], False), "writer": (["default", "a-*"], True)}
SCOPED_TOKENS = {name: secrets.token_hex(24) for name in SCOPED}
REQUIRED = {"add_memory": {"text"}, "add_memories": {"items"}, "graph_status": {"task_id"},
            "search_memory": {"query"}, "get_memory": {"memory_id"},
            "delete_memory": {"memory_id"}, "cancel_task": {"task_id"},
            "search_entities": {"query"}, "get_entity": {"name_or_id"},
            "update_memory": {"memory_id"}, "ingest_path": {"path"},
            "get_history": {"thread"}, "build_context": {"query"}}


@st.composite
def calls(draw) -> tuple[str, dict[str, Any]]:
    """A tool and its arguments; each argument well-formed two times in three, else hostile
    or of the wrong type, and an optional one left out half the time; one call in ten
    carries a field the tool does not know."""
    tool = draw(st.sampled_from(sorted(TOOLS)))
    arguments = {}
    for name, (good, bad) in TOOLS[tool].items():
        if name not in REQUIRED.get(tool, ()) and draw(st.booleans()):
            continue
        arguments[name] = draw(bad if draw(st.integers(0, 2)) == 0 else good)
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(strings(12))] = draw(json_values(3))  # a field the tool does not know
    return tool, arguments


# what must never reach a client: stack traces, our paths, library internals, Cypher errors
LEAKS = re.compile("|".join([
    r"Traceback", r'File "', r"\.py\b", r"site-packages", re.escape(str(ROOT)),
    re.escape(str(Path.home())), r"redis\.exceptions", r"falkordb", r"ResponseError",
    r"errMsg", r"Invalid input at", r"RediSearch", r"msgspec", r"Cypher"]), re.IGNORECASE)
MASKED = re.compile(r"^Error calling tool '[a-z_]+'$|internal error", re.IGNORECASE)
# a refusal in our style: `field: what is wrong...` on one line, the field a plain path
# (items[0].text) or a quoted unknown key ("a\\nb"); no library wording
STYLED = re.compile(r'(?P<head>"(?:[^"\\]|\\.)*"(?:\.\.\.)?|[A-Za-z_][A-Za-z0-9_]*)'
                    r'(?:\[\d+\]|\.[A-Za-z_][A-Za-z0-9_]*)*: \S')
FOREIGN = re.compile(r"pydantic|https?:|validation error|Input should be|Expected `|regex"
                     r"|\[type=|\btype=", re.IGNORECASE)


@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)  # accepted, invalid, retryable, ...
    by_tool: Counter = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)  # internal errors, leaks, invalid writes

    @property
    def calls(self) -> int:
        return sum(self.outcomes.values())


class Target:
    """The front over HTTP and a client on its own event loop, for synchronous callers
    (hypothesis runs plain functions)."""

    def __init__(self, settings: Settings, url: str, token: str | None = None,
                 scope: Scope | None = None) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.client = Client(url, auth=token)
        self.raw = RawSession(url, token)
        self.scope = scope  # what the token covers (None: the server checks no token)
        self.redis = redis.Redis.from_url(settings.redis_url)
        self.tally = Tally()
        self.last = ""  # the text of the last answer

    def open(self) -> None:
        self.loop.run_until_complete(self.client.__aenter__())
        self.loop.run_until_complete(self.raw.open())

    def close(self) -> None:
        self.loop.run_until_complete(self.client.__aexit__(None, None, None))
        self.loop.run_until_complete(self.raw.aclose())
        self.loop.close()
        self.redis.close()

    def writes(self) -> tuple[int, int, int]:
        """Jobs queued, task records, memory claims: what an accepted write leaves."""
        r = self.redis
        return (r.zcard(QUEUE_NAME),
                sum(1 for _ in r.scan_iter(match="zapomni:task:*", count=1000)),
                sum(1 for _ in r.scan_iter(match="zapomni:mem:*", count=1000)))

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Send one call, record its outcome; return it."""
        before = self.writes()
        protocol = False  # refused by the MCP layer (JSON-RPC error), not by the tool
        if _client_can_send(arguments):
            result = self.loop.run_until_complete(
                self.client.call_tool(tool, arguments, raise_on_error=False))
            is_error = result.is_error
            text = " ".join(getattr(c, "text", "") for c in result.content)
        else:  # what a hand-written client could send: lone surrogates, NaN
            is_error, text, protocol = self.loop.run_until_complete(
                self.raw.call(tool, arguments))
        outcome = ("accepted" if not is_error
                   else "internal" if MASKED.search(text)
                   else "retryable" if text.startswith("temporarily unavailable")
                   else "protocol" if protocol
                   else "invalid")
        self.tally.outcomes[outcome] += 1
        self.tally.by_tool[tool] += 1
        self.last = text
        if outcome == "internal":
            self.tally.bad.append(f"internal error: {tool}({_short(arguments)})")
        elif outcome == "invalid" and not styled(text, tool, arguments):
            self.tally.bad.append(f"style: {tool}({_short(arguments)}) -> {text[:300]!r}")
        elif outcome != "accepted" and LEAKS.search(_without_inputs(text, arguments)):
            self.tally.bad.append(f"leak: {tool} -> {text[:300]}")
        if outcome != "accepted" and self.writes() != before:
            self.tally.bad.append(f"refused but wrote: {tool}({_short(arguments)})")
        if self.scope is not None:
            self.check_scope(tool, arguments, outcome, text)
        return outcome

    def check_scope(self, tool: str, arguments: dict[str, Any], outcome: str,
                    text: str) -> None:
        """Nothing accepted outside the token's scope; a scope refusal in its one wording."""
        namespace = arguments.get("namespace", DEFAULT_NAMESPACE) or DEFAULT_NAMESPACE
        where = f"{tool}({_short(arguments)})"
        if outcome == "accepted" and tool in WRITES and not self.scope.write:
            self.tally.bad.append(f"out of scope: a read-only token wrote: {where}")
        if outcome == "accepted" and "namespace" in TOOLS[tool] and not (
                isinstance(namespace, str) and self.scope.covers(namespace)):
            self.tally.bad.append(f"out of scope: accepted: {where}")
        if "not covered by this token" in text and text != refusal(str(namespace)):
            self.tally.bad.append(f"style: scope refusal worded otherwise: {text[:200]}")


def styled(text: str, tool: str, arguments: dict[str, Any]) -> bool:
    """Whether a refusal is in our style: one line starting with the field it is about (an
    argument of the tool, one the caller sent, or a quoted unknown key), no library wording."""
    found = STYLED.match(text)
    if not found or "\n" in text or FOREIGN.search(_without_inputs(text, arguments)):
        return False
    head = found["head"]
    return head in TOOLS[tool] or head in arguments or head.startswith('"')


def _client_can_send(arguments: dict[str, Any]) -> bool:
    """fastmcp's client sends strict UTF-8 JSON: no lone surrogates, no NaN or infinity."""
    try:
        json.dumps(arguments, ensure_ascii=False, allow_nan=False).encode()
    except (UnicodeEncodeError, ValueError):
        return False
    return True


class RawSession:
    """MCP over streamable HTTP by hand, for JSON that fastmcp's client refuses to write."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.http = httpx2.AsyncClient(timeout=60, headers={
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **({"authorization": f"Bearer {token}"} if token else {})})
        self.ids = 0

    async def post(self, message: dict[str, Any]) -> httpx2.Response:
        # ensure_ascii: lone surrogates go as \ud800 escapes; NaN as the bare word NaN
        body = json.dumps(message, ensure_ascii=True, allow_nan=True)
        response = await self.http.post(self.url, content=body)
        if "mcp-session-id" in response.headers:
            self.http.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        return response

    async def open(self) -> None:
        await self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}}})
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, str, bool]:
        """(is_error, text, whether it was a JSON-RPC error) of one tools/call."""
        self.ids += 1
        response = await self.post({"jsonrpc": "2.0", "id": self.ids, "method": "tools/call",
                                    "params": {"name": tool, "arguments": arguments}})
        text = response.text
        payloads = [line[5:] for line in text.splitlines() if line.startswith("data:")] or [text]
        try:
            message = json.loads(payloads[-1])
        except ValueError:
            return True, f"HTTP {response.status_code}: {text[:300]}", True
        if "error" in message:
            return True, str(message["error"].get("message", "")), True
        result = message.get("result", {})
        content = " ".join(c.get("text", "") for c in result.get("content", []))
        return bool(result.get("isError")), content, False

    async def aclose(self) -> None:
        await self.http.aclose()


def _strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings_in(k)
            yield from _strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings_in(v)


def _without_inputs(text: str, arguments: dict[str, Any]) -> str:
    """The message minus what the caller sent (validation errors may quote the input)."""
    for s in sorted(_strings_in(arguments), key=len, reverse=True):
        if len(s) >= 3:
            text = text.replace(s[:60], "")
    return text


def _short(arguments: dict[str, Any]) -> str:
    return repr(arguments)[:300]


def scoped_settings(settings: Settings) -> Settings:
    """``settings`` with the SCOPED tokens (ZAPOMNI_MCP_TOKENS)."""
    tokens = {SCOPED_TOKENS[name]: {"namespaces": entries, "write": write}
              for name, (entries, write) in SCOPED.items()}
    return msgspec.structs.replace(settings, mcp_tokens=json.dumps(tokens))


@contextmanager
def front_over_http(settings: Settings, token: str | None = None) -> Iterator[Target]:
    """The front (streamable HTTP) on a free port, and a Target speaking to it (with
    ``token``, one of SCOPED's: the settings must carry them, ``scoped_settings``)."""
    scope = None
    if token is not None:
        name = next(n for n, t in SCOPED_TOKENS.items() if t == token)
        scope = make_scope(*SCOPED[name])
    with ThreadedServer(http_app(settings)) as server:
        target = Target(settings, f"{server.url}/mcp", token, scope)
        target.open()
        try:
            yield target
        finally:
            target.close()
