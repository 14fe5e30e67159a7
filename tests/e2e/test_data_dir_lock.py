"""One stack per data directory (services/stack/lock.py): a second `zapomni up` on a directory
in use stops at once and says who holds it; the lock goes with the stack."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import Stack
from zapomni.services.stack.lock import lock_data_dir


@pytest.fixture
def stacks(tmp_path):
    started: list[Stack] = []
    yield lambda: started.append(Stack(tmp_path)) or started[-1]
    for stack in started:
        if stack.process is not None and stack.process.poll() is None:
            stack.process.kill()
            stack.process.wait()


def test_a_second_stack_on_a_data_dir_in_use_exits_with_who_holds_it(stacks, tmp_path):
    first = stacks()
    first.start(workers=1)
    holder = first.process.pid
    expected = (f"zapomni: the data directory {tmp_path.resolve()} is in use by another "
                f"Zapomni stack (PID {holder}); two stacks on one directory would corrupt its "
                f"data. Either stop it (Ctrl-C where it runs, or kill {holder}), or give this "
                "one its own directory with --data-dir or ZAPOMNI_DATA_DIR")

    with pytest.raises(SystemExit) as refused:
        lock_data_dir(tmp_path)
    assert str(refused.value) == expected

    second = stacks()  # other ports, the same directory
    second.output = tmp_path / "second.out"
    with pytest.raises(AssertionError, match="zapomni up did not start"):
        second.start(workers=1)
    assert second.process.wait(60) == 1
    said = second.output.read_text()
    assert expected in said
    assert "starting FalkorDB" not in said  # it stopped before touching the data

    assert first.process.poll() is None  # the first one serves on
    assert first.stop() == 0
    os.close(lock_data_dir(tmp_path))  # and once it has stopped, the directory is free


def test_a_start_refused_for_a_busy_port_leaves_no_data_dir_behind(tmp_path):
    """What the refused start created goes; a directory that was there stays as it was."""
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for data_dir in (tmp_path / "new" / "data", kept):
            done = subprocess.run(
                [str(Path(sys.executable).parent / "zapomni"), "up", "--workers", "1",
                 "--data-dir", str(data_dir), "--mcp-port", str(port)],
                capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 1
            assert f"zapomni: port {port} is in use; pass --mcp-port with another port" in \
                done.stderr
    assert not (tmp_path / "new").exists()
    assert (kept / "notes.txt").read_text() == "mine"
