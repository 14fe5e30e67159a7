"""The monitoring as an operator runs it: a real Prometheus scrapes a running stack (`zapomni
up`, its front guarded by a token as in compose) with the jobs of deploy/prometheus.yml, and
after real traffic every query of the Grafana dashboard returns a result from it.

The traffic is chosen so no panel is empty for want of an event: adds whose tasks and graph
builds finish, two equal searches (a query-embedding cache miss, then a hit), an empty text (an
'invalid' tool outcome), an add the write policy refuses (zapomni_refusals_total), and an add
whose embedding Ollama refuses (HTTP 400: a 'failed' job). Embeddings come from an
Ollama-speaking test server, so a refusal can be injected."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
import redis.asyncio
from fastmcp import Client

from tests.support.fake_ollama import FakeOllama
from tests.support.mcp import answer
from tests.support.prometheus import Prometheus, scrape_config
from tests.support.servers import ThreadedServer
from tests.support.stack import Stack
from tests.support.waiting import eventually
from tests.support.workers import wait_tasks
from zapomni.shared.tasks import tasks

DASHBOARD = Path(__file__).resolve().parents[2] / "grafana" / "dashboards" / "zapomni.json"
POLICY = {"*": {"min_confidence": 0.5}}
WORKERS = 2


def panel_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p["targets"]]


@pytest.fixture
def ollama():
    fake = FakeOllama()
    with ThreadedServer(fake.app) as server:
        fake.url = server.url
        yield fake


@pytest.fixture
def stack(tmp_path):
    stack = Stack(tmp_path / "stack")
    stack.data_dir.mkdir()
    yield stack
    if stack.process is not None and stack.process.poll() is None:
        stack.stop()


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "mcp_token"
    path.write_text(secrets.token_urlsafe(32))
    return path


def targets(stack: Stack) -> dict[str, list[str]]:
    first = stack.ports["--metrics-port"]
    return {"zapomni-mcp": [f"127.0.0.1:{stack.ports['--mcp-port']}"],
            "zapomni-query": [f"127.0.0.1:{stack.ports['--query-port']}"],
            "zapomni-worker": [f"127.0.0.1:{first + i}" for i in range(WORKERS)]}


async def drive_traffic(stack: Stack, token: str, ollama: FakeOllama) -> None:
    queue = redis.asyncio.Redis(port=stack.ports["--falkordb-port"])
    try:
        async with Client(stack.url, auth=token) as client:
            added = [await answer(client, "add_memory", {"text": text}) for text in (
                "The harbour crane lifts forty containers an hour in calm weather.",
                "Night trains to the coast leave from platform nine after ten o'clock.")]
            ids = [a["task_id"] for a in added]
            await wait_tasks(queue, ids, timeout=300)
            graphs = [(await tasks.get_task(queue, i)).graph_task_id for i in ids]
            await wait_tasks(queue, [g for g in graphs if g], timeout=300)
            for _ in range(2):  # a query-embedding cache miss, then a hit
                await client.call_tool("search_memory", {"query": "how fast is the crane?"})
            empty = await client.call_tool("add_memory", {"text": " "}, raise_on_error=False)
            assert empty.is_error
            refused = await answer(client, "add_memory", {
                "text": "Maybe the ferry is late.", "metadata": {"confidence": 0.1}})
            assert refused["stored"] is False
            ollama.fail_statuses = [400]  # the next embedding request is refused
            doomed = await answer(client, "add_memory", {"text": "A doomed memory."})
            await wait_tasks(queue, [doomed["task_id"]], timeout=300, until=("failed",))
    finally:
        await queue.aclose()


def empty_queries(prometheus: Prometheus) -> list[str]:
    return [f"{title}: {expr}" for title, expr in panel_queries() if not prometheus.query(expr)]


@pytest.mark.timeout(900)  # one stack start (180 s at most), tasks, then scrapes
async def test_every_dashboard_query_has_data_after_real_traffic(tmp_path, stack, ollama,
                                                                 token_file):
    token = token_file.read_text()
    stack.start(workers=WORKERS, env={"ZAPOMNI_OLLAMA_URL": ollama.url,
                                      "ZAPOMNI_MCP_TOKEN": token,
                                      "ZAPOMNI_WRITE_POLICY": json.dumps(POLICY)})
    prometheus = Prometheus(tmp_path / "prometheus", scrape_config(targets(stack), token_file))
    try:
        up = await eventually(lambda: _query(prometheus, "up == 1"),
                              lambda r: len(r) == WORKERS + 2,
                              "Prometheus to scrape the front, the query service and both "
                              "workers", timeout=120, every=0.5)
        assert {r["metric"]["job"] for r in up} == {"zapomni-mcp", "zapomni-query",
                                                    "zapomni-worker"}
        await drive_traffic(stack, token, ollama)
        missing = await eventually(lambda: _empty(prometheus), lambda e: e == [],
                                   "every dashboard query to return data", timeout=180,
                                   every=1.0)
        assert missing == []
        # the worker's own `job` label (the arq function) is kept over the scrape job's name
        done = prometheus.query(next(expr for _, expr in panel_queries()
                                     if 'zapomni_jobs_total{outcome="done"}' in expr))
        # (small adds travel in batches: shared/tasks/adds.py)
        assert {r["metric"]["job"] for r in done} >= {"ingest_batch", "build_graph"}, done
        failed = prometheus.query('zapomni_jobs_total{outcome="failed"} > 0')
        assert [r["metric"]["job"] for r in failed] == ["ingest_batch"], failed
    finally:
        prometheus.close()
    assert stack.stop() == 0


async def _query(prometheus: Prometheus, expr: str) -> list[dict]:
    return prometheus.query(expr)


async def _empty(prometheus: Prometheus) -> list[str]:
    return empty_queries(prometheus)
