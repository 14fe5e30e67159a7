"""compose.yaml run for real by a Compose CLI (Debian's docker-compose 1.29, or v2's `docker
compose` where present) on the tests' own engine (tests/support/engine.py), with the
variables the README exports and tests/compose/override.yaml. Containers are found by the
labels both Compose versions put on them; Redis and FalkorDB, which publish no port, are
read at their addresses on the project's network (the engine's host routes to it)."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from pathlib import Path

from tests.support.engine import Engine
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OVERRIDE = ROOT / "tests" / "compose" / "override.yaml"
PROJECT = "zapomni-compose-test"
# what the test starts: the README's whole stack but Grafana (no image of it here); the
# front's and the workers' dependencies come with them
SERVICES = ("mcp", "worker", "prometheus")


def implementations() -> list[tuple[str, list[str]]]:
    """The Compose CLIs on this machine: (name, command)."""
    found = []
    if shutil.which("docker-compose"):
        version = subprocess.run(["docker-compose", "version", "--short"],
                                 capture_output=True, text=True).stdout.strip()
        if version.startswith("1."):
            found.append((f"compose-{version}", ["docker-compose"]))
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        found.append(("compose-v2", ["docker", "compose"]))
    return found


def readme_variables() -> dict[str, str]:
    """What README's compose section exports, each a fresh random value as there."""
    return {name: secrets.token_hex(size) for name, size in (
        ("ZAPOMNI_MCP_TOKEN", 32), ("ZAPOMNI_QUERY_SECRET", 32), ("REDIS_PASSWORD", 32),
        ("FALKORDB_PASSWORD", 32), ("GRAFANA_ADMIN_PASSWORD", 12))}


class ComposeStack:
    """One compose project: ``up``, ``scale``, ``restart``, ``down``, and what runs in it."""

    def __init__(self, engine: Engine, command: list[str], logs: Path) -> None:
        self.engine, self.command, self.logs = engine, command, logs
        self.values = readme_variables()
        # published on free ports, not the README's 8765 and 9090, which others may hold here
        self.mcp_port, self.prometheus_port = free_port(), free_port()
        self.env = {**engine.env(), **self.values, "COMPOSE_PROJECT_NAME": PROJECT,
                    "MCP_HOST_PORT": str(self.mcp_port),
                    "PROMETHEUS_HOST_PORT": str(self.prometheus_port)}

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.mcp_port}/mcp"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def token(self) -> str:
        return self.values["ZAPOMNI_MCP_TOKEN"]

    def compose(self, *args: str, timeout: float = 1800) -> str:
        full = [*self.command, "-f", str(ROOT / "compose.yaml"), "-f", str(OVERRIDE), *args]
        with (self.logs / "compose-commands.log").open("a") as log:
            log.write(f"$ {' '.join(full[len(self.command):])}\n")
            done = subprocess.run(full, cwd=ROOT, env=self.env, capture_output=True,
                                  text=True, timeout=timeout)
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(self.command)} {' '.join(args)} failed "
                                 f"({done.returncode}):\n{done.stderr[-4000:]}")
        return done.stdout

    def docker(self, *args: str) -> str:
        done = subprocess.run(["docker", *args], env=self.engine.env(), capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed: {done.stderr[-2000:]}")
        return done.stdout

    def up(self, workers: int = 4, *, build: bool = False) -> None:
        """The README's `up --build --scale worker=N`, detached, for the test's services."""
        self.compose("up", "-d", *(["--build"] if build else []), "--scale",
                     f"worker={workers}", *SERVICES)

    def forget_old_builds(self) -> None:
        """The images earlier builds of deploy/Dockerfile left untagged (~1 GB each run, the
        final stage's copy of /opt/zapomni unshared), removed; the newest build stage is kept,
        since the next build takes its layers (the locked dependencies) from it."""
        ids = self.docker("images", "--quiet", "--no-trunc", "--filter", "dangling=true").split()
        images = json.loads(self.docker("image", "inspect", *ids)) if ids else []
        ours = [i for i in images if i["Config"]["WorkingDir"] in ("/src", "/app")
                and i["Config"]["Cmd"] in (["zapomni-mcp"], ["python3"])]
        stages = sorted((i for i in ours if i["Config"]["WorkingDir"] == "/src"),
                        key=lambda i: i["Created"])
        newest = stages[-1] if stages else None
        for image in ours:
            if image is not newest:  # one a container still uses stays, unforced
                subprocess.run(["docker", "image", "rm", image["Id"]], env=self.engine.env(),
                               capture_output=True, timeout=600)

    def restart(self, service: str) -> None:
        self.compose("restart", service)

    def down(self, *, volumes: bool = False) -> None:
        self.compose("down", *(["--volumes"] if volumes else []), "--remove-orphans")

    def note(self, line: str) -> None:
        """A figure a test saw (replicas, adds, stuck tasks), in figures.log beside the logs."""
        with (self.logs / "figures.log").open("a") as figures:
            figures.write(line + "\n")

    def save_logs(self) -> None:
        (self.logs / "services.log").write_text(self.compose("logs", "--no-color"))

    def containers(self, service: str | None = None, *, running: bool = True) -> list[dict]:
        """``docker inspect`` of the project's containers (of one service)."""
        labels = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            labels += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = self.docker("ps", "-q", *([] if running else ["-a"]), *labels).split()
        return json.loads(self.docker("inspect", *ids)) if ids else []

    def address(self, service: str) -> str:
        """The service's address on the project's network (its one running container)."""
        [container] = self.containers(service)
        [network] = container["NetworkSettings"]["Networks"].values()
        return network["IPAddress"]

    def settings(self) -> Settings:
        """Settings that reach the stack's Redis and FalkorDB as its services do, with the
        passwords, at their current addresses (a restart may move them)."""
        queue = f"redis://:{self.values['REDIS_PASSWORD']}@{self.address('redis')}:6379/0"
        store = f"redis://:{self.values['FALKORDB_PASSWORD']}@{self.address('falkordb')}:6379"
        return Settings.from_env(environ={}, redis_url=queue, falkordb_url=store)

    def worker_names(self) -> dict[str, str]:
        """Each running worker container's hostname (the first part of the worker names task
        records carry) -> its container id."""
        return {c["Config"]["Hostname"]: c["Id"] for c in self.containers("worker")}
