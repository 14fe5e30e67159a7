"""The batch's statements (shared/store/cypher_batch.py) are the single-memory ones once per row:
every parameter read from the row, the row carried through each WITH."""

from __future__ import annotations

import re

import pytest

from zapomni.shared.store import cypher_batch, cypher_memories


@pytest.mark.parametrize("name", ["MERGE_MEMORIES", "LINK_TURNS_BEFORE", "LINK_TURNS_AFTER",
                                  "MARK_READY"])
def test_every_parameter_comes_from_the_row(name):
    query = getattr(cypher_batch, name)
    assert query.startswith("UNWIND $rows AS r\n")
    assert re.findall(r"\$\w+", query) == ["$rows"]
    assert all(w.startswith("WITH r,") for w in re.findall(r"WITH [^\n]*", query))


def test_the_memory_write_sets_what_the_single_one_sets():
    single = re.findall(r"m\.(\w+) = ", cypher_memories.MERGE_MEMORY)
    assert re.findall(r"m\.(\w+) = ", cypher_batch.MERGE_MEMORIES) == single
    assert len(single) > 15


def test_chunks_name_their_memory_in_the_row():
    for query in cypher_batch.MERGE_CHUNKS.values():
        assert re.findall(r"\$\w+", query) == ["$rows"]
        assert "MATCH (m:Memory {id: r.memory_id})" in query
    assert "c.embedding_b = vecf32(r.vec)" in cypher_batch.MERGE_CHUNKS["embedding_b"]
