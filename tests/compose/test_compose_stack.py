"""compose.yaml started for real: the README's `up --build --scale worker=4` with the variables
it exports, on a Docker engine of the tests' own (tests/compose/conftest.py), driven through the
published port by fastmcp's client with the token, scaled down and up, broken on purpose (a
worker SIGKILLed mid-document, FalkorDB and Redis restarted mid-ingest), taken down and up.
Grafana and Ollama do not run here (no image of either can be had): the services embed with
the in-process model (tests/compose/override.yaml); Grafana's queries are checked against a
real Prometheus in tests/e2e/test_prometheus.py.

Every test starts from the stack with 4 workers (``four_workers``) and writes its own
namespace, so each stands alone on the module's one stack."""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import secrets
import socket
import subprocess

import httpx2
import pytest
import redis
import redis.asyncio
from fastmcp import Client

from tests.support.compose_cli import ComposeStack
from tests.support.graph import stored
from tests.support.mcp import call
from tests.support.waiting import eventually
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks
from zapomni.shared.text.chunking import chunker_for
from zapomni.workers.arq_internals import lease_key

pytestmark = [pytest.mark.compose, pytest.mark.timeout(3600)]  # a cold first build: ~15 min
WORKERS = 4
ENDED = tuple(tasks.TERMINAL)
# waits: generous, for a 2-core machine shared with other work; each fails saying what it
# waited for
LONG = 1800.0
CONSONANTS = "bcdfghjkmnpqrtvwxz"  # code words no stemmer folds into one another


def codeword(i: int) -> str:
    return "quorv" + CONSONANTS[i // len(CONSONANTS)] + CONSONANTS[i % len(CONSONANTS)]


def document(topic: str, size: int = 1_000_000) -> tuple[str, str]:
    """About ``size`` characters of plain sentences (a 1 MB one: ~2,000 chunks, ~63 parts),
    with one needle sentence in the middle."""
    people = ["Marta", "Jonas", "Ilse", "Tomasz", "Greta", "Anselm", "Oona", "Pavel", "Lidia"]
    verbs = ["carried", "painted", "repaired", "counted", "weighed", "polished", "sorted"]
    things = ["lantern", "ledger", "crate", "bell", "anchor", "kettle", "banner", "compass",
              "barrel", "rope", "ladder", "clock", "mirror"]
    places = ["harbour", "depot", "library", "station", "market", "bridge", "quarry", "mill",
              "chapel", "garden", "tower", "bakery", "forge", "school", "orchard", "ferry"]
    times = ["at dawn", "before noon", "after lunch", "in the evening", "at dusk",
             "late at night", "on a rainy morning", "on a windy day", "in the first frost"]
    lines, length = [], 0
    for who, did, what, where, when in itertools.product(people, verbs, things, places, times):
        lines.append(f"In the {topic} archive, {who} {did} the old {what} near the {where} "
                     f"{when}.")
        length += len(lines[-1]) + 1
        if length >= size:
            break
    assert length >= size
    needle = f"The {topic} vault code is written on the underside of the oak drawer."
    lines.insert(len(lines) // 2, needle)
    return "\n".join(lines), needle


def fresh(name: str) -> str:
    """A namespace of this test's own, also when it runs again on the same stack."""
    return f"{name}-{secrets.token_hex(4)}"


def ip_of(container: dict) -> str:
    [network] = container["NetworkSettings"]["Networks"].values()
    return network["IPAddress"]


def client(stack: ComposeStack) -> Client:
    return Client(stack.mcp_url, auth=stack.token, timeout=120)


async def ready(stack: ComposeStack, workers: int) -> None:
    """The front answers at its published port and ``workers`` workers are alive."""
    async def healthz() -> int:
        try:
            async with httpx2.AsyncClient() as http:
                url = stack.mcp_url.removesuffix("/mcp") + "/healthz"
                return (await http.get(url, timeout=5)).status_code
        except httpx2.HTTPError:
            return 0

    await eventually(healthz, lambda code: code == 200, "the front at its published port",
                     timeout=600, every=1)
    async with client(stack) as mcp:
        await eventually(lambda: call(mcp, "get_stats"),
                         lambda s: s["workers_alive"] == workers,
                         f"{workers} workers alive", timeout=600, every=1)
    assert len(stack.containers("worker")) == workers


@pytest.fixture
async def four_workers(stack: ComposeStack) -> ComposeStack:
    stack.up(WORKERS)  # nothing changes if the stack already runs so
    await ready(stack, WORKERS)
    return stack


async def add(mcp: Client, **arguments) -> dict:
    """add_memory as a client that heeds the front's answer: a refusal that says to retry is
    tried again, a few seconds later (on a loaded machine a Redis round trip can pass the
    front's timeout); any other error fails the test."""
    for _ in range(5):
        answer = await mcp.call_tool("add_memory", arguments, raise_on_error=False)
        if not answer.is_error:
            return answer.structured_content
        assert "retry" in answer.content[0].text.lower(), answer.content[0].text
        await asyncio.sleep(3)
    raise AssertionError(f"add_memory refused 5 times: {answer.content[0].text}")


async def ended(mcp: Client, task_id: str, timeout: float = LONG) -> dict:
    return await eventually(lambda: call(mcp, "graph_status", task_id=task_id),
                            lambda s: s["state"] in ENDED, f"task {task_id} to end",
                            timeout=timeout, every=0.5)


async def nothing_pending(mcp: Client, namespace: str) -> dict:
    """No task of the namespace queued or running any more (the graph tasks included)."""
    stats = await eventually(lambda: call(mcp, "get_stats", namespace=namespace),
                             lambda s: s["tasks"]["queued"] == s["tasks"]["running"] == 0
                             and s["memories_ingesting"] == 0,
                             f"every task of {namespace} to end", timeout=LONG, every=1)
    return stats


def queue(settings: Settings) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(settings.redis_url)


def host_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback (its uplink, Docker's bridges)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    addresses = [line.split()[3].split("/")[0] for line in out.splitlines()]
    return [a for a in addresses if not ipaddress.ip_address(a).is_loopback]


def answers(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(5)
        return sock.connect_ex((host, port)) == 0


async def test_only_the_front_and_prometheus_publish_and_only_on_loopback(four_workers):
    stack = four_workers
    published = {}
    for container in stack.containers():
        service = container["Config"]["Labels"]["com.docker.compose.service"]
        for bindings in (container["NetworkSettings"]["Ports"] or {}).values():
            for binding in bindings or []:  # None: exposed inside the network only
                published.setdefault(service, set()).add(
                    (binding["HostIp"], int(binding["HostPort"])))
    assert published == {"mcp": {("127.0.0.1", stack.mcp_port)},
                         "prometheus": {("127.0.0.1", stack.prometheus_port)}}, published
    for address in host_addresses():  # loopback only: not on any other address of the host
        for port in (stack.mcp_port, stack.prometheus_port):
            assert not answers(address, port), (address, port)

    # the front: nothing without its token, or with another
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "stranger", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        for auth in ({}, {"Authorization": "Bearer not-the-token"}):
            refused = await http.post(stack.mcp_url, json=initialize,
                                      headers={**headers, **auth}, timeout=30)
            assert refused.status_code == 401, refused.text
        # inside the network too, Redis, FalkorDB and the query service ask for credentials
        refused = await http.post(f"http://{stack.address('query')}:8766/v1/stats", json={},
                                  timeout=30)
        assert refused.status_code == 401, refused.text
    for service in ("redis", "falkordb"):
        stranger = redis.Redis(host=stack.address(service), socket_timeout=10)
        try:
            with pytest.raises(redis.exceptions.AuthenticationError):
                stranger.ping()
        finally:
            stranger.close()
    async with client(stack) as mcp:  # and with the token the front answers
        assert (await call(mcp, "get_stats"))["workers_alive"] == WORKERS


async def test_four_workers_share_200_memories_and_a_1_mb_document(four_workers):
    stack, namespace = four_workers, fresh("shared")
    texts = [f"Note {i}: the courier left parcel {codeword(i)} at the north gate before noon."
             for i in range(200)]
    text, needle = document("Harbour")
    async with client(stack) as mcp:
        notes = []
        for start in range(0, len(texts), 10):
            notes += await asyncio.gather(*(add(mcp, text=t, namespace=namespace)
                                            for t in texts[start:start + 10]))
        big = await add(mcp, text=text, namespace=namespace)
        assert not any(r["duplicate"] for r in [*notes, big])

        # graph_status shows the document landing part by part
        landing = await eventually(lambda: call(mcp, "graph_status", task_id=big["task_id"]),
                                   lambda s: s["progress"]["done"] > 0 or s["state"] in ENDED,
                                   "the document's first part", timeout=LONG, every=0.2)
        assert landing["state"] == "running", landing
        assert 0 < landing["progress"]["done"] < landing["progress"]["total"], landing
        finished = await ended(mcp, big["task_id"])
        assert finished["state"] == "done", finished
        assert finished["progress"]["done"] == finished["progress"]["total"] > 20, finished
        for note in notes:
            assert (await ended(mcp, note["task_id"]))["state"] == "done"

        # all searchable
        for i, note in enumerate(notes):
            hits = await call(mcp, "search_memory", query=codeword(i), mode="keyword",
                              namespace=namespace, limit=3)
            assert hits["results"], f"keyword search for {codeword(i)} found nothing: {hits}"
            assert hits["results"][0]["memory_id"] == note["memory_id"], (i, hits["results"])
        hits = await call(mcp, "search_memory", query=needle, namespace=namespace)
        assert hits["results"], f"search for the needle found nothing: {hits}"
        assert hits["results"][0]["memory_id"] == big["memory_id"], hits["results"][:2]
        assert needle in hits["results"][0]["text"]

    # the document's parts were written by 3 replicas or more (task records name the worker:
    # the container's hostname and the process id)
    settings = stack.settings()
    client_ = queue(settings)
    try:
        writers = await tasks.part_workers(client_, big["task_id"])
    finally:
        await client_.aclose()
    replicas = {name.rsplit("-", 1)[0] for name in writers.values()}
    assert len(writers) == finished["progress"]["total"], writers
    assert replicas <= set(stack.worker_names()), (replicas, stack.worker_names())
    by_replica = {r: sum(n.rsplit("-", 1)[0] == r for n in writers.values()) for r in replicas}
    stack.note(f"shared: the 1 MB document's {len(writers)} parts by replica: {by_replica}")
    assert len(replicas) >= 3, f"the document's parts by replica: {writers}"

    # and every replica embedded chunks: its own metrics, scraped by compose's Prometheus
    workers = {f"{ip_of(c)}:9464" for c in stack.containers("worker")}
    async with httpx2.AsyncClient(base_url=stack.prometheus_url) as http:
        async def embedded() -> dict[str, float]:
            answer = (await http.get("/api/v1/query", timeout=30, params={
                "query": 'zapomni_chunks_embedded_total{job="zapomni-worker"}'})).json()
            return {r["metric"]["instance"]: float(r["value"][1])
                    for r in answer["data"]["result"]}

        seen = await eventually(embedded, lambda by: workers <= {i for i, v in by.items() if v},
                                "chunks embedded by each of the 4 replicas", timeout=300,
                                every=2)
    assert sum(seen[i] for i in workers) >= finished["progress"]["total"] + len(notes)


async def worker_targets(stack: ComposeStack) -> dict[str, list[dict]]:
    async with httpx2.AsyncClient(base_url=stack.prometheus_url) as http:
        answer = (await http.get("/api/v1/targets", params={"state": "active"},
                                 timeout=30)).json()
    by_job: dict[str, list[dict]] = {}
    for target in answer["data"]["activeTargets"]:
        by_job.setdefault(target["labels"]["job"], []).append(target)
    return by_job


async def targets_follow(stack: ComposeStack, workers: int) -> None:
    """Prometheus scrapes exactly the running worker replicas, found by DNS, all up, and the
    front and the query service."""
    replicas = {f"{ip_of(c)}:9464" for c in stack.containers("worker")}
    assert len(replicas) == workers

    def right(by_job: dict[str, list[dict]]) -> bool:
        found = by_job.get("zapomni-worker", [])
        return ({t["labels"]["instance"] for t in found} == replicas
                and all(t["health"] == "up" for t in found)
                and all(t["discoveredLabels"].get("__meta_dns_name") == "worker" for t in found)
                and all(len(by_job.get(job, [])) == 1 and by_job[job][0]["health"] == "up"
                        for job in ("zapomni-mcp", "zapomni-query")))

    await eventually(lambda: worker_targets(stack), right,
                     f"Prometheus to scrape the {workers} worker replicas {sorted(replicas)}",
                     timeout=600, every=2)


async def test_prometheus_finds_the_replicas_by_dns_as_they_scale(four_workers):
    stack = four_workers
    await targets_follow(stack, 4)
    stack.up(2)
    await ready(stack, 2)
    await targets_follow(stack, 2)
    stack.up(4)
    await ready(stack, 4)
    await targets_follow(stack, 4)


async def test_a_worker_killed_mid_document_loses_and_doubles_nothing(four_workers):
    stack, namespace = four_workers, fresh("killed")
    text, needle = document("Quarry")
    settings = stack.settings()
    aqueue = queue(settings)
    try:
        async with client(stack) as mcp:
            receipt = await add(mcp, text=text, namespace=namespace)
            task_id = receipt["task_id"]

            async def holder() -> tuple[int, str | None]:
                record = await tasks.get_task(aqueue, task_id)
                held = [await aqueue.get(key)
                        async for key in aqueue.scan_iter(match=lease_key(task_id + "*"))]
                names = [h.decode() for h in held if h and h != b"1"]
                return (record.done if record else 0), (names[0] if names else None)

            # SIGKILL a worker while it holds a part of the document, a few parts in
            done, name = await eventually(holder, lambda seen: seen[0] >= 2 and seen[1],
                                          "a worker holding a part, 2 parts in",
                                          timeout=LONG, every=0.2)
            victim = stack.worker_names()[name.rsplit("-", 1)[0]]
            stack.docker("kill", victim)  # SIGKILL
            [killed] = json.loads(stack.docker("inspect", victim))
            assert not killed["State"]["Running"], killed["State"]
            finished = await ended(mcp, task_id)
            assert finished["state"] == "done", finished
            total = finished["progress"]["total"]
            assert 2 <= done < total and finished["progress"]["done"] == total, finished
            stats = await nothing_pending(mcp, namespace)
            stack.note(f"killed: {name} SIGKILLed after part {done} of {total}; "
                       f"tasks afterwards {stats['tasks']}")
            assert stats["tasks"]["failed"] == stats["tasks"]["cancelled"] == 0, stats
            hits = await call(mcp, "search_memory", query=needle, namespace=namespace)
            assert hits["results"][0]["memory_id"] == receipt["memory_id"]
        writers = await tasks.part_workers(aqueue, task_id)
        assert sorted(writers) == list(range(total)), writers  # each part once
    finally:
        await aqueue.aclose()

    # nothing half-written: one ready memory, each chunk once, linked in one chain
    counts = await stored(settings, namespace)
    assert counts["memories"] == counts["ready"] == 1, counts
    assert counts["chunks"] == counts["has_chunk"] == counts["next"] + 1, counts
    assert counts["orphan_chunks"] == 0, counts
    assert counts["chunks"] == len(chunker_for(Settings()).split(text)), counts


async def test_falkordb_and_redis_restarted_mid_ingest_lose_nothing_accepted(four_workers):
    stack, namespace = four_workers, fresh("restarts")
    text, needle = document("Depot", size=200_000)
    accepted: list[tuple[str, dict]] = []
    refused: list[str] = []
    adding = asyncio.Event()
    async with client(stack) as mcp:
        big = await add(mcp, text=text, namespace=namespace)

        async def add_steadily() -> None:
            i = 0
            while not adding.is_set():
                note = f"Restart note {i}: shelf {codeword(i % 300)} holds box {i}."
                answer = await mcp.call_tool("add_memory", {"text": note,
                                                            "namespace": namespace},
                                             raise_on_error=False)
                if answer.is_error:
                    refused.append(answer.content[0].text)
                else:
                    accepted.append((note, answer.structured_content))
                i += 1
                await asyncio.sleep(0.1)

        async def how_many() -> int:
            return len(accepted)

        async def accepted_more(count: int) -> None:
            target = len(accepted) + count
            await eventually(how_many, lambda n: n >= target, f"{count} more adds accepted",
                             timeout=600, every=0.2)

        adder = asyncio.create_task(add_steadily())
        try:
            await accepted_more(20)
            await asyncio.to_thread(stack.restart, "falkordb")
            await accepted_more(20)
            await asyncio.to_thread(stack.restart, "redis")
            await accepted_more(20)
        finally:
            adding.set()
            await adder

        # every accepted add ends, done or saying why; each done one is stored, whole
        outcomes = [(note, await ended(mcp, receipt["task_id"])) for note, receipt in
                    [("", big), *accepted]]
        failed = [(note, s) for note, s in outcomes if s["state"] != "done"]
        stack.note(f"restarts: {len(outcomes)} adds accepted (the 200 kB document one), "
                   f"{len(outcomes) - len(failed)} done, {len(failed)} not; "
                   f"{len(refused)} refused while a store restarted")
        assert all(s["error"] for _, s in failed), failed
        assert not failed, f"{len(failed)} of {len(outcomes)} accepted adds failed: {failed[:3]}"
        for note, receipt in accepted:
            memory = await call(mcp, "get_memory", memory_id=receipt["memory_id"],
                                namespace=namespace)
            assert (memory["text"], memory["status"]) == (note, "ready"), memory
        hits = await call(mcp, "search_memory", query=needle, namespace=namespace)
        assert hits["results"][0]["memory_id"] == big["memory_id"]
        stats = await nothing_pending(mcp, namespace)
        stack.note(f"restarts: tasks afterwards {stats['tasks']}")
    # an add refused while Redis restarted says so and what to do
    assert all("retry" in message.lower() for message in refused), refused
    counts = await stored(stack.settings(), namespace)
    assert counts["memories"] == counts["ready"] == len(accepted) + 1, counts
    assert counts["orphan_chunks"] == 0 and counts["chunks"] == counts["has_chunk"], counts


async def test_down_and_up_with_the_volumes_kept_answers_the_same(four_workers):
    stack, namespace = four_workers, fresh("kept")
    facts = [f"Archive fact {i}: the {codeword(i + 100)} ledger sits on shelf {i}." for i in
             range(5)]
    query = f"which shelf holds the {codeword(102)} ledger?"
    async with client(stack) as mcp:
        for fact in facts:
            receipt = await add(mcp, text=fact, namespace=namespace)
            assert (await ended(mcp, receipt["task_id"]))["state"] == "done"
        before = await call(mcp, "search_memory", query=query, namespace=namespace)
    stack.down()
    assert stack.containers() == []
    stack.up(WORKERS)
    await ready(stack, WORKERS)
    async with client(stack) as mcp:
        after = await call(mcp, "search_memory", query=query, namespace=namespace)
    assert before["results"][0]["text"] == facts[2]
    assert [(r["memory_id"], r["chunk_id"], r["text"]) for r in after["results"]] == \
        [(r["memory_id"], r["chunk_id"], r["text"]) for r in before["results"]]
