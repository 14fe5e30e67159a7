"""A FalkorDB that asks for a password (as compose runs it): the URL carries it, and the
commands that reach the stores directly say which is wrong without printing it."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    server_command,
    stop_process,
    wait_for_server,
)

ZAPOMNI = str(Path(sys.executable).parent / "zapomni")


@pytest.fixture
def locked_store(tmp_path) -> Iterator[tuple[int, str]]:
    password, port = secrets.token_hex(32), free_port()
    (tmp_path / "db").mkdir()
    process = subprocess.Popen([*server_command(ensure_binaries(), port, tmp_path / "db",
                                                persistent=False), "--requirepass", password],
                               stdout=subprocess.DEVNULL)
    try:
        wait_for_server(port, process, timeout=60, password=password)
        yield port, password
    finally:
        stop_process(process)


def export(url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAPOMNI_")}
    env |= {"ZAPOMNI_REDIS_URL": f"{url}/0", "ZAPOMNI_FALKORDB_URL": url}
    return subprocess.run([ZAPOMNI, "export", "--namespace", "notes", "-o",
                           str(tmp_path / "notes.jsonl.gz")], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_password_goes_in_the_url_and_is_never_printed(locked_store, tmp_path):
    port, password = locked_store
    right = export(f"redis://:{password}@127.0.0.1:{port}", tmp_path)
    wrong = export(f"redis://:not-{password}@127.0.0.1:{port}", tmp_path)
    missing = export(f"redis://127.0.0.1:{port}", tmp_path)
    down = export(f"redis://:{password}@127.0.0.1:{free_port()}", tmp_path)
    # in with the password: the server answers about the namespace (there is none)
    assert "namespace 'notes' does not exist on this server" in right.stderr, right.stderr
    for refused in (wrong, missing):
        assert refused.returncode == 1
        assert refused.stderr.startswith("zapomni: the stack's FalkorDB (its store) refused "
                                         "the password; pass the right one in "
                                         "--falkordb-url"), refused.stderr
    assert down.returncode == 1 and "redis://:***@127.0.0.1:" in down.stderr, down.stderr
    for result in (right, wrong, missing, down):
        assert password not in result.stdout + result.stderr
