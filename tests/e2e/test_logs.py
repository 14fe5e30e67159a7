"""The logs of a stack started as the README starts it are the JSON lines it promises: every
line of every process's log one JSON object, a refused call one line with the tool and the
reason (no traceback), and no error for what the user is told politely: a tool that does
not exist, a token the front does not take."""

from __future__ import annotations

import json
import secrets

import pytest
from fastmcp import Client
from mcp import MCPError

from tests.support.stack import Stack

TOKEN = secrets.token_hex(24)
REFUSED = [  # (tool, arguments, what the caller reads: the log line's reason)
    ("add_memory", {"text": " "}, "text: must not be empty"),
    ("search_memory", {"query": "x", "limit": "10"}, "limit: expected an integer, got a string"),
    ("get_stats", {"namespace": "private"}, "not covered by this token"),
    ("add_memories", {"items": [{"text": "x"}] * 1001},
     "items: expected a list of 1 to 1000 items"),
    ("delete_memory", {"memory_id": "mem_" + "0" * 32}, None),  # answered, not refused
]


def entries(stack: Stack) -> dict[str, list[dict]]:
    """Each log file's lines, each parsed as JSON (a line that is not fails the test)."""
    logs = {}
    for path in sorted((stack.data_dir / "logs").glob("*.log")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                pytest.fail(f"{path.name}:{number} is not JSON: {line[:200]!r}")
            assert isinstance(event, dict), f"{path.name}:{number}: {line[:200]}"
        logs[path.name] = [json.loads(line) for line in lines]
    return logs


@pytest.mark.timeout(600)  # one start (up to 180 s on a busy machine)
async def test_every_log_line_is_json(tmp_path):
    stack = Stack(tmp_path)
    scope = {TOKEN: {"namespaces": ["default", "empty"], "write": True}}
    stack.start(workers=1, env={"ZAPOMNI_MCP_TOKENS": json.dumps(scope)})
    try:
        async with Client(stack.url, auth=TOKEN) as client:
            for tool, arguments, reason in REFUSED:
                result = await client.call_tool(tool, arguments, raise_on_error=False)
                assert result.is_error == (reason is not None), (tool, result)
                if reason:
                    assert reason in result.content[0].text
            with pytest.raises(MCPError, match="topic: required but missing"):
                await client.get_prompt("recall", {})
            unknown = await client.call_tool("recal_memory", {}, raise_on_error=False)
            assert unknown.is_error and unknown.content[0].text == (
                "tool recal_memory: this server has no such tool; list the tools (tools/list) "
                "for their names")
        with pytest.raises(MCPError, match="^unauthorized: this server does not accept the "
                                           "bearer token sent; send the header"):
            async with Client(stack.url, auth="not-" + TOKEN):
                pass
            empty = await client.call_tool("search_memory", {"query": "x",
                                                             "namespace": "empty"})
            assert empty.structured_content["note"] == "namespace 'empty' holds no memories yet"
    finally:
        assert stack.stop() == 0
    logs = entries(stack)
    assert set(logs) == {"mcp.log", "query.log", "worker-1.log"}
    mcp = [e for e in logs["mcp.log"] if " refused: " in e["msg"]]
    for tool, _, reason in REFUSED:
        lines = [e for e in mcp if e["msg"].startswith(f"tool {tool} refused: ")]
        assert len(lines) == (1 if reason else 0), (tool, mcp)
        if reason:
            assert reason in lines[0]["msg"] and lines[0]["level"] == "info", lines
    assert [e["level"] for e in mcp if e["msg"].startswith("prompt recall refused: ")] == \
        ["info"]
    # the caller's mistakes: a warning each, in one line, not an error with a traceback
    assert [(e["level"], e["msg"]) for e in mcp if "recal_memory" in e["msg"]] == \
        [("warning", "tool recal_memory refused: no such tool")]
    token_refusals = {(e["level"], e["msg"]) for e in mcp if e["msg"].startswith("POST /mcp")}
    assert token_refusals == {  # a line for each request the client sent
        ("info", "POST /mcp refused: the server does not accept the bearer token sent")}
    # fastmcp's own report of each refusal (no reason) is dropped (shared/logs.py): if its
    # wording changes, its lines show up here
    assert not [e for e in logs["mcp.log"] if e["logger"].startswith("fastmcp")], logs
    for name, events in logs.items():  # no error, and no traceback, for what was refused
        assert not [e for e in events if e["level"] in ("error", "critical") or "exc" in e], \
            (name, events)
