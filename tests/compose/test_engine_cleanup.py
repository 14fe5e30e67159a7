"""The engine and what it added to the machine are gone when a compose session ends, also
when its test fails: a pytest of its own runs tests/compose/failing_session.py (the engine,
a network, a container publishing a port, then a failure) and the machine is then as it was:
no dockerd, containerd or container process, no docker0 or network bridge, the iptables rules,
chains and FORWARD policy and IP forwarding as before, no mounts, no cgroups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.compose_cli import ROOT
from tests.support.engine import CGROUP_PARENT, EXEC_ROOT, data_root, leftover_pids, snapshot

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]


def mounts_of_the_engine() -> list[str]:
    roots = (str(EXEC_ROOT), str(data_root()))
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(roots)]


def test_a_failed_session_leaves_the_machine_as_it_was(tmp_path):
    before = snapshot()
    assert "docker0" not in before["links"], "another engine runs here; the test needs none"
    mark = tmp_path / "mark"
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/compose/failing_session.py", "-q",
         "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'session'}"],
        cwd=ROOT, env={**os.environ, "ZAPOMNI_CLEANUP_MARK": str(mark)},
        capture_output=True, text=True, timeout=1700)
    assert session.returncode == 1, session.stdout[-3000:] + session.stderr[-2000:]
    assert "failing on purpose, with a container running" in session.stdout, session.stdout
    assert mark.read_text() == "a container ran"  # it failed with the container up

    after = snapshot()
    assert after["rules"] == before["rules"]  # filter and nat: rules, chains, policies
    assert after["links"] == before["links"]  # no docker0, br-*, veth*
    assert after["ip_forward"] == before["ip_forward"]
    assert after["plugins_dir"] == before["plugins_dir"]
    assert leftover_pids() == set()  # dockerd, containerd, shims, the container's sleep
    assert not EXEC_ROOT.exists()
    assert mounts_of_the_engine() == []
    assert list(Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}")) == []
    assert list(Path("/sys/fs/cgroup").glob(CGROUP_PARENT)) == []
