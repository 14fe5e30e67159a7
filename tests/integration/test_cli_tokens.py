"""``zapomni ingest`` and ``zapomni reembed``, run as the console script, against the real HTTP
front with a shared token: a token missing or wrong is one line on stderr that says which
to pass, never a traceback; the right one goes through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.support.servers import ThreadedServer
from zapomni.services.mcp.http import http_app

TOKEN = "correct-horse-battery-staple"
READER = "r" * 32  # a scoped token that may read "default" only
ELSEWHERE = "e" * 32  # a scoped token of another namespace, that may write
ZAPOMNI = str(Path(sys.executable).parent / "zapomni")
SHARED = "the shared token (ZAPOMNI_MCP_TOKEN) or a scoped token (ZAPOMNI_MCP_TOKENS)"


@pytest.fixture
def front(settings, query_service):
    scoped = json.dumps({READER: {"namespaces": ["default"]},
                         ELSEWHERE: {"namespaces": ["team-b"], "write": True}})
    with ThreadedServer(http_app(msgspec.structs.replace(settings, mcp_token=TOKEN,
                                                         mcp_tokens=scoped))) as server:
        yield f"{server.url}/mcp"


def zapomni(*args: str, token: str | None = None) -> subprocess.CompletedProcess:
    """The console script, with ZAPOMNI_MCP_TOKEN set to ``token`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "ZAPOMNI_MCP_TOKEN"}
    if token is not None:
        env["ZAPOMNI_MCP_TOKEN"] = token
    return subprocess.run([ZAPOMNI, *args], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_a_token_missing_or_wrong_is_one_line_that_names_the_flag(front, tmp_path):
    (tmp_path / "notes.txt").write_text("The heron fishes at dawn.")
    needs = (f"the MCP front at {front} needs a bearer token; pass --token (default: "
             f"ZAPOMNI_MCP_TOKEN) with {SHARED}")
    wrong = (f"the MCP front at {front} does not accept the bearer token sent; pass --token "
             f"(default: ZAPOMNI_MCP_TOKEN) with {SHARED}")
    runs = {
        "ingest, no token": (zapomni("ingest", str(tmp_path), "--mcp-url", front),
                             f"zapomni ingest: {needs}"),
        "ingest, wrong --token": (zapomni("ingest", str(tmp_path), "--mcp-url", front,
                                          "--token", "wrong"), f"zapomni ingest: {wrong}"),
        "ingest, wrong variable": (zapomni("ingest", str(tmp_path), "--mcp-url", front,
                                           token="wrong"), f"zapomni ingest: {wrong}"),
        "reembed, no token": (zapomni("reembed", "--namespace", "default", "--mcp-url", front),
                              f"zapomni: {needs}"),
        "reembed, wrong --token": (zapomni("reembed", "--namespace", "default", "--mcp-url",
                                           front, "--token", "wrong"), f"zapomni: {wrong}"),
        # a token the front takes but whose scope does not reach: the tool's refusal
        "ingest, read-only token": (
            zapomni("ingest", str(tmp_path), "--mcp-url", front, "--token", READER),
            "zapomni ingest: the front refused: namespace: this token may only read and "
            "add_memories writes; use a token with write access"),
        "reembed, another namespace's token": (
            zapomni("reembed", "--namespace", "default", "--mcp-url", front, "--token",
                    ELSEWHERE),
            "zapomni: namespace: 'default' is not covered by this token; use a token whose "
            "namespaces include it"),
    }
    said = {name: (run.returncode, run.stdout, run.stderr.splitlines()[-1])
            for name, (run, _) in runs.items()}
    assert said == {name: (1, "", line) for name, (_, line) in runs.items()}
    for run, _ in runs.values():  # before the refusal, at most the progress of files read
        assert all(line.startswith("zapomni: ingest: ") for line in
                   run.stderr.splitlines()[:-1]), run.stderr


def test_the_right_token_goes_through(front, tmp_path):
    """Through the same front, with the flag and with the variable (nothing to embed, so no
    worker is needed: the file is skipped, the reembed only queued)."""
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01binary")
    ingest = zapomni("ingest", str(tmp_path), "--mcp-url", front, "--token", TOKEN)
    reembed = zapomni("reembed", "--namespace", "default", "--no-wait", "--mcp-url", front,
                      token=TOKEN)
    assert (ingest.returncode, ingest.stdout.splitlines()[0]) == (
        0, "added 0, unchanged 0, replaced 0, pruned 0, skipped 1, failed 0"), ingest.stderr
    assert reembed.returncode == 0, reembed.stderr
    assert reembed.stderr.startswith("zapomni: reembed task ")
