"""Decode tool and API arguments into Structs, with errors that name the field and the limit.

The limits are the ones the README's tools table states. Everything here raises
``InvalidInput``; nothing here touches Redis or FalkorDB, so invalid input can never be
enqueued or stored.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, TypeVar

import msgspec

from zapomni.shared import times
from zapomni.shared.errors import InvalidInput
from zapomni.shared.protocol.api import (
    SEARCH_MODES,
    SEARCH_RANKS,
    AddMemory,
    SearchFilters,
    SearchRequest,
    UpdateMemory,
)
from zapomni.shared.protocol.base import (
    DEFAULT_NAMESPACE,
    MEMORY_ID_PATTERN,
    NAMESPACE_PATTERN,
    TASK_ID_PATTERN,
)

MAX_TEXT_CHARS = 10_000_000
MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_DEPTH = 16
MAX_TAGS = 100
MAX_BATCH_ITEMS = 1000
RESERVED_METADATA_KEYS = frozenset(
    {"id", "memory_id", "chunk_id", "namespace", "text", "content_hash", "created_at",
     "chunk_count", "status", "score"}
)
FILTER_KEYS = ("tags", "tags_all", "source", "source_prefix", "after", "before", "metadata",
               "include_superseded")
MAX_MEMORY_TYPE_CHARS = 64
ROLES = ("user", "assistant", "system", "tool")  # metadata "role": who said it

_json_encode = msgspec.json.Encoder().encode
S = TypeVar("S")


def convert(data: Any, kind: type[S], where: str = "") -> S:
    """``msgspec.convert`` with its error rewritten as ``field: problem``."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise InvalidInput(describe(exc, where)) from None


# msgspec's wording -> ours (msgspec names JSON types: str, int, array, object, null...)
KINDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
         "array": "a list", "object": "a JSON object", "null": "null",
         "bool | int | float | str": "true, false, a number or a string"}
PATTERNS = {
    MEMORY_ID_PATTERN: "not a valid id (expected mem_ and 32 hex digits)",
    TASK_ID_PATTERN: "not a valid id (expected task_ and 32 hex digits)",
    NAMESPACE_PATTERN: "must be 1-64 characters of a-z, 0-9, '_' and '-', starting with a "
                       "letter or digit",
}
REWRITES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"Expected `str` of length >= 1$"), lambda m: "must not be empty"),
    (re.compile(r"Expected `str` of length <= (\d+)$"),
     lambda m: f"too long (at most {int(m[1]):,} characters)"),
    (re.compile(r"Expected `str` of length >= (\d+)$"),
     lambda m: f"too short (at least {int(m[1]):,} characters)"),
    (re.compile(r"Expected `array` of length >= (\d+)$"),
     lambda m: f"too few items (at least {int(m[1]):,})"),
    (re.compile(r"Expected `(?:array|object)` of length <= (\d+)$"),
     lambda m: f"too many items (at most {int(m[1]):,})"),
    (re.compile(r"Expected `(?:int|float)` >= (\S+)$"), lambda m: f"must be at least {m[1]}"),
    (re.compile(r"Expected `(?:int|float)` <= (\S+)$"), lambda m: f"must be at most {m[1]}"),
    (re.compile(r"Expected `str` matching regex '(.*)'$"),
     lambda m: PATTERNS.get(m[1], "not in the expected format")),
    (re.compile(r"Expected `(.+)`, got `(.+)`$"),
     lambda m: f"expected {kinds(m[1])}, got {kinds(m[2])}"),
    (re.compile(r"Invalid enum value"), lambda m: "not one of the allowed values"),
]
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
NAMED = re.compile(r"Object (contains unknown|missing required) field `(.*)`$", re.DOTALL)


def kinds(names: str) -> str:
    """msgspec's `array | null` -> 'a list or null'."""
    return KINDS.get(names) or " or ".join(KINDS.get(n, "another type")
                                           for n in names.split(" | "))


def json_setting(text: str, setting: str, example: str) -> Any:
    """A setting's JSON (None when empty); ValueError naming the setting and showing
    ``example`` when it is not JSON."""
    if not text.strip():
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise ValueError(f"{setting}: not valid JSON; expected an object such as "
                         f"{example}") from None


def describe(exc: msgspec.ValidationError, where: str = "") -> str:
    """msgspec's error as ``field: what is wrong (the limit)``, in our words."""
    problem, _, at = str(exc).partition(" - at `$")
    path = at.rstrip("`").replace("[...]", "")
    named = NAMED.match(problem)
    if named:
        path += "." + shown(named[2])
        problem = "unknown field" if named[1].startswith("contains") else "required but missing"
    for pattern, words in REWRITES:
        found = pattern.match(problem)
        if found:
            problem = words(found)
            break
    field = (where + path).strip(".") or "arguments"
    return f"{field}: {problem}"


def shown(name: Any) -> str:
    """A caller's key for an error message: plain words as they are, anything else quoted
    with escapes (one line, at most 40 characters of it)."""
    name = str(name)
    if PLAIN_NAME.fullmatch(name):
        return name
    return json.dumps(name[:40]) + ("..." if len(name) > 40 else "")


json_kind = times.kind_of  # what a caller sent, for an error message


def normalise_text(text: Any, field: str = "text") -> tuple[str, str]:
    """Strip and check a memory's text; return it with the sha256 of its UTF-8 bytes."""
    if not isinstance(text, str):
        raise InvalidInput(f"{field}: expected a string, got {json_kind(text)}")
    text = text.strip()
    if not text:
        raise InvalidInput(f"{field}: must not be empty or only whitespace")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"{field}: {len(text):,} characters is over the limit of {MAX_TEXT_CHARS:,}; "
            "split the document into several memories"
        )
    if "\x00" in text:
        raise InvalidInput(f"{field}: must not contain NUL characters (\\u0000)")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{field}: not valid UTF-8 (lone surrogate at character {exc.start})"
        ) from None
    return text, hashlib.sha256(raw).hexdigest()


def check_namespace(namespace: Any) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not re.fullmatch(NAMESPACE_PATTERN, namespace):
        raise InvalidInput(
            "namespace: must be 1-64 characters of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return namespace


def check_id(value: Any, field: str, pattern: str = MEMORY_ID_PATTERN) -> str:
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        example = "mem_" if pattern == MEMORY_ID_PATTERN else "task_"
        raise InvalidInput(f"{field}: not a valid id (expected {example} and 32 hex digits)")
    return value


def check_task_id(value: Any) -> str:
    return check_id(value, "task_id", TASK_ID_PATTERN)


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
    """expires_at (a point in time: shared/times.py) or expires_in (seconds from now), not
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


def line_offset(text: str) -> int:
    """The lines before a text's first non-blank one, which normalise_text strips: a
    file's lines are counted from there (start_line/end_line)."""
    return text[: len(text) - len(text.lstrip())].count("\n")


def decode_add_memory(text: Any, metadata: Any, namespace: Any, where: str = "") -> AddMemory:
    """Tool arguments of add_memory -> AddMemory (``where`` prefixes field names in errors)."""
    ns = check_namespace(namespace)
    stripped, content_hash = normalise_text(text, f"{where}text")
    return AddMemory(text=stripped, content_hash=content_hash, namespace=ns,
                     line_offset=line_offset(text),
                     **memory_metadata(metadata, f"{where}metadata"))


def metadata_digest(tags: list[str], source: str, rest: str | dict[str, Any]) -> str:
    """A memory's metadata as a short hash: tags as a set, keys in any order. Kept in ingest
    and update task records, so that the same text added again can say whether its
    metadata differs from the stored one."""
    other = msgspec.json.decode(rest) if isinstance(rest, str) else rest
    canonical = json.dumps({"tags": sorted(set(tags)), "source": source, "other": other},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def decode_filters(filters: Any) -> SearchFilters:
    if filters is None:
        return SearchFilters()
    if not isinstance(filters, dict):
        raise InvalidInput("filters: expected a JSON object")
    unknown = sorted(set(filters) - set(FILTER_KEYS))
    if unknown:
        raise InvalidInput(
            f"filters: unknown key(s) {', '.join(map(shown, unknown))}; "
            f"known: {', '.join(FILTER_KEYS)}"
        )
    raw = dict(filters)
    for key in ("after", "before"):
        if raw.get(key) is not None:
            raw[key] = times.point_in_time(raw[key], f"filters.{key}")
    return convert(raw, SearchFilters, "filters")


def decode_search(query: Any, limit: Any, filters: Any, namespace: Any, mode: Any = None,
                  min_score: Any = None, rank: Any = None, as_of: Any = None) -> SearchRequest:
    if isinstance(query, str):
        query = query.strip()
        if not query:
            raise InvalidInput("query: must not be empty or only whitespace")
    if mode is not None and mode not in SEARCH_MODES:
        raise InvalidInput(f"mode: expected one of {', '.join(SEARCH_MODES)}")
    if rank is not None and rank not in SEARCH_RANKS:
        raise InvalidInput("rank: expected relevance (the default: the best match first) or "
                           "memory (relevance blended with recency, frequency and importance)")
    data = {"query": query, "limit": 10 if limit is None else limit,
            "namespace": check_namespace(namespace), "mode": mode or "hybrid",
            "min_score": 0.0 if min_score is None else min_score, "rank": rank or "relevance",
            "as_of": None if as_of is None else times.point_in_time(as_of, "as_of")}
    request = convert(data, SearchRequest)
    return msgspec.structs.replace(request, filters=decode_filters(filters))


# ---- update_memory ----


def decode_update(memory_id: Any, text: Any, metadata: Any, namespace: Any) -> UpdateMemory:
    """Tool arguments of update_memory -> UpdateMemory. The patch is checked on its own here
    (types, size, reserved keys); merge_metadata checks the memory's metadata it makes."""
    mid = check_id(memory_id, "memory_id")
    ns = check_namespace(namespace)
    if text is None and metadata is None:
        raise InvalidInput("text: give a new text, or metadata to change, or both; nothing "
                           "was changed")
    new_text, content_hash = (None, "") if text is None else normalise_text(text)
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidInput(f"metadata: expected a JSON object, got {json_kind(metadata)}")
        if not metadata:
            raise InvalidInput("metadata: empty; give the keys to change (null removes a "
                               "key), or leave metadata out")
        memory_metadata({k: v for k, v in metadata.items() if v is not None})
        reserved = sorted(RESERVED_METADATA_KEYS.intersection(metadata))
        if reserved:
            raise InvalidInput(f"metadata: reserved key(s) {', '.join(reserved)}; rename them")
    return UpdateMemory(memory_id=mid, namespace=ns, text=new_text, content_hash=content_hash,
                        line_offset=0 if text is None else line_offset(text), patch=metadata)

