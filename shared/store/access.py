"""Access events: which memories a search returned, and when.

The query service appends one entry per search that returned something to one Redis stream
(services/query/rank.py); a worker folds the stream in batches into each memory's
``access_count`` and ``accessed_at`` (workers/access.py, cypher_memories.FOLD_ACCESS). An
entry holds the namespace, the time and the memory ids packed as 16 bytes each (an id is
``mem_`` and 32 hex digits): 100 ids take 1.6 KB instead of 3.6 KB, and the stream is capped
by entries (STREAM_MAX in services/query/rank.py).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from zapomni.shared.protocol.base import MEMORY_ID_PATTERN, NAMESPACE_PATTERN

STREAM = "zapomni:access"
ID_BYTES = 16
_MEMORY_ID = re.compile(MEMORY_ID_PATTERN)
_NAMESPACE = re.compile(NAMESPACE_PATTERN)


class Event(NamedTuple):
    key: str  # the stream entry id, padded so that keys sort as the stream does
    namespace: str
    memory_ids: list[str]
    at: float  # unix seconds, the query service's clock


def encode_event(namespace: str, memory_ids: list[str], at: float) -> dict[str, bytes | str]:
    """A stream entry's fields; ids not in the memory id format are left out."""
    packed = b"".join(bytes.fromhex(m[4:]) for m in dict.fromkeys(memory_ids)
                      if _MEMORY_ID.fullmatch(m))
    return {"ns": namespace, "at": repr(at), "ids": packed}


def decode_event(entry_id: bytes, fields: dict[bytes, bytes]) -> Event | None:
    """An entry as written by encode_event, or None for one that is not."""
    try:
        namespace = fields[b"ns"].decode()
        at = float(fields[b"at"])
        packed = fields[b"ids"]
        key = sort_key(entry_id)
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    if not _NAMESPACE.fullmatch(namespace) or len(packed) % ID_BYTES:
        return None
    ids = ["mem_" + packed[i:i + ID_BYTES].hex() for i in range(0, len(packed), ID_BYTES)]
    return Event(key, namespace, ids, at)


def sort_key(entry_id: bytes) -> str:
    """A stream id ("<ms>-<seq>") as a string that sorts in the stream's order."""
    ms, seq = entry_id.decode().split("-")
    return f"{int(ms):015d}-{int(seq):010d}"


def after(entry_id: bytes) -> str:
    """The smallest stream id after ``entry_id`` (XTRIM MINID keeps ids from it on)."""
    ms, seq = entry_id.decode().split("-")
    return f"{ms}-{int(seq) + 1}"
