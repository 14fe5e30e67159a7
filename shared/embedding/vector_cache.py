"""Vectors cached in Redis by model + text, bounded by age and by count.

One key per vector, ``{prefix}:{model}:{digest}`` (``digest``: the text's SHA-256, 32 hex
digits), with a TTL; beside them one sorted set, ``{prefix}:index:{model}``, of the digests
by write time. A write that takes the set past ``limit`` drops the oldest vectors, so a cache
holds at most ``limit`` vectors (1.8 KB each at 384 dimensions, key and index entry included:
`./dev bench vector_cache`) however much is ingested.
A Redis that does not answer is a miss, never an error: the cache only saves embedding work.

Two caches use it: the workers' chunk vectors (``zapomni:emb``) and the query service's
question vectors (``zapomni:qemb``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from redis.asyncio import Redis
from redis.exceptions import RedisError

TRIM_BATCH = 1000  # vectors dropped per Redis call when a cache is over its limit


@dataclass(frozen=True)
class VectorCache:
    prefix: str  # "zapomni:emb" or "zapomni:qemb"
    model: str  # the embedder's name: vectors of two models never mix
    ttl: int  # seconds a vector is kept
    limit: int  # vectors kept at most

    @property
    def index(self) -> str:
        return f"{self.prefix}:index:{self.model}"

    def key(self, digest: str) -> str:
        return f"{self.prefix}:{self.model}:{digest}"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


async def read(redis: Redis, cache: VectorCache, texts: Sequence[str]) -> list[bytes | None]:
    """Each text's cached vector (float32 bytes), or None."""
    if not texts:
        return []
    try:
        return list(await redis.mget([cache.key(digest(t)) for t in texts]))
    except RedisError:
        return [None] * len(texts)


async def write(redis: Redis, cache: VectorCache, texts: Sequence[str],
                vectors: np.ndarray) -> None:
    """Keep these vectors, then drop the oldest while the cache holds more than its limit."""
    if not texts:
        return
    now = time.time()
    digests = [digest(t) for t in texts]
    with contextlib.suppress(RedisError):
        async with redis.pipeline(transaction=False) as pipe:
            for name, vector in zip(digests, vectors, strict=True):
                pipe.set(cache.key(name), vector.astype(np.float32).tobytes(), ex=cache.ttl)
            pipe.zadd(cache.index, dict.fromkeys(digests, now))
            pipe.zremrangebyscore(cache.index, "-inf", now - cache.ttl)  # expired keys
            pipe.expire(cache.index, cache.ttl)  # the index goes with its last vector
            pipe.zcard(cache.index)
            count = int((await pipe.execute())[-1])
        await trim(redis, cache, count - cache.limit)


async def trim(redis: Redis, cache: VectorCache, over: int) -> None:
    """Drop the ``over`` oldest vectors, a batch per call (workers racing here may each drop
    some: the cache then holds a little less than its limit, never more for long)."""
    while over > 0:
        oldest = await redis.zpopmin(cache.index, min(over, TRIM_BATCH))
        if not oldest:
            return
        await redis.delete(*(cache.key(name.decode()) for name, _ in oldest))
        over -= len(oldest)
