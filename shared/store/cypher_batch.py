"""The Cypher of a batch of small memories (workers/batch.py): the ingest's writes of one
memory (cypher_memories.py), once per row of ``$rows``, so that a batch costs a few
statements instead of a few per memory (measured: writing a threaded memory node 4.8 ms
alone, 0.35 ms a memory in one statement of 200).

Each is derived from its single-memory query (``unwound``): a property added to a memory's
write is written by both, and tests/integration/test_batches.py checks that a memory written
in a batch is stored exactly as one written alone.
"""

from __future__ import annotations

import re

from zapomni.shared.store import cypher_memories
from zapomni.shared.store.cypher_moves import by_prop


def unwound(query: str) -> str:
    """``query`` once per row ``r`` of ``$rows``: each ``$param`` read from the row, and the
    row carried through the query's ``WITH m, ...``."""
    body = re.sub(r"\$(\w+)", r"r.\1", query).replace("WITH m,", "WITH r, m,")
    return "UNWIND $rows AS r\n" + body


MERGE_MEMORIES = unwound(cypher_memories.MERGE_MEMORY)
LINK_TURNS_BEFORE = unwound(cypher_memories.LINK_TURN_BEFORE)
LINK_TURNS_AFTER = unwound(cypher_memories.LINK_TURN_AFTER)
# the chunks of many memories: each row names its memory
MERGE_CHUNKS = by_prop("UNWIND $rows AS r\n" + cypher_memories.MERGE_CHUNKS.replace(
    "UNWIND $rows AS r\n", "").replace("$memory_id", "r.memory_id"))
# the ids of the memories made searchable
MARK_READY = unwound(cypher_memories.MARK_READY).replace("RETURN m.chunk_count", "RETURN m.id")
