"""A memory's metadata checked at the edge (shared/protocol/validation.py decodes the rest of a
tool's arguments): its size, depth and keys, tags, source and thread, and the keys Zapomni
itself reads (importance, confidence, memory_type, pinned, role, occurred_at, expiry), each
refused with the field, what is wrong and the limit. Nothing here touches Redis or FalkorDB.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import msgspec

from zapomni.shared.protocol import times
from zapomni.shared.protocol.errors import InvalidInput, shown

MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_DEPTH = 16
MAX_TAGS = 100
RESERVED_METADATA_KEYS = frozenset(
    {"id", "memory_id", "chunk_id", "namespace", "text", "content_hash", "created_at",
     "chunk_count", "status", "score"}
)
MAX_MEMORY_TYPE_CHARS = 64
ROLES = ("user", "assistant", "system", "tool")  # metadata "role": who said it
json_kind = times.kind_of  # what a caller sent, for an error message
_json_encode = msgspec.json.Encoder().encode


def _depth(value: Any, limit: int) -> int:
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def split_metadata(metadata: Any,
                   field: str = "metadata") -> tuple[list[str], str, str, str]:
    """Check metadata; return (tags, source, thread, JSON of the remaining keys). The
    thread (the conversation a memory belongs to) stays among the remaining keys too."""
    if metadata is None:
        return [], "", "", "{}"
    if not isinstance(metadata, dict):
        raise InvalidInput(f"{field}: expected a JSON object, got {json_kind(metadata)}")
    if _depth(metadata, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise InvalidInput(f"{field}: nested more than {MAX_METADATA_DEPTH} levels deep")
    try:
        size = len(_json_encode(metadata))
    except (TypeError, UnicodeEncodeError, msgspec.EncodeError):
        raise InvalidInput(f"{field}: must be JSON with valid UTF-8 strings") from None
    if size > MAX_METADATA_BYTES:
        raise InvalidInput(f"{field}: {size:,} bytes as JSON is over the limit of 65,536")
    _refuse_nul(metadata, field)
    reserved = sorted(RESERVED_METADATA_KEYS.intersection(metadata))
    if reserved:
        raise InvalidInput(f"{field}: reserved key(s) {', '.join(reserved)}; rename them")
    rest = dict(metadata)
    tags = rest.pop("tags", [])
    source = rest.pop("source", "")
    if not isinstance(tags, list) or not all(isinstance(t, str) and 0 < len(t) <= 128
                                              for t in tags):
        raise InvalidInput(f"{field}.tags: expected a list of strings of 1-128 characters")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"{field}.tags: {len(tags)} tags is over the limit of {MAX_TAGS}")
    if not isinstance(source, str) or len(source) > 512:
        raise InvalidInput(f"{field}.source: expected a string of at most 512 characters")
    return list(dict.fromkeys(tags)), source, _thread(rest, field), _json_encode(rest).decode()


def _refuse_nul(metadata: dict[str, Any], field: str) -> None:
    """NUL in a key or a string anywhere in the metadata (tags, source, thread included) is
    refused as it is in the text. Runs after the depth and size checks: the walk is bounded."""
    stack: list[tuple[str, Any]] = [(field, metadata)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInput(f"{where}: must not contain NUL characters (\\u0000)")
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and "\x00" in key:
                    raise InvalidInput(f"{where}: the key {shown(key)} must not contain NUL "
                                       "characters (\\u0000); rename it")
                stack.append((f"{where}.{shown(key)}", item))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))


def _thread(metadata: dict[str, Any], field: str) -> str:
    thread = metadata.get("thread", "")
    if "thread" in metadata and (not isinstance(thread, str) or not 0 < len(thread) <= 512):
        raise InvalidInput(f"{field}.thread: expected a string of 1-512 characters")
    return thread


def _unit(metadata: dict[str, Any], key: str, field: str) -> float | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput(f"{field}.{key}: expected a number from 0 to 1, got "
                           f"{json_kind(value)}")
    return float(value)


def _expiry(metadata: dict[str, Any], field: str, now: float) -> float:
    """expires_at (a point in time: shared/protocol/times.py) or expires_in (seconds from now), not
    both; unix seconds, 0 when neither is given. ``metadata`` keeps expires_at as ISO-8601
    and loses expires_in: a duration means nothing once the add is past."""
    at, within = metadata.get("expires_at"), metadata.pop("expires_in", None)
    if at is not None and within is not None:
        raise InvalidInput(f"{field}: expires_at and expires_in together; give the point in "
                           "time or the seconds from now, not both")
    if within is not None:
        return now + times.duration(within, f"{field}.expires_in")
    if at is None:
        return 0.0
    expires = times.point_in_time(at, f"{field}.expires_at")
    if expires <= now:
        raise InvalidInput(f"{field}.expires_at: {times.iso(expires)} is in the past; a memory "
                           "that should not be kept need not be added (expires_in: seconds "
                           "from now)")
    return expires


def _role(metadata: dict[str, Any], field: str) -> str:
    role = metadata.get("role", "")
    if "role" in metadata and role not in ROLES:
        raise InvalidInput(f"{field}.role: expected one of {', '.join(ROLES)} (who said it), "
                           f"got {shown(role) if isinstance(role, str) else json_kind(role)}")
    return role


def memory_fields(metadata: dict[str, Any], field: str = "metadata",
    now: float | None = None) -> dict[str, Any]:
    """The metadata keys Zapomni itself reads (they stay in the metadata too): importance
    and confidence (0-1), memory_type (a short string), pinned (true/false), role (who said
    it: ROLES), occurred_at (when what it says happened; absent: when it was added) and
    expires_at or expires_in (points in time normalised in ``metadata`` to ISO-8601 UTC;
    expires_in becomes expires_at). A pinned memory never expires."""
    now = time.time() if now is None else now
    kind = metadata.get("memory_type", "")
    if not isinstance(kind, str) or len(kind) > MAX_MEMORY_TYPE_CHARS or (
            "memory_type" in metadata and not kind):
        raise InvalidInput(f"{field}.memory_type: expected a string of 1-"
                           f"{MAX_MEMORY_TYPE_CHARS} characters, such as preference, fact, "
                           "event, instruction or note")
    pinned = metadata.get("pinned", False)
    if not isinstance(pinned, bool):
        raise InvalidInput(f"{field}.pinned: expected true or false, got {json_kind(pinned)}")
    expires = _expiry(metadata, field, now)
    if pinned and expires:
        raise InvalidInput(f"{field}: pinned and expires_at together; a pinned memory never "
                           "expires, so drop one of them")
    if expires:
        metadata["expires_at"] = times.iso(expires)
    occurred = None
    if metadata.get("occurred_at") is not None:
        occurred = times.point_in_time(metadata["occurred_at"], f"{field}.occurred_at")
        metadata["occurred_at"] = times.iso(occurred)
    return {"importance": _unit(metadata, "importance", field),
            "confidence": _unit(metadata, "confidence", field),
            "memory_type": kind, "pinned": pinned, "expires_at": expires,
            "occurred_at": occurred, "role": _role(metadata, field)}


def memory_metadata(metadata: Any, field: str = "metadata") -> dict[str, Any]:
    """Check a memory's metadata; return AddMemory's metadata fields: tags, source,
    metadata_json, thread and the recognised keys (memory_fields)."""
    tags, source, thread, rest = split_metadata(metadata, field)
    extra: dict[str, Any] = {}
    if rest != "{}":
        kept = msgspec.json.decode(rest)
        extra = memory_fields(kept, field)
        rest = _json_encode(kept).decode()
    return {"tags": tags, "source": source, "metadata_json": rest, "thread": thread, **extra}


def metadata_digest(tags: list[str], source: str, rest: str | dict[str, Any]) -> str:
    """A memory's metadata as a short hash: tags as a set, keys in any order. Kept in ingest
    and update task records, so that the same text added again can say whether its
    metadata differs from the stored one."""
    other = msgspec.json.decode(rest) if isinstance(rest, str) else rest
    canonical = json.dumps({"tags": sorted(set(tags)), "source": source, "other": other},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
