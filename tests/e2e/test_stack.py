"""The stack as the README starts it (`zapomni up`), driven by fastmcp's client over HTTP."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path

import httpx2
import pytest
from fastmcp import Client

from tests.support.mcp import answer
from tests.support.stack import Stack
from tests.support.waiting import eventually

# 50 SciFact abstracts kept with the tests (licence and source: tests/data/scifact/README.md)
SCIFACT = Path(__file__).resolve().parents[1] / "data" / "scifact" / "corpus.jsonl"


def load_passages(count: int) -> list[dict]:
    with SCIFACT.open() as lines:
        docs = [json.loads(line) for _, line in zip(range(count), lines, strict=False)]
    assert len(docs) == count, f"{SCIFACT.name} holds {len(docs)} documents, not {count}"
    return [{"id": d["_id"], "text": f"{d['title']}\n\n{d['text']}"} for d in docs]


@pytest.fixture
def stack(tmp_path):
    stack = Stack(tmp_path)
    yield stack
    if stack.process is not None and stack.process.poll() is None:
        stack.process.kill()
        stack.process.wait()


async def wait_done(client: Client, task_ids: list[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    pending = set(task_ids)
    while pending:
        for task_id in list(pending):
            status = await answer(client, "graph_status", {"task_id": task_id})
            assert status["state"] not in ("failed", "cancelled"), status
            if status["state"] == "done":
                pending.discard(task_id)
        assert time.monotonic() < deadline, f"{len(pending)} tasks not done after {timeout} s"
        await asyncio.sleep(0.3)


async def stats_when(client: Client, done, what: str, timeout: float = 120) -> dict:
    async def stats() -> dict:
        return await answer(client, "get_stats", {})

    return await eventually(stats, done, what, timeout=timeout, every=0.5)


async def top_hit(client: Client, query: str) -> str | None:
    found = await answer(client, "search_memory", {"query": query, "limit": 5})
    return found["results"][0]["memory_id"] if found["results"] else None


def first_sentence(text: str) -> str:
    body = text.split("\n\n", 1)[1]
    return body.split(". ")[0][:300]


# the stack open on loopback (the default), and the same flow with a token scoped to the
# namespaces it uses (ZAPOMNI_MCP_TOKENS): in-scope behaviour is unchanged
ACCESS = {"open": None, "scoped": ["default", "team-*"]}


@pytest.fixture(params=list(ACCESS))
def access(request) -> tuple[dict[str, str], str | None]:
    """The stack's environment and the token its clients send."""
    scope = ACCESS[request.param]
    if scope is None:
        return {}, None
    token = secrets.token_hex(24)
    return {"ZAPOMNI_MCP_TOKENS": json.dumps({token: {"namespaces": scope,
                                                       "write": True}})}, token


@pytest.mark.timeout(900)  # 60 s measured; two starts (180 s each) and 51 tasks may wait long
async def test_add_search_delete_restart(stack, access):
    env, token = access
    passages = load_passages(50)
    stack.start(env=env)
    async with Client(stack.url, auth=token) as client:
        if token:  # the scope is in force: a namespace outside it is refused
            outside = await client.call_tool("get_stats", {"namespace": "private"},
                                             raise_on_error=False)
            assert outside.is_error and "not covered by this token" in outside.content[0].text
        receipts = [await answer(client, "add_memory", {
            "text": p["text"], "metadata": {"source": "scifact", "doc": p["id"]}})
            for p in passages]
        await wait_done(client, [r["task_id"] for r in receipts])
        probes = [0, 7, 19, 33, 48]
        for i in probes:
            assert await top_hit(client, first_sentence(passages[i]["text"])) == \
                receipts[i]["memory_id"], passages[i]["id"]

        victim = probes[0]
        deleted = await answer(client, "delete_memory", {
            "memory_id": receipts[victim]["memory_id"]})
        await wait_done(client, [deleted["task_id"]])
        assert await top_hit(client, first_sentence(passages[victim]["text"])) != \
            receipts[victim]["memory_id"]
        stats = await stats_when(client, lambda s: s["workers_alive"] == 2, "2 workers alive")
        assert stats["memories"] == 49
    assert stack.stop() == 0
    assert "zapomni: stopped" in stack.output.read_text()

    stack.start(env=env)  # same data directory: everything is still there
    async with Client(stack.url, auth=token) as client:
        for i in probes[1:]:
            assert await top_hit(client, first_sentence(passages[i]["text"])) == \
                receipts[i]["memory_id"]
        assert (await answer(client, "get_stats", {}))["memories"] == 49
        again = await answer(client, "add_memory", {"text": passages[7]["text"]})
        assert again["duplicate"] and again["memory_id"] == receipts[7]["memory_id"]
    async with Client(stack.stdio_front()) as client:  # as Claude Desktop runs it
        assert await top_hit(client, first_sentence(passages[19]["text"])) == \
            receipts[19]["memory_id"]
    assert stack.stop() == 0


async def test_four_workers_on_one_machine(stack):
    stack.start(workers=4)
    async with Client(stack.url) as client:  # `up` returns before the workers have started
        await stats_when(client, lambda s: s["workers_alive"] == 4, "4 workers alive")
    base = stack.ports["--metrics-port"]
    async with httpx2.AsyncClient() as http:
        for i in range(4):
            worker = await http.get(f"http://127.0.0.1:{base + i}/metrics")
            assert worker.status_code == 200 and "zapomni_jobs_total" in worker.text
        query_metrics = f"http://127.0.0.1:{stack.ports['--query-port']}/metrics"
        await eventually(lambda: http.get(query_metrics),  # its gauges refresh every 5 s
                         lambda r: "zapomni_workers_alive 4.0" in r.text,
                         "the query service's metrics to count 4 workers", timeout=60, every=0.5)
        mcp_health = await http.get(stack.url.replace("/mcp", "/readyz"))
        assert mcp_health.status_code == 200
    assert stack.stop() == 0
