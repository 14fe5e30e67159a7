"""Lines the command line prints: the banner of `zapomni up` (with a token, the `claude mcp
add` line carries the header the front needs, naming the token rather than showing it: the
banner may go to a log), and what `zapomni ingest` says when stopped or kept waiting."""

import json
from pathlib import Path

from zapomni.services.cli.ingest import Tally, aged, interrupted
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


def test_ctrl_c_says_what_was_queued_in_either_phase():
    assert interrupted(Tally()) == "zapomni ingest: interrupted; nothing was queued"
    reading = Tally(tasks={"t1": "a", "t2": "b"}, sending=64)
    assert interrupted(reading) == (
        "zapomni ingest: interrupted while reading files; 2 tasks were queued (and maybe the "
        "64 files being sent when it stopped) and go on in the workers (nothing queued is "
        "undone); run the same command again to send the rest and follow them")
    following = Tally(tasks={"t1": "a", "t2": "b", "t3": "c"}, ended=1, following=True)
    assert interrupted(following) == (
        "zapomni ingest: interrupted; 3 tasks were queued and go on in the workers (nothing "
        "queued is undone), 1 of them ended; run the same command again to follow the rest")


def test_a_wait_that_lasts_says_since_when():
    said = "waiting: the job ran over its time limit; attempt 1 of 8, retrying in 4s"
    assert aged(said, 59) == said
    assert aged(said, 4 * 60 + 10) == f"{said}; unchanged for 4 min"
