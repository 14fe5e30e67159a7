"""/metrics of a running front, query service and worker process after real traffic, and
four worker processes sharing one fanned-out document."""

from __future__ import annotations

import httpx2
from fastmcp import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import make_settings
from tests.support.graph import stored
from tests.support.mcp import answer
from tests.support.servers import ThreadedServer
from tests.support.waiting import eventually
from tests.support.workers import add_text, wait_tasks, worker_processes
from zapomni.services.mcp.http import http_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.tasks import tasks


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(url: str) -> dict:
    async with httpx2.AsyncClient() as http:
        response = await http.get(url)
    assert response.status_code == 200
    return samples(response.text)


async def test_every_process_serves_metrics_that_move(settings, query_service, aredis):
    worker_port = free_port()
    with ThreadedServer(http_app(settings)) as front_server, \
            worker_processes(settings, 1, metrics_ports=[worker_port]):
        front_metrics = f"{front_server.url}/metrics"
        before = await scrape(front_metrics)
        query_before = await scrape(f"{query_service}/metrics")
        async with Client(f"{front_server.url}/mcp") as client:
            added = await answer(client, "add_memory", {"text": "Metrics are counted."})
            await client.call_tool("add_memory", {"text": " "}, raise_on_error=False)
            await wait_tasks(aredis, [added["task_id"]], timeout=120)
            graph_task = (await tasks.get_task(aredis, added["task_id"])).graph_task_id
            await wait_tasks(aredis, [graph_task], timeout=120)
            await client.call_tool("search_memory", {"query": "what is counted?"})
            await client.call_tool("search_memory", {"query": "what is counted?"})
        front = await scrape(front_metrics)
        # A job marks its task done before it returns; arq takes it off the queue, and the
        # worker counts it, after that. A queue depth of 0 says both have happened.
        query = await eventually(  # the query service refreshes system gauges every 5 s
            lambda: scrape(f"{query_service}/metrics"),
            lambda q: (value(q, "zapomni_workers_alive"),
                       value(q, "zapomni_tasks", state="done"),
                       value(q, "zapomni_queue_depth")) == (1, 2, 0),
            "the query service to count 1 worker alive, 2 tasks done and an empty queue",
            timeout=60, every=0.5)
        worker = await scrape(f"http://127.0.0.1:{worker_port}/metrics")

    def moved(name, **labels):
        return value(front, name, **labels) - value(before, name, **labels)

    assert moved("zapomni_tool_calls_total", tool="add_memory", outcome="ok") == 1
    assert moved("zapomni_tool_calls_total", tool="add_memory", outcome="invalid") == 1
    assert moved("zapomni_tool_calls_total", tool="search_memory", outcome="ok") == 2
    assert moved("zapomni_tool_seconds_count", tool="search_memory") == 2
    assert moved("zapomni_enqueue_seconds_count") == 1
    # front and query share this test process, and so a registry: compare with before
    def query_moved(name, **labels):
        return value(query, name, **labels) - value(query_before, name, **labels)

    assert query_moved("zapomni_search_seconds_count", mode="hybrid") == 2
    assert query_moved("zapomni_query_embedding_cache_total", result="hit") == 1
    assert query_moved("zapomni_query_embedding_cache_total", result="miss") == 1
    assert query_moved("zapomni_search_candidates_count", signal="keyword") == 2
    assert value(query, "zapomni_tasks", state="done") == 2  # the ingest and its graph task
    assert value(worker, "zapomni_jobs_total", job="ingest_batch", outcome="done") == 1
    assert value(worker, "zapomni_chunks_embedded_total") == 1
    assert value(worker, "zapomni_jobs_total", job="build_graph", outcome="done") == 1
    assert value(worker, "zapomni_chunks_graphed_total") == 1
    for stage in ("chunk", "embed", "write", "finish"):
        assert value(worker, "zapomni_stage_seconds_count", stage=stage) == 1, stage
    assert value(worker, "zapomni_falkordb_write_seconds_count", op="chunks") == 1
    assert value(worker, "zapomni_embed_request_seconds_count") >= 1


async def test_metrics_ask_for_the_token_when_one_is_set(settings):
    import msgspec

    guarded = msgspec.structs.replace(settings, mcp_token="s3cret-s3cret")
    with ThreadedServer(http_app(guarded)) as server:
        async with httpx2.AsyncClient() as http:
            anonymous = await http.get(f"{server.url}/metrics")
            allowed = await http.get(f"{server.url}/metrics",
                                     headers={"authorization": "Bearer s3cret-s3cret"})
    assert anonymous.status_code == 401 and allowed.status_code == 200
    assert "zapomni_tool_calls_total" in allowed.text


async def test_four_workers_share_one_large_document(falkordb_url, fake_ollama, aredis):
    # a worker runs one job at a time (max_jobs=1) and a part of 32 chunks makes two requests
    # of 16, so the first requests, held until three are in flight, come from two workers at
    # once; chunks of 16 tokens: 300 chunks, 10 parts. The first part is written by the job
    # that fans the others out, alone (its two requests cannot gather three): they are let
    # go after 5 s, well inside the embedder's 60 s request limit (at 60 s, the fake's
    # default, each request timed out as it was let go and was tried again, held again)
    fake_ollama.gather, fake_ollama.gather_timeout, fake_ollama.latency = 3, 5.0, 0.2
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=16,
                             max_jobs=1)
    text = " ".join(f"Line {i}: the night bus to district {i} leaves at {i % 24}:15."
                    for i in range(150))
    receipt = await add_text(settings, text)
    with worker_processes(settings, 4):
        await wait_tasks(aredis, [receipt.task_id], timeout=180)
    writers = await tasks.part_workers(aredis, receipt.task_id)
    record = await tasks.get_task(aredis, receipt.task_id)
    assert len(writers) == record.total > 8
    assert fake_ollama.gathered, "no two parts were ever embedded at once"
    assert len(set(writers.values())) > 1, writers
    counts = await stored(settings)
    assert counts["ready"] == 1 and counts["chunks"] == counts["next"] + 1
