"""The pieces of access tracking and rank="memory" that need no server: the stream entry's
format and order, the parts of a memory score and the rank argument."""

import pytest

from zapomni.services.query.fusion import Candidate
from zapomni.services.query.rank import WEIGHTS, memory_parts, rank_by_memory, relevances
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.validation import decode_search
from zapomni.shared.store import access

IDS = ["mem_" + "0123456789abcdef" * 2, "mem_" + "f" * 32]


def entry(fields: dict) -> dict[bytes, bytes]:
    """Fields as Redis hands them back: bytes."""
    return {k.encode(): v if isinstance(v, bytes) else v.encode() for k, v in fields.items()}


def test_an_event_reads_back_as_written_with_ids_packed():
    fields = access.encode_event("notes", [*IDS, IDS[0], "not-an-id"], 1700000000.25)
    assert len(fields["ids"]) == 2 * access.ID_BYTES  # one per distinct valid id
    event = access.decode_event(b"1700000000250-3", entry(fields))
    assert event == access.Event("001700000000250-0000000003", "notes", IDS, 1700000000.25)


@pytest.mark.parametrize("fields", [{"ns": "notes", "at": "1.0"},
                                    {"ns": "notes", "at": "soon", "ids": b""},
                                    {"ns": "Not A Namespace", "at": "1.0", "ids": b""},
                                    {"ns": "notes", "at": "1.0", "ids": b"\x01" * 17}])
def test_an_entry_that_is_not_an_event_reads_as_none(fields):
    assert access.decode_event(b"1-0", entry(fields)) is None


def test_keys_sort_as_the_stream_does_and_the_trim_starts_after_the_last():
    ids = [b"9-0", b"9-10", b"10-0", b"10-2", b"1700000000000-0"]
    assert sorted(ids, key=access.sort_key) == ids
    assert sorted(map(access.sort_key, reversed(ids))) == [access.sort_key(i) for i in ids]
    assert access.after(b"10-2") == "10-3"


def candidates(*scores: float) -> list[Candidate]:
    return [Candidate(row=["m", f"c{i}", "", 0, 0, 1], score=s) for i, s in enumerate(scores)]


def test_relevance_is_put_on_zero_to_one_for_every_mode():
    assert relevances("hybrid", candidates(0.9, 0.3)) == [0.9, 0.3]
    assert relevances("vector", candidates(1.2, -0.1)) == [1.0, 0.0]
    assert relevances("keyword", candidates(12.0, 3.0)) == [1.0, 0.25]
    assert relevances("graph", candidates(0.0)) == [0.0]


def test_the_parts_add_up_and_follow_their_definitions():
    day = 86400.0
    weights = WEIGHTS
    # columns after the id: tags, source, metadata, created_at, occurred_at, parts,
    # importance, count, accessed. Recency counts from the event time, not the add
    old = memory_parts(0.8, 0.8, [[], "", "{}", 9e9, 1000.0, None, None, 5, None],
                       1000.0 + 30 * day, 30 * day, weights)
    assert old["recency"].value == pytest.approx(0.5) and old["recency"].basis == 30
    assert old["frequency"].value == pytest.approx(0.5) and old["frequency"].basis == 5
    assert old["importance"].value == 0.5 and old["importance"].basis is None
    assert sum(p.points for p in old.values()) == pytest.approx(
        0.4 * 0.8 + 0.3 * 0.5 + 0.2 * 0.5 + 0.1 * 0.5)
    fresh = memory_parts(0.8, 0.8, [[], "", "{}", 0.0, 1000.0, None, 0.9, None, None], 1000.0,
                         30 * day, weights)
    assert (fresh["recency"].value, fresh["frequency"].value, fresh["importance"].value) == \
        (1.0, 0.0, 0.9)


@pytest.mark.parametrize("rank", ["popular", "", "Memory", 3, ["memory"]])
def test_rank_must_be_relevance_or_memory(rank):
    with pytest.raises(InvalidInput) as refused:
        decode_search("q", 10, None, None, None, None, rank)
    assert str(refused.value.message).startswith(
        "rank: expected relevance (the default: the best match first) or memory")


def test_rank_defaults_to_relevance():
    assert decode_search("q", 10, None, None).rank == "relevance"
    assert decode_search("q", 10, None, None, None, None, "memory").rank == "memory"


def test_rank_by_memory_reorders_the_pool_and_leaves_out_memories_that_are_gone():
    day, now = 86400.0, 10_000_000.0
    pool = [Candidate(row=[f"m{i}", f"c{i}", "", 0, 0, 1], score=s)
            for i, s in enumerate((0.9, 0.85, 0.8, 0.7))]
    fields = [[], "", "{}"]
    # the best match happened three months before it was added (now)
    memories = {"m0": [*fields, now, now - 90 * day, None, None, 0, None],
                "m1": [*fields, now, now, None, None, 0, None],
                "m2": [*fields, now, now, None, 1.0, 20, now]}  # m3: deleted since
    kept, parts = rank_by_memory(pool, memories, SearchRequest(query="q", limit=3), now)
    assert [c.memory_id for c in kept] == ["m2", "m1", "m0"]
    assert [c.score for c in kept] == sorted((c.score for c in kept), reverse=True)
    for candidate in kept:
        assert sum(p.points for p in parts[candidate.row[1]].values()) == pytest.approx(
            candidate.score, abs=1e-6)
    assert parts["c0"]["relevance"].basis == 0.9 and parts["c0"]["recency"].basis == 90
    two, _ = rank_by_memory(pool, memories, SearchRequest(query="q", limit=2), now)
    assert two == kept[:2]
    # asked as of 90 days ago, the old memory is the recent one
    _, then = rank_by_memory(pool, memories, SearchRequest(query="q", limit=3,
                                                           as_of=now - 90 * day))
    assert then["c0"]["recency"].value == 1.0 and then["c1"]["recency"].basis == 0
