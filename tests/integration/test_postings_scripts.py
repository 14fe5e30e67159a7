"""Each of the keyword postings' scripts (shared/store/*.lua) run alone against a real server:
what it writes, what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import redis.asyncio

from zapomni.shared.store import postings
from zapomni.shared.store.postings import RECORD, SLOT

P = "{zapomni:ns:s}:kw:"
KEYS = [P + key for key in postings.KEYS]


@pytest.fixture
async def raw(settings):
    client = redis.asyncio.Redis.from_url(settings.falkordb_url)
    yield client
    await client.aclose()


async def run(raw, name: str, args: list, keys: list[str] | None = None):
    return await raw.register_script(postings.SCRIPTS[name])(keys=keys or KEYS, args=args)


def claim_args(*chunks: tuple[str, int, str]) -> list:
    return [SLOT, *(part for chunk in chunks for part in chunk)]


async def test_claim_numbers_once_counts_once_and_takes_freed_numbers_first(raw):
    out = await run(raw, "postings_claim", claim_args(("m:0", 5, "fox den"), ("m:1", 3, "fox")))
    assert out == [1, 1, 2, 1]
    assert await raw.hgetall(P + "df") == {b"fox": b"2", b"den": b"1"}
    assert await raw.get(P + "words") == b"8"
    assert await raw.hgetall(P + "pend") == {b"1": b"5 fox den", b"2": b"3 fox"}
    table = await raw.get(P + "chunks")
    assert table[SLOT : SLOT + 3] == b"m:0" and table[2 * SLOT : 2 * SLOT + 3] == b"m:1"
    assert await raw.hget(P + "stats", "live") == b"3"
    await raw.hdel(P + "pend", 1, 2)  # settled
    # numbered before: the same numbers, nothing counted again
    assert await run(raw, "postings_claim", claim_args(("m:0", 5, "fox den"))) == [1, 0]
    assert await raw.hgetall(P + "df") == {b"fox": b"2", b"den": b"1"}
    await raw.rpush(P + "free", 7)
    assert await run(raw, "postings_claim", claim_args(("n:0", 1, "owl"))) == [7, 1]
    assert await run(raw, "postings_claim", claim_args(("n:1", 1, "owl"))) == [3, 1]


async def test_claim_takes_over_an_unsettled_claim(raw):
    assert await run(raw, "postings_claim", claim_args(("m:0", 5, "fox den"))) == [1, 1]
    # another writer of the same chunk before the first settled: a new number, the old one
    # forgotten by the stems kept with it and its records counted as junk
    assert await run(raw, "postings_claim", claim_args(("m:0", 4, "fox cub"))) == [2, 1]
    assert await raw.hgetall(P + "df") == {b"fox": b"1", b"cub": b"1"}
    assert await raw.get(P + "words") == b"4"
    assert await raw.getbit(P + "dead", 1) == 1
    assert await raw.hgetall(P + "pend") == {b"2": b"4 fox cub"}
    assert await raw.hgetall(P + "junk") == {b"fox": b"1", b"den": b"1"}
    assert await raw.hmget(P + "stats", ["live", "junk", "dead"]) == [b"2", b"2", b"1"]


async def test_append_refuses_a_write_whose_number_was_taken(raw):
    await run(raw, "postings_claim", claim_args(("m:0", 5, "fox"), ("m:1", 3, "fox")))
    record = np.array([(1, 1, 5)], RECORD).tobytes()
    keys = [P + "seqof", P + "junk", P + "stats", P + "t:fox"]
    assert await run(raw, "postings_append", [2, "m:0", 1, "m:1", 9, 0, record],
                     keys) == [0, 2]
    assert await raw.get(P + "t:fox") is None
    assert await run(raw, "postings_append", [1, "m:0", 1, 1, 1, "fox", 1, record],
                     keys) == [1]
    assert await raw.get(P + "t:fox") == record
    assert await raw.hget(P + "junk", "fox") == b"1"  # one record repeated
    assert await raw.hget(P + "stats", "junk") == b"1"


async def test_settle_keeps_what_was_written_and_forgets_the_rest(raw):
    await run(raw, "postings_claim", claim_args(("m:0", 5, "fox den"), ("m:1", 3, "fox")))
    # m:1 was not written; a third claim is not this writer's any more (its number differs)
    assert await run(raw, "postings_forget", ["settle", "m:0", 1, 1, "m:1", 2, 0,
                                              "m:0", 9, 0]) == 1
    assert await raw.hgetall(P + "pend") == {}
    assert await raw.hgetall(P + "seqof") == {b"m:0": b"1"}
    assert await raw.hgetall(P + "df") == {b"fox": b"1", b"den": b"1"}
    assert await raw.get(P + "words") == b"5"
    assert await raw.getbit(P + "dead", 2) == 1 and await raw.getbit(P + "dead", 1) == 0
    # settled claims are not forgotten by a late settle that says "not written"
    assert await run(raw, "postings_forget", ["settle", "m:0", 1, 0]) == 0
    assert await raw.hgetall(P + "seqof") == {b"m:0": b"1"}


async def test_forget_uncounts_once(raw):
    await run(raw, "postings_claim", claim_args(("m:0", 5, "fox den"), ("m:1", 3, "fox")))
    assert await run(raw, "postings_forget", ["read", "m:0", 5, "fox den"]) == 1
    assert await run(raw, "postings_forget", ["read", "m:0", 5, "fox den"]) == 0
    assert await raw.hgetall(P + "df") == {b"fox": b"1"}
    assert await raw.get(P + "words") == b"3"
    assert await raw.hgetall(P + "pend") == {b"2": b"3 fox"}
    assert await raw.hgetall(P + "junk") == {b"fox": b"1", b"den": b"1"}
    assert await raw.hmget(P + "stats", ["live", "junk", "dead"]) == [b"1", b"2", b"1"]


async def test_a_rewrite_keeps_what_was_appended_meanwhile_and_only_for_the_lock_holder(raw):
    old = np.array([(1, 1, 5), (2, 1, 5), (1, 1, 5)], RECORD).tobytes()
    await raw.set(P + "t:fox", old)
    await raw.hset(P + "junk", "fox", 3)
    await raw.hset(P + "stats", mapping={"junk": 5, "cursor": "0"})
    read = await run(raw, "compaction_read", ["fox", "owl"], [P + "junk", P + "t:fox",
                                                              P + "t:owl"])
    assert read == [b"3", b"0", old, b""]
    late = np.array([(4, 2, 9)], RECORD).tobytes()
    await raw.append(P + "t:fox", late)
    await raw.hincrby(P + "junk", "fox", 1)  # a death since the read
    await raw.set(P + "lock", "me")
    keys = [P + "lock", P + "junk", P + "stats", P + "t:fox"]
    kept = old[:8]
    assert await run(raw, "compaction_write", ["other", 60000, "7", "fox", len(old), kept, 3,
                                               2], keys) == 0
    assert await raw.get(P + "t:fox") == old + late
    assert await run(raw, "compaction_write", ["me", 60000, "7", "fox", len(old), kept, 3, 2],
                     keys) == 1
    assert await raw.get(P + "t:fox") == kept + late
    assert await raw.hget(P + "junk", "fox") == b"1"  # what came after the read stays
    assert await raw.hmget(P + "stats", ["junk", "cursor"]) == [b"3", b"7"]
    # a term left with nothing is deleted
    await run(raw, "compaction_write", ["me", 60000, "", "fox", 24, b"", 1, 3], keys)
    assert await raw.get(P + "t:fox") is None and await raw.hget(P + "junk", "fox") is None


async def test_a_pass_frees_the_numbers_dead_when_it_began(raw):
    keys = [*KEYS, P + "purge", P + "lock"]
    for number in (3, 9, 20):
        await raw.setbit(P + "dead", number, 1)
    await raw.hset(P + "stats", mapping={"dead": 3, "epoch": 4})
    await raw.set(P + "lock", "me")
    assert await run(raw, "compaction_pass", ["other", 60000, "begin", 2], keys) == -1
    assert await run(raw, "compaction_pass", ["me", 60000, "begin", 2], keys) == 0
    await raw.setbit(P + "dead", 30, 1)  # died after the pass began: not its to free
    assert await raw.hmget(P + "stats", ["pass", "cursor"]) == [b"1", b"0"]
    assert await run(raw, "compaction_pass", ["me", 60000, "free", 2], keys) == 2
    assert await raw.hget(P + "stats", "pass") == b"1"  # a batch may remain
    assert await run(raw, "compaction_pass", ["me", 60000, "free", 2], keys) == 1
    assert await raw.lrange(P + "free", 0, -1) == [b"3", b"9", b"20"]
    assert [await raw.getbit(P + "dead", n) for n in (3, 9, 20, 30)] == [0, 0, 0, 1]
    assert await raw.hmget(P + "stats", ["pass", "dead", "epoch"]) == [b"0", b"0", b"6"]
    assert await raw.exists(P + "purge") == 0


async def test_a_lock_is_released_by_its_holder_only(raw):
    await raw.set(P + "lock", "me")
    assert await run(raw, "release_lock", ["other"], [P + "lock"]) == 0
    assert await raw.get(P + "lock") == b"me"
    assert await run(raw, "release_lock", ["me"], [P + "lock"]) == 1
    assert await raw.exists(P + "lock") == 0
