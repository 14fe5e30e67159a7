"""`zapomni up` waits for FalkorDB while it loads, however long, and gives up on one that does
nothing (services/stack/falkordb.py wait_for_server). A large store's FalkorDB rebuilds its
vector index on start and answers nothing for many minutes; here a process that works for
longer than the wait's limit before it becomes the server stands in for that load."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    server_command,
    stop_process,
    wait_for_server,
)

# works (uses CPU) for the given seconds, then becomes the command that follows
WORK_THEN_EXEC = ("import os, sys, time\n"
                  "end = time.process_time() + float(sys.argv[1])\n"
                  "while time.process_time() < end: pass\n"
                  "os.execv(sys.argv[2], sys.argv[2:])\n")


def test_a_server_that_loads_for_longer_than_the_limit_is_waited_for(tmp_path):
    port = free_port()
    command = server_command(ensure_binaries(), port, tmp_path, persistent=False)
    process = subprocess.Popen([sys.executable, "-c", WORK_THEN_EXEC, "3", *command],
                               stdout=subprocess.DEVNULL)
    try:
        wait_for_server(port, process, timeout=1)  # 3 s of work: past the limit, never idle
        assert redis.Redis(port=port).ping()
    finally:
        stop_process(process)


def test_a_server_that_does_nothing_is_given_up_on_with_what_to_do(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with pytest.raises(SystemExit) as stopped:
            wait_for_server(free_port(), process, timeout=1)
        assert "did no work for 1s" in str(stopped.value)
        assert "falkordb.log" in str(stopped.value)
    finally:
        stop_process(process)
