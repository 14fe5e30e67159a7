"""Not collected by itself (no test_ prefix): tests/compose/test_engine_cleanup.py runs it in a
pytest of its own. Its one test starts what a compose run starts (the engine, a network of its
own, a container with a published port) and then fails."""

import os
import subprocess
from pathlib import Path

PROJECT_NETWORK = LABEL = "zapomni-cleanup-check"


def test_fails_with_a_container_running(engine):
    def docker(*args: str) -> str:
        return subprocess.run(["docker", *args], env=engine.env(), check=True,
                              capture_output=True, text=True).stdout

    # what the engine's data root kept of the last run of this (it ended failing, on purpose)
    for old in docker("ps", "--all", "--quiet", "--filter", f"label={LABEL}").split():
        docker("rm", "--force", old)
    if PROJECT_NETWORK in docker("network", "ls", "--format", "{{.Name}}").split():
        docker("network", "rm", PROJECT_NETWORK)

    docker("network", "create", PROJECT_NETWORK)
    docker("run", "--detach", "--label", LABEL, "--network", PROJECT_NETWORK,
           "--publish", "127.0.0.1::8000", "python:3.11.7-slim-bookworm", "sleep", "600")
    assert docker("ps", "--quiet", "--filter", f"label={LABEL}").strip()
    Path(os.environ["ZAPOMNI_CLEANUP_MARK"]).write_text("a container ran")
    raise AssertionError("failing on purpose, with a container running")
