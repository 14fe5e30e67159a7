"""A real Prometheus server for the tests, scraping a stack on loopback with the scrape jobs of
deploy/prometheus.yml (its targets replaced by static loopback ones, 1 s apart)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
import yaml

from zapomni.services.stack.falkordb import free_port

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ("Prometheus is not installed: this test runs a real one. Install it (Debian/Ubuntu: "
           "apt-get install prometheus; elsewhere put the prometheus binary from "
           "prometheus.io on PATH) and run again; .ci/run installs it when missing")


def prometheus_binary() -> str:
    """The prometheus on PATH, or the test fails saying how to install it (no silent skip)."""
    found = shutil.which("prometheus")
    if found is None:
        pytest.fail(INSTALL, pytrace=False)
    return found


def scrape_config(targets: dict[str, list[str]], token_file: Path | None) -> dict:
    """deploy/prometheus.yml with each job's targets replaced: ``targets`` maps a job name to
    host:port addresses. Every other setting of a job (honor_labels, authorization...) stays."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    for job in config["scrape_configs"]:
        job.pop("dns_sd_configs", None)
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(token_file)
    assert {job["job_name"] for job in config["scrape_configs"]} == set(targets)
    return config


class Prometheus:
    """``prometheus`` on a free loopback port with its data in ``work``; stopped by PID."""

    def __init__(self, work: Path, config: dict) -> None:
        work.mkdir(parents=True, exist_ok=True)
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = work / "prometheus.log"
        command = [prometheus_binary(), f"--config.file={work / 'prometheus.yml'}",
                   f"--storage.tsdb.path={work / 'data'}",
                   f"--web.listen-address=127.0.0.1:{self.port}"]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.http = httpx2.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log.read_text()}")
            try:
                if self.http.get("/-/ready").status_code == 200:
                    return
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after {timeout:.0f} s")
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict]:
        """The result vector of an instant query."""
        answer = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def close(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
