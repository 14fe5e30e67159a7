"""Ctrl-C on a real `zapomni ingest` against a real `zapomni up`: one line that says what was
queued and that its tasks go on, no traceback; the workers then store every file, and the
same command run again follows the tasks still queued to their end."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastmcp import Client

from tests.support.mcp import answer
from tests.support.stack import Stack
from tests.support.waiting import eventually

ZAPOMNI = str(Path(sys.executable).parent / "zapomni")
FILES = 12


def at_a_terminal() -> None:
    """SIGINT as a terminal gives it: a shell's background job (CI started with `&`) begins
    with SIGINT ignored (POSIX), its children inherit that, and Python then installs no
    KeyboardInterrupt; the command a user runs at a terminal has the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ingest(stack: Stack, folder: Path, err: Path) -> subprocess.Popen:
    """`zapomni ingest FOLDER` as a user runs it, its progress lines and messages in ``err``."""
    with err.open("wb") as sink:
        return subprocess.Popen([ZAPOMNI, "ingest", str(folder), "--mcp-url", stack.url],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=sink, text=True, preexec_fn=at_a_terminal)


async def following(err: Path) -> str:
    async def said() -> str:
        return err.read_text()

    # the tasks are queued and followed: the command waits for the workers
    return await eventually(said, lambda text: "tasks embedded and written" in text,
                            "the ingest to follow its tasks", timeout=300, every=0.2)


@pytest.mark.timeout(900)
async def test_ctrl_c_says_what_was_queued_and_the_tasks_go_on(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(FILES):
        (folder / f"note-{i}.txt").write_text(f"Note {i}: the ferry {i} leaves at {i} am.")
    stack = Stack(tmp_path / "data")
    stack.data_dir.mkdir()
    started: list[subprocess.Popen] = []
    try:
        stack.start(workers=1)
        workers = stack.workers()
        assert len(workers) == 1
        for pid in workers:  # no task can end meanwhile: what Ctrl-C finds queued stays so
            os.kill(pid, signal.SIGSTOP)
        try:
            first = ingest(stack, folder, tmp_path / "first.err")
            started.append(first)
            await following(tmp_path / "first.err")
            first.send_signal(signal.SIGINT)
            out, _ = first.communicate(timeout=120)
            said = (tmp_path / "first.err").read_text()
            again = ingest(stack, folder, tmp_path / "again.err")
            started.append(again)
            await following(tmp_path / "again.err")
        finally:
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
        rerun_out, _ = again.communicate(timeout=600)
        async with Client(stack.url) as client:
            stats = await answer(client, "get_stats", {})
            hits = await answer(client, "search_memory", {"query": "ferry 7",
                                                          "mode": "keyword"})
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
        if stack.process is not None and stack.process.poll() is None:
            stack.stop()

    assert first.returncode == 130 and out == ""
    assert "Traceback" not in said and "KeyboardInterrupt" not in said
    assert said.splitlines()[-1] == (
        f"zapomni ingest: interrupted; {FILES} tasks were queued and go on in the workers "
        f"(nothing queued is undone), 0 of them ended; run the same command again to follow "
        "the rest")
    # the same command again: the files still queued are followed to their end as its own
    assert again.returncode == 0, (tmp_path / "again.err").read_text()
    assert rerun_out.splitlines()[0] == (f"added {FILES}, unchanged 0, replaced 0, pruned 0, "
                                         "skipped 0, failed 0")
    assert stats["memories"] == FILES  # the workers stored every file
    assert hits["results"][0]["source"] == "notes/note-7.txt"


def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path):
    """Ctrl-C while `zapomni` still imports its modules (seconds on a busy machine) or waits
    for a front that does not answer: one line, exit code 130. The signal is sent once
    Python reports (PYTHONPROFILEIMPORTTIME) a module imported after the command's package
    (zapomni.services.stack): one the command's modules import, before fastmcp and the
    rest. It lands while they still import, or while the command waits for the front, a
    socket that never answers, so nothing else ends it first."""
    (tmp_path / "note.txt").write_text("The ferry leaves at nine.")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        err = tmp_path / "err"
        with err.open("wb") as sink:
            started = subprocess.Popen([ZAPOMNI, "ingest", str(tmp_path), "--mcp-url", url],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=sink, preexec_fn=at_a_terminal,
                                       env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
        try:
            deadline = time.monotonic() + 120
            while not re.search(r"\| +zapomni\.services\.stack\n.+\n", err.read_text()):
                assert started.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.01)
            started.send_signal(signal.SIGINT)
            started.communicate(timeout=120)
        finally:
            if started.poll() is None:
                started.kill()
                started.wait()
    said = [line for line in err.read_text().splitlines()
            if not line.startswith("import time:")]
    assert started.returncode == 130, said
    assert said in (["zapomni: interrupted"],
                    ["zapomni ingest: interrupted; nothing was queued"])
