"""The compose tests' engine and stack: one dockerd for the session (started here, stopped and
cleaned here, also when a test fails), the images compose.yaml names (the real ones where
they can be pulled, stand-ins built by deploy/local-images where not), and one compose
project per Compose CLI found, brought up with the README's command and taken down with its
volumes at the end."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.compose_cli import ROOT, ComposeStack, implementations
from tests.support.engine import Engine

NO_COMPOSE = ("no Compose CLI found: the compose tests run compose.yaml with Debian's "
              "docker-compose (apt-get install docker-compose) or Docker's `docker compose`")


@pytest.fixture(scope="module")  # stopped before the next module: test_engine_cleanup needs none
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    logs = tmp_path_factory.mktemp("engine")
    engine = Engine(logs / "dockerd.log")
    try:
        try:
            engine.start()
        except RuntimeError as problem:
            pytest.fail(str(problem), pytrace=False)
        built = subprocess.run([str(ROOT / "deploy" / "local-images")], cwd=ROOT,
                               env={**engine.env(), "PYTHON": sys.executable},
                               capture_output=True, text=True, timeout=3600)
        (logs / "local-images.log").write_text(built.stdout + built.stderr)
        assert built.returncode == 0, f"deploy/local-images failed:\n{built.stderr[-4000:]}"
        yield engine
    finally:
        engine.stop()


def _ids() -> list[str]:
    return [name for name, _ in implementations()] or ["no-compose"]


@pytest.fixture(scope="module", params=[command for _, command in implementations()] or [None],
                ids=_ids())
def stack(request: pytest.FixtureRequest, engine: Engine,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    if request.param is None:
        pytest.fail(NO_COMPOSE, pytrace=False)
    logs: Path = tmp_path_factory.mktemp("compose")
    stack = ComposeStack(engine, request.param, logs)
    try:
        stack.down(volumes=True)  # what a session that died left of this project
        stack.up(4, build=True)
        stack.forget_old_builds()  # the engine's cache holds one build, not one per run
        yield stack
    finally:
        try:
            stack.save_logs()  # the services' output, for a failure's diagnosis
        finally:
            stack.down(volumes=True)
