"""The vector caches (shared/embedding/vector_cache.py) against a real Redis: bounded by count
and by age, the newest kept, and a Redis that does not answer is a miss."""

from __future__ import annotations

import time

import numpy as np
import redis.asyncio

from tests.conftest import make_settings
from tests.support.graph import stored
from tests.support.workers import add_text, run_workers
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.embedding import vector_cache
from zapomni.shared.embedding.embed import CachedEmbedder
from zapomni.shared.embedding.embed_ollama import OllamaEmbedder
from zapomni.shared.embedding.vector_cache import VectorCache
from zapomni.workers import resources

MODEL = "ollama:nomic-embed-text"


def vectors(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 8), dtype=np.float32)


async def kept(client: redis.asyncio.Redis, cache: VectorCache) -> set[str]:
    """The digests of the vectors stored under the cache's prefix and model."""
    keys = await client.keys(f"{cache.prefix}:{cache.model}:*")
    return {key.decode().rsplit(":", 1)[1] for key in keys}


async def test_a_cache_keeps_its_newest_vectors_up_to_its_limit(aredis):
    cache = VectorCache("zapomni:emb", MODEL, ttl=3600, limit=4)
    older, newer = ["one", "two", "three"], ["four", "five", "six"]
    await vector_cache.write(aredis, cache, older, vectors(3, seed=1))
    await vector_cache.write(aredis, cache, newer, vectors(3, seed=2))
    names = await kept(aredis, cache)
    assert len(names) == 4 and await aredis.zcard(cache.index) == 4
    assert {vector_cache.digest(t) for t in newer} <= names
    found = await vector_cache.read(aredis, cache, newer + ["seven"])
    assert [np.frombuffer(raw, dtype=np.float32).tolist() for raw in found[:3]] \
        == vectors(3, seed=2).tolist()
    assert found[3] is None
    assert 0 < await aredis.ttl(cache.index) <= 3600


async def test_a_lowered_limit_drops_the_surplus_on_the_next_write(aredis):
    roomy = VectorCache("zapomni:qemb", MODEL, ttl=3600, limit=100)
    texts = [f"question {i}" for i in range(30)]
    await vector_cache.write(aredis, roomy, texts, vectors(30))
    tight = VectorCache("zapomni:qemb", MODEL, ttl=3600, limit=5)
    await vector_cache.write(aredis, tight, ["question 30"], vectors(1))
    assert len(await kept(aredis, tight)) == 5 and await aredis.zcard(tight.index) == 5
    assert vector_cache.digest("question 30") in await kept(aredis, tight)


async def test_entries_past_their_age_leave_the_index(aredis):
    cache = VectorCache("zapomni:emb", MODEL, ttl=3600, limit=100)
    # a vector written two hours ago: Redis has expired its key, its index entry remains
    await aredis.zadd(cache.index, {"0" * 32: time.time() - 7200})
    await vector_cache.write(aredis, cache, ["fresh"], vectors(1))
    assert await aredis.zrange(cache.index, 0, -1) == [vector_cache.digest("fresh").encode()]


async def test_a_redis_that_does_not_answer_is_a_miss_not_an_error():
    client = redis.asyncio.Redis(port=free_port(), socket_connect_timeout=1)
    cache = VectorCache("zapomni:emb", MODEL, ttl=3600, limit=10)
    try:
        assert await vector_cache.read(client, cache, ["a", "b"]) == [None, None]
        await vector_cache.write(client, cache, ["a"], vectors(1))  # does not raise
    finally:
        await client.aclose()


async def test_the_chunk_cache_embeds_only_what_it_does_not_hold(aredis, fake_ollama):
    inner = OllamaEmbedder(fake_ollama.url, "nomic-embed-text")
    embedder = CachedEmbedder(inner, aredis, ttl_seconds=3600, limit=3)
    try:
        await embedder.embed(["alpha"])
        first = await embedder.embed(["beta", "gamma", "delta"])  # alpha, the oldest, goes
        fake_ollama.reset_counts()
        again = await embedder.embed(["beta", "gamma", "delta", "alpha"])
    finally:
        await embedder.aclose()
    assert fake_ollama.texts == 1  # alpha alone was embedded again
    assert np.allclose(again[:3], first, atol=1e-6)
    assert await aredis.zcard(f"zapomni:emb:index:{MODEL}") == 3


async def test_workers_keep_at_most_cache_max_chunk_vectors(falkordb_url, fake_ollama,
                                                            aredis, monkeypatch):
    monkeypatch.setattr(resources, "CACHE_MAX", 3)
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=48)
    text = " ".join(f"Cached sentence {i} about lighthouses." for i in range(30))
    await add_text(settings, text)
    await run_workers(settings)
    assert (await stored(settings))["ready"] == 1
    assert fake_ollama.texts > 10  # many chunks were embedded ...
    assert len(await aredis.keys(f"zapomni:emb:{MODEL}:*")) == 3  # ... three are kept
