"""Decode tool and API arguments into Structs, with errors that name the field and the limit
(a memory's metadata is checked by shared/protocol/metadata.py).

The limits are the ones the README's tools table states. Everything here raises
``InvalidInput``; nothing here touches Redis or FalkorDB, so invalid input can never be
enqueued or stored.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, TypeVar

import msgspec

from zapomni.shared.protocol import times
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
from zapomni.shared.protocol.errors import InvalidInput, shown
from zapomni.shared.protocol.metadata import RESERVED_METADATA_KEYS, json_kind, memory_metadata

MAX_TEXT_CHARS = 10_000_000
MAX_BATCH_ITEMS = 1000
FILTER_KEYS: tuple[str, ...] = SearchFilters.__struct_fields__
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
    return text, hashlib.sha256(utf8(text, field)).hexdigest()


def utf8(text: str, field: str) -> bytes:
    """The text's UTF-8 bytes; InvalidInput when it holds a lone surrogate."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{field}: not valid UTF-8 (lone surrogate at character "
                           f"{exc.start})") from None


def check_namespace(namespace: Any) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not re.fullmatch(NAMESPACE_PATTERN, namespace):
        raise InvalidInput(f"namespace: {PATTERNS[NAMESPACE_PATTERN]}")
    return namespace


def check_id(value: Any, field: str, pattern: str = MEMORY_ID_PATTERN) -> str:
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise InvalidInput(f"{field}: {PATTERNS[pattern]}")
    return value


def check_task_id(value: Any) -> str:
    return check_id(value, "task_id", TASK_ID_PATTERN)


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

