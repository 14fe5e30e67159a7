"""compose.yaml's topology as plain processes: a Redis of its own as the queue, FalkorDB as the
store, the query service, four workers and the MCP front, each with the environment compose
gives its service (addresses pointed at loopback, the passwords and the query service's
credential filled in). Redis and FalkorDB refuse a client without their password and the
query service a call without the front's credential. One large document fans out over the
workers, more than one of them writes its parts, it is found by search (by a token scoped to
its namespace), and neither server holds what belongs to the other."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx2
import pytest
import redis
import redis.asyncio
from fastmcp import Client

from tests.support.compose import interpolate, services
from tests.support.fake_ollama import FakeOllama
from tests.support.mcp import answer, call
from tests.support.servers import ThreadedServer
from tests.support.waiting import eventually
from tests.support.workers import wait_tasks
from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    server_command,
    stop_process,
    wait_for_server,
)
from zapomni.shared.tasks import tasks

BIN = Path(sys.executable).parent
WORKERS = 4
NEEDLE = "The lighthouse on Skarv island is painted with red and white bands."
INSTALL = ("redis-server is not installed: this test runs a plain Redis as the queue, as "
           "compose does. Install it (Debian/Ubuntu: apt-get install redis-server) and run "
           "again; .ci/run installs it when missing")


def compose_env(service: str, values: dict[str, str], hosts: dict[str, str]) -> dict[str, str]:
    """compose.yaml's environment for ``service``: ``${NAME:-default}`` and ``${NAME:?...}``
    from ``values`` (else the default), service addresses (``redis:6379``, after a URL's
    password too) from ``hosts``, and 0.0.0.0 binds as loopback."""
    out = {}
    for name, value in services()[service]["environment"].items():
        value = interpolate(str(value or ""), values)
        value = re.sub(r"(?<=[/@])([\w-]+:\d+)", lambda m: hosts.get(m.group(1), m.group(1)),
                       value)
        out[name] = "127.0.0.1" if value == "0.0.0.0" else value
    return out


def compose_command(service: str, values: dict[str, str]) -> list[str]:
    return [interpolate(part, values) for part in services()[service]["command"]]


@contextmanager
def queue_redis(work: Path, values: dict[str, str]) -> Iterator[int]:
    """A plain redis-server (not FalkorDB) on a free port, as compose's `redis` service runs
    it (its command: AOF and the password)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(INSTALL, pytrace=False)
    port = free_port()
    args = compose_command("redis", values)[1:]
    assert "--requirepass" in args
    process = subprocess.Popen([binary, *args, "--port", str(port), "--bind", "127.0.0.1",
                                "--dir", str(work), "--appendonly", "no"],
                               stdout=subprocess.DEVNULL)
    try:
        wait_for_server(port, process, timeout=60, password=values["REDIS_PASSWORD"])
        yield port
    finally:
        stop_process(process)


@contextmanager
def store_falkordb(work: Path, values: dict[str, str]) -> Iterator[int]:
    """The FalkorDB server with the password compose's REDIS_ARGS give it."""
    port = free_port()
    args = interpolate(services()["falkordb"]["environment"]["REDIS_ARGS"], values).split()
    password = args[args.index("--requirepass") + 1]
    command = server_command(ensure_binaries(), port, work / "falkordb", persistent=False)
    (work / "falkordb").mkdir()
    process = subprocess.Popen([*command, "--requirepass", password],
                               stdout=subprocess.DEVNULL)
    try:
        wait_for_server(port, process, timeout=60, password=password)
        yield port
    finally:
        stop_process(process)


@contextmanager
def service(name: str, env: dict[str, str], logs: Path) -> Iterator[subprocess.Popen]:
    """compose's ``command`` for the service (the installed entry point), with its env."""
    with (logs / f"{name}.log").open("wb") as out:
        process = subprocess.Popen([str(BIN / name.split("#")[0])], stdout=out,
                                   stderr=subprocess.STDOUT,
                                   env={**os.environ, **env})
    try:
        yield process
    finally:
        stop_process(process, timeout=30)


def document() -> str:
    """~170 kB: at compose's defaults (256-token chunks, 32 per part) five parts or more."""
    lines = [f"Line {i}: the night bus to district {i} leaves stop {i % 97} at {i % 24}:15 "
             f"and reaches the ferry pier {i % 13} minutes later." for i in range(2600)]
    lines.insert(1300, NEEDLE)
    return "\n".join(lines)


async def wait_ready(url: str, what: str) -> None:
    async def status() -> int:
        try:
            async with httpx2.AsyncClient() as http:
                return (await http.get(url, timeout=2)).status_code
        except httpx2.HTTPError:
            return 0

    await eventually(status, lambda code: code == 200, what, timeout=180, every=0.3)


def keys_by_type(client: redis.Redis) -> dict[str, str]:
    try:
        return {key.decode(): client.type(key).decode()
                for key in client.scan_iter(count=1000)}
    finally:
        client.close()


@pytest.mark.timeout(900)  # 6 processes start, ~170 chunks embedded and written
async def test_compose_topology_with_four_workers_shares_one_document(tmp_path):
    ollama, token, scoped = FakeOllama(), secrets.token_urlsafe(32), secrets.token_hex(24)
    values = {"ZAPOMNI_MCP_TOKEN": token, "ZAPOMNI_QUERY_SECRET": secrets.token_hex(32),
              "REDIS_PASSWORD": secrets.token_hex(32),
              "FALKORDB_PASSWORD": secrets.token_hex(32),
              "ZAPOMNI_MCP_TOKENS": json.dumps({scoped: {"namespaces": ["default"]}})}
    query_port, mcp_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="zapomni-compose-", dir=tmp_path))
    with ExitStack() as stack:
        values["ZAPOMNI_OLLAMA_URL"] = ollama.url = stack.enter_context(
            ThreadedServer(ollama.app)).url
        queue_port = stack.enter_context(queue_redis(work, values))
        store_port = stack.enter_context(store_falkordb(work, values))
        hosts = {"redis:6379": f"127.0.0.1:{queue_port}",
                 "falkordb:6379": f"127.0.0.1:{store_port}",
                 "query:8766": f"127.0.0.1:{query_port}"}
        ports = {"query": {"ZAPOMNI_QUERY_PORT": str(query_port)},
                 "mcp": {"ZAPOMNI_MCP_PORT": str(mcp_port)},
                 "worker": {"ZAPOMNI_WORKER_METRICS_PORT": "0"}}  # one port each in compose
        env = {name: {**compose_env(name, values, hosts), **ports[name]} for name in ports}
        assert env["worker"]["ZAPOMNI_REDIS_URL"] == \
            f"redis://:{values['REDIS_PASSWORD']}@127.0.0.1:{queue_port}/0"
        assert env["worker"]["ZAPOMNI_FALKORDB_URL"] == \
            f"redis://:{values['FALKORDB_PASSWORD']}@127.0.0.1:{store_port}"
        assert env["query"]["ZAPOMNI_QUERY_SECRET"] == env["mcp"]["ZAPOMNI_QUERY_SECRET"]
        assert "ZAPOMNI_QUERY_SECRET" not in env["worker"]
        stack.enter_context(service("zapomni-query", env["query"], work))
        for i in range(WORKERS):
            stack.enter_context(service(f"zapomni-worker#{i}", env["worker"], work))
        stack.enter_context(service("zapomni-mcp", env["mcp"], work))
        await wait_ready(f"http://127.0.0.1:{query_port}/readyz", "the query service")
        await wait_ready(f"http://127.0.0.1:{mcp_port}/healthz", "the MCP front")
        await check_closed(queue_port, store_port, query_port)
        queue = redis.asyncio.Redis(port=queue_port, password=values["REDIS_PASSWORD"])
        try:
            await check_one_document(f"http://127.0.0.1:{mcp_port}/mcp", token, scoped, queue)
        finally:
            await queue.aclose()
        check_keys(redis.Redis(port=queue_port, password=values["REDIS_PASSWORD"]),
                   redis.Redis(port=store_port, password=values["FALKORDB_PASSWORD"]))


async def check_closed(queue_port: int, store_port: int, query_port: int) -> None:
    """Without the password or the front's credential, nothing answers."""
    for port in (queue_port, store_port):
        stranger = redis.Redis(port=port)
        try:
            with pytest.raises(redis.exceptions.AuthenticationError):
                stranger.ping()
        finally:
            stranger.close()
    async with httpx2.AsyncClient() as http:
        refused = await http.post(f"http://127.0.0.1:{query_port}/v1/stats", json={})
    assert refused.status_code == 401, refused.text


async def check_one_document(url: str, token: str, scoped: str,
                             queue: redis.asyncio.Redis) -> None:
    async with Client(url, auth=token) as client:
        await eventually(lambda: _stats(client), lambda s: s["workers_alive"] == WORKERS,
                         f"{WORKERS} workers alive", timeout=180, every=0.5)
        receipt = await answer(client, "add_memory", {"text": document()})
        await wait_tasks(queue, [receipt["task_id"]], timeout=600)
        writers = await tasks.part_workers(queue, receipt["task_id"])
        record = await tasks.get_task(queue, receipt["task_id"])
        assert len(writers) == record.total >= 4, (writers, record)
        assert len(set(writers.values())) > 1, f"one worker wrote every part: {writers}"
    async with Client(url, auth=scoped) as reader:  # a read-only token of this namespace
        found = await answer(reader, "search_memory", {"query": NEEDLE})
        assert found["results"][0]["memory_id"] == receipt["memory_id"], found


async def _stats(client: Client) -> dict:
    return await call(client, "get_stats")


def check_keys(queue_client: redis.Redis, store_client: redis.Redis) -> None:
    """The queue Redis holds the queue and task records, no graph; the store holds graphs
    and nothing of the queue's."""
    queue, store = keys_by_type(queue_client), keys_by_type(store_client)
    assert queue and store
    assert "graphdata" not in queue.values(), queue
    assert any(key.startswith("arq:") for key in queue), queue
    assert any(key.startswith("zapomni:task:") for key in queue), queue
    assert not [k for k in store if k.startswith(("arq:", "zapomni:task:"))], store
    assert "graphdata" in store.values(), store
