"""A worker process runs below the query service and the front: its own nice, and where it leads
its session (as `zapomni up` starts it) its session's autogroup nice, which is what ranks it
against the other processes under Linux's autogroup scheduling (workers/resources.py)."""

import os
import subprocess
import sys
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")
CHILD = ("import os; from zapomni.workers.resources import reads_first; reads_first(7); "
         "print(os.getpriority(os.PRIO_PROCESS, 0)); "
         "print(open('/proc/self/autogroup').read() if os.path.exists('/proc/self/autogroup') "
         "else '')")


def worker_priority(own_session: bool) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", CHILD], start_new_session=own_session,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    return int(out[0]), out[1] if len(out) > 1 else ""


def test_a_worker_that_leads_its_session_lowers_the_sessions_priority():
    nice, group = worker_priority(own_session=True)
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    if AUTOGROUP.exists():  # a kernel built without autogroups ranks by the nice alone
        assert group.split()[-2:] == ["nice", "7"]
        # its own session's group, not the test's (which reads empty in the root group, as
        # for a process of init's session)
        assert group.split()[0] not in AUTOGROUP.read_text().split()[:1]


def test_a_worker_started_from_a_shell_leaves_the_shells_session_alone():
    before = AUTOGROUP.read_text().strip() if AUTOGROUP.exists() else ""
    nice, group = worker_priority(own_session=False)
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
    assert group == before  # the session it shares (the test's) keeps its priority
    assert (AUTOGROUP.read_text().strip() if AUTOGROUP.exists() else "") == before
