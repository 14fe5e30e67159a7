"""The banner `zapomni up` prints: with a token, the `claude mcp add` line carries the header
the front needs, naming the token rather than showing it (the banner may go to a log)."""

import json
from pathlib import Path

from zapomni.services.stack.main import banner
from zapomni.shared.settings import Settings

TOKEN = "t" * 32
ADD = "Claude Code:   claude mcp add --transport http zapomni http://127.0.0.1:8765/mcp"


def claude_line(**settings: str) -> str:
    shown = banner(Settings.from_env({}, **settings), 2, Path("/data"), Path("/data/logs"),
                   9470)
    assert TOKEN not in shown
    [line] = [line for line in shown.splitlines() if line.startswith("Claude Code:")]
    return line


def test_the_claude_line_carries_the_header_a_token_needs():
    assert claude_line() == ADD  # loopback without a token: no header
    assert claude_line(mcp_token=TOKEN) == \
        f'{ADD} --header "Authorization: Bearer $ZAPOMNI_MCP_TOKEN"'
    assert claude_line(mcp_tokens=json.dumps({TOKEN: {"namespaces": ["*"]}})) == \
        f'{ADD} --header "Authorization: Bearer <a token of ZAPOMNI_MCP_TOKENS>"'
    assert claude_line(mcp_jwt_public_key="KEY", mcp_jwt_issuer="https://id.example.com",
                       mcp_jwt_audience="zapomni") == \
        f'{ADD} --header "Authorization: Bearer <a JWT of your identity provider>"'
