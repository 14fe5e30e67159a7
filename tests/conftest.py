"""Fixtures shared by the integration and e2e tests: real servers, started once."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import secrets
from collections.abc import AsyncIterator, Iterator

import hypothesis
import pytest
import redis
import redis.asyncio

from tests.support.fake_ollama import FakeOllama
from tests.support.servers import ThreadedServer, falkordb_server
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.settings import Settings
from zapomni.workers import ingest

# no wall-clock limits in tests: hypothesis's 200 ms deadline per example failed a property
# test once on a loaded host (703 ms for a first example); the properties still hold
hypothesis.settings.register_profile("zapomni", deadline=None)
hypothesis.settings.load_profile("zapomni")

# glibc keeps the heap a test module freed; handing it back after each module keeps the one
# long pytest process lean (2026-11-27: seven integration files peaked at 986 MB without,
# 883 MB with a trim after every test; docs/testing.md)
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None)


@pytest.fixture(scope="module", autouse=True)
def heap_returned_after_each_module() -> Iterator[None]:
    yield
    gc.collect()
    if hasattr(_LIBC, "malloc_trim"):  # glibc only
        _LIBC.malloc_trim(0)


@pytest.fixture(scope="session")
def falkordb_url() -> Iterator[str]:
    with falkordb_server() as url:
        yield url


QUERY_SECRET = secrets.token_hex(16)


def make_settings(falkordb_url: str, **overrides) -> Settings:
    base = dict(
        redis_url=f"{falkordb_url}/0", falkordb_url=falkordb_url,
        query_url=f"http://127.0.0.1:{free_port()}", request_timeout=5.0, onnx_threads=2,
        query_secret=QUERY_SECRET,  # the front's credential on every call, as in compose
    )
    base.update(overrides)
    return Settings.from_env(environ={}, **base)


@pytest.fixture
def part_chunks(monkeypatch: pytest.MonkeyPatch):
    """Call with n: documents fan out into parts of n chunks (workers/ingest.py PART_CHUNKS,
    32) in this process's workers, so a test's document of a few dozen chunks has parts."""
    return lambda n: monkeypatch.setattr(ingest, "PART_CHUNKS", n)


@pytest.fixture
def settings(falkordb_url: str) -> Settings:
    """Settings against the test server, which is emptied before every test."""
    client = redis.Redis.from_url(falkordb_url)
    client.flushall()
    client.close()
    return make_settings(falkordb_url)


@pytest.fixture
async def aredis(settings: Settings) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def query_service(settings: Settings) -> Iterator[str]:
    """The real query service (uvicorn + Starlette) on settings.query_url."""
    port = int(settings.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(settings), port=port) as server:
        yield server.url


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    fake = FakeOllama()
    with ThreadedServer(fake.app) as server:
        fake.url = server.url
        yield fake
