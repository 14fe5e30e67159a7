import json

import pytest

from zapomni.services.mcp.update import merge_metadata
from zapomni.shared.protocol.api import BuildGraph
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.metadata import memory_fields, metadata_digest
from zapomni.shared.protocol.validation import (
    MAX_TEXT_CHARS,
    check_id,
    check_namespace,
    check_task_id,
    convert,
    decode_add_memory,
    decode_search,
    decode_update,
)


def error_of(call, *args) -> str:
    with pytest.raises(InvalidInput) as info:
        call(*args)
    return info.value.message


def test_add_memory_strips_text_and_splits_metadata():
    memory = decode_add_memory("  hello world \n", {"tags": ["a", "b", "a"], "source": "s",
                                                     "page": 3, "thread": "t"}, None)
    assert memory.text == "hello world"
    assert memory.namespace == "default"
    assert memory.tags == ["a", "b"]
    assert memory.source == "s"
    assert json.loads(memory.metadata_json) == {"page": 3, "thread": "t"}
    assert memory.thread == "t"
    assert len(memory.content_hash) == 64
    assert memory.line_offset == 0


def test_blank_lines_stripped_from_the_front_are_counted_not_hashed():
    plain = decode_add_memory("def f():\n    pass", None, None)
    padded = decode_add_memory("\n \r\n\t\n  def f():\n    pass\n\n", None, None)
    assert (padded.text, padded.content_hash) == (plain.text, plain.content_hash)
    assert (plain.line_offset, padded.line_offset) == (0, 3)
    update = decode_update("mem_" + "0" * 32, "\n\nnew text", None, None)
    assert (update.text, update.line_offset) == ("new text", 2)


@pytest.mark.parametrize(("text", "expected"), [
    ("", "text: must not be empty"),
    ("   \n\t", "text: must not be empty"),
    ("a\x00b", "text: must not contain NUL"),
    ("bad \ud800 surrogate", "text: not valid UTF-8 (lone surrogate at character 4)"),
    (42, "text: expected a string, got 42"),
    (None, "text: expected a string, got null"),
])
def test_bad_text_names_the_field_and_the_rule(text, expected):
    assert error_of(decode_add_memory, text, None, None).startswith(expected)


def test_text_limit_is_ten_million_characters_after_strip():
    decode_add_memory("x" * MAX_TEXT_CHARS + "   ", None, None)
    message = error_of(decode_add_memory, "x" * (MAX_TEXT_CHARS + 1), None, None)
    assert message.startswith("text: 10,000,001 characters is over the limit of 10,000,000")


@pytest.mark.parametrize(("metadata", "expected"), [
    ([1, 2], "metadata: expected a JSON object, got a list"),
    ({"id": 1}, "metadata: reserved key(s) id"),
    ({"tags": "x"}, "metadata.tags: expected a list of strings"),
    ({"tags": [""]}, "metadata.tags: expected a list of strings"),
    ({"tags": [str(i) for i in range(101)]}, "metadata.tags: 101 tags is over the limit of 100"),
    ({"source": 5}, "metadata.source: expected a string"),
    ({"thread": ""}, "metadata.thread: expected a string of 1-512 characters"),
    ({"thread": ["a"]}, "metadata.thread: expected a string of 1-512 characters"),
    ({"blob": "x" * 70_000}, "metadata: 70,011 bytes as JSON is over the limit of 65,536"),
    ({"bad": "\udc00"}, "metadata: must be JSON with valid UTF-8 strings"),
])
def test_bad_metadata(metadata, expected):
    assert error_of(decode_add_memory, "text", metadata, None).startswith(expected)


@pytest.mark.parametrize(("metadata", "expected"), [
    ({"tags": ["ok", "a\x00b"]}, "metadata.tags[1]: must not contain NUL characters (\\u0000)"),
    ({"source": "notes\x00.md"}, "metadata.source: must not contain NUL characters"),
    ({"thread": "chat\x00"}, "metadata.thread: must not contain NUL characters"),
    ({"room": "kitchen\x00"}, "metadata.room: must not contain NUL characters"),
    ({"deep": {"list": [1, {"x": "\x00"}]}},
     "metadata.deep.list[1].x: must not contain NUL characters"),
    ({"a\x00b": 1}, 'metadata: the key "a\\u0000b" must not contain NUL characters (\\u0000); '
                    "rename it"),
])
def test_nul_is_refused_in_every_key_and_string_of_the_metadata(metadata, expected):
    """As in the text: tags, source, thread, any key, any string at any depth; an update's
    patch the same."""
    assert error_of(decode_add_memory, "text", metadata, None).startswith(expected)
    with pytest.raises(InvalidInput) as refused:
        decode_update("mem_" + "a" * 32, None, metadata, None)
    assert refused.value.message.startswith(expected)


def test_deep_metadata_is_refused_before_encoding():
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    assert error_of(decode_add_memory, "t", deep, None) == \
        "metadata: nested more than 16 levels deep"


@pytest.mark.parametrize("namespace", ["", "A", "-x", "a" * 65, "a b", "x/y", 3])
def test_bad_namespace(namespace):
    assert error_of(check_namespace, namespace).startswith("namespace: must be 1-64 characters")


@pytest.mark.parametrize("namespace", ["a", "default", "team_1-x", "9" * 64])
def test_good_namespace(namespace):
    assert check_namespace(namespace) == namespace


def test_ids():
    assert check_id("mem_" + "a" * 32, "memory_id")
    assert error_of(check_id, "mem_xyz", "memory_id") == \
        "memory_id: not a valid id (expected mem_ and 32 hex digits)"
    assert error_of(check_task_id, "mem_" + "a" * 32).startswith("task_id: not a valid id")


def test_search_defaults_and_limits():
    request = decode_search("  what  ", None, None, None)
    assert (request.query, request.limit, request.namespace) == ("what", 10, "default")
    assert not request.filters.active
    assert error_of(decode_search, "q", 0, None, None) == "limit: must be at least 1"
    assert error_of(decode_search, "q", 101, None, None) == "limit: must be at most 100"
    assert error_of(decode_search, "q", "5", None, None) == \
        "limit: expected an integer, got a string"
    assert error_of(decode_search, "x" * 2001, 5, None, None) == \
        "query: too long (at most 2,000 characters)"
    assert error_of(decode_search, " ", 5, None, None) == \
        "query: must not be empty or only whitespace"


def test_search_filters():
    request = decode_search("q", 5, {"tags": ["a"], "source": "s", "after": "2026-01-01",
                                     "before": 1800000000}, "ns")
    f = request.filters
    assert f.active and f.tags == ["a"] and f.source == "s"
    assert f.after == 1767225600.0 and f.before == 1800000000.0
    assert error_of(decode_search, "q", 5, {"colour": "red"}, None) == \
        "filters: unknown key(s) colour; known: tags, tags_all, source, source_prefix, " \
        "after, before, metadata, include_superseded"
    assert decode_search("q", 5, {"source_prefix": "src/app/"}, None).filters.active
    assert error_of(decode_search, "q", 5, {"source_prefix": "s" * 513}, None) == \
        "filters.source_prefix: too long (at most 512 characters)"
    assert error_of(decode_search, "q", 5, {"source_prefix": ""}, None) == \
        "filters.source_prefix: must not be empty"
    assert error_of(decode_search, "q", 5, {"source_prefix": 3}, None) == \
        "filters.source_prefix: expected a string or null, got an integer"
    assert error_of(decode_search, "q", 5, {"after": "yesterday"}, None).startswith(
        "filters.after: expected an ISO-8601 date")
    assert error_of(decode_search, "q", 5, {"tags": "a"}, None) == \
        "filters.tags: expected a list or null, got a string"
    assert error_of(decode_search, "q", 5, {"metadata": {"k": [1]}}, None) == \
        "filters.metadata: expected true, false, a number or a string, got a list"
    assert error_of(decode_search, "q", 5, {"a\nb": 1}, None).startswith(
        'filters: unknown key(s) "a\\nb"; known:')


def test_no_regex_and_no_library_wording_in_id_errors():
    assert error_of(convert, {"memory_ids": ["mem_1"]}, BuildGraph) == \
        "memory_ids[0]: not a valid id (expected mem_ and 32 hex digits)"
    assert error_of(convert, {"namespace": "A"}, BuildGraph).startswith(
        "namespace: must be 1-64 characters")
    assert error_of(convert, {"rebuild": "yes"}, BuildGraph) == \
        "rebuild: expected true or false, got a string"
    assert error_of(convert, {"bogus": 1}, BuildGraph) == "bogus: unknown field"


# ---- metadata keys Zapomni reads (importance, memory_type, pinned, expiry, confidence, role,
# occurred_at) and the one time rule: a point in time is ISO-8601 or unix seconds ----


def test_recognised_metadata_is_read_and_times_normalised():
    now = 1_800_000_000.0
    meta = {"importance": 0.8, "memory_type": "preference", "expires_in": 3600,
            "confidence": 1, "role": "user", "occurred_at": 1_700_000_000}
    fields = memory_fields(meta, now=now)
    assert fields == {"importance": 0.8, "confidence": 1.0, "memory_type": "preference",
                      "pinned": False, "expires_at": now + 3600, "role": "user",
                      "occurred_at": 1_700_000_000.0}
    # what get_memory will show: points in time as ISO-8601, the duration gone
    assert meta == {"importance": 0.8, "memory_type": "preference", "confidence": 1,
                    "role": "user", "expires_at": "2027-01-15T09:00:00Z",
                    "occurred_at": "2023-11-14T22:13:20Z"}
    assert memory_fields({"expires_at": "2030-01-01"}, now=now)["expires_at"] == 1893456000.0


def test_a_unix_expiry_is_a_point_in_time_not_seconds_from_now():
    """The bug of issue 32: expires_at 1790000000 was read as 57 years from now."""
    now = 1_789_000_000.0
    assert memory_fields({"expires_at": 1_790_000_000}, now=now)["expires_at"] == 1.79e9
    assert memory_fields({"expires_at": "2026-09-21T16:13:20+02:00"}, now=now)[
        "expires_at"] == 1_790_000_000.0
    assert memory_fields({"occurred_at": "2023-05-04"})["occurred_at"] == 1683158400.0


@pytest.mark.parametrize(("given", "message"), [
    ("2026-02-30", "as_of: no such day: 2026-02-30 (February 2026 has 28 days)"),
    ("2024-02-30T10:00:00Z", "as_of: no such day: 2024-02-30 (February 2024 has 29 days)"),
    ("2026-04-31", "as_of: no such day: 2026-04-31 (April 2026 has 30 days)"),
    ("20260230", "as_of: no such day: 20260230 (February 2026 has 28 days)"),
    ("2026-13-01", "as_of: no such month: 2026-13-01 (months are 01-12)"),
    ("0000-01-01", "as_of: no year 0: 0000-01-01 (the years are 0001-9999)"),
    ("2026-01-31T24:00:00Z", "as_of: no such time of day: 2026-01-31T24:00:00 (hours are "
     "00-23, minutes and seconds 00-59)"),
    ("2026-01-31 12:61", "as_of: no such time of day: 2026-01-31 12:61 (hours are 00-23, "
     "minutes and seconds 00-59)"),
    ("31/01/2026", "as_of: expected an ISO-8601 date or datetime such as 2026-01-31 or "
     "2026-01-31T18:00:00Z, or unix seconds such as 1790000000; got a string that is not "
     "ISO-8601"),
    (-5, "as_of: -5 is negative; unix seconds count from 1970-01-01 and are never an offset "
     "from now: give the point in time, as ISO-8601 (such as 1969-07-20) for one before 1970"),
    (-0.5, "as_of: -0.5 is negative; unix seconds count from 1970-01-01"),
])
def test_a_point_in_time_that_names_no_day_or_is_negative_is_told_so(given, message):
    """The form is right but the day, month or hour does not exist: said so, not "not
    ISO-8601"; a negative number is no time since 1970 and no offset from now."""
    assert error_of(decode_search, "q", 5, None, None, None, None, None, given).startswith(message)
    assert error_of(decode_search, "q", 5, {"after": given}, None).startswith(
        message.replace("as_of", "filters.after"))
    with pytest.raises(InvalidInput) as refused:
        decode_add_memory("a fact", {"occurred_at": given}, None)
    assert refused.value.message.startswith(message.replace("as_of", "metadata.occurred_at"))


def test_a_real_day_and_1970_itself_are_taken():
    assert decode_search("q", 5, None, None, as_of="2024-02-29").as_of == 1709164800.0
    assert decode_search("q", 5, None, None, as_of=0).as_of == 0.0
    assert decode_search("q", 5, None, None, as_of="1969-07-20").as_of == -14256000.0


@pytest.mark.parametrize(("meta", "message"), [
    ({"importance": 1.5}, "metadata.importance: expected a number from 0 to 1, got 1.5"),
    ({"importance": True}, "metadata.importance: expected a number from 0 to 1, got true"),
    ({"confidence": "high"}, "metadata.confidence: expected a number from 0 to 1, got a string"),
    ({"memory_type": ""}, "metadata.memory_type: expected a string of 1-64 characters"),
    ({"pinned": "yes"}, "metadata.pinned: expected true or false, got a string"),
    ({"expires_at": "2020-01-01"}, "metadata.expires_at: 2020-01-01T00:00:00Z is in the past"),
    ({"expires_at": 1_600_000_000}, "metadata.expires_at: 2020-09-13T12:26:40Z is in the past"),
    ({"expires_at": "soon"}, "metadata.expires_at: expected an ISO-8601 date or datetime"),
    ({"expires_at": True}, "metadata.expires_at: expected an ISO-8601 date or datetime"),
    ({"expires_in": -5}, "metadata.expires_in: expected seconds from now, 1 to"),
    ({"expires_in": "1h"}, "metadata.expires_in: expected seconds from now, 1 to"),
    ({"expires_in": 60, "expires_at": "2099-01-01"},
     "metadata: expires_at and expires_in together"),
    ({"expires_in": 60, "pinned": True}, "metadata: pinned and expires_at together"),
    ({"occurred_at": "last week"}, "metadata.occurred_at: expected an ISO-8601 date"),
    ({"occurred_at": 1e12}, "metadata.occurred_at: 1000000000000.0 is outside the years"),
    ({"role": "User"}, "metadata.role: expected one of user, assistant, system, tool"),
    ({"role": 1}, "metadata.role: expected one of user, assistant, system, tool"),
])
def test_recognised_metadata_refused_with_the_field_and_the_limit(meta, message):
    with pytest.raises(InvalidInput) as refused:
        decode_add_memory("a fact", meta, None)
    assert str(refused.value.message).startswith(message)


# ---- update_memory ----


def test_a_metadata_patch_merges_at_the_top_level():
    """Keys given replace theirs (a nested object whole), null removes, the rest stays."""
    merged = merge_metadata(["a"], "s", {"x": {"y": 1}, "z": 2, "thread": "t"},
                            {"x": {"w": 3}, "z": None, "tags": None, "new": [1]})
    assert merged == {"x": {"w": 3}, "source": "s", "thread": "t", "new": [1]}
    with pytest.raises(InvalidInput, match="metadata.thread: the thread of a memory cannot"):
        merge_metadata([], "", {"thread": "t"}, {"thread": None})


@pytest.mark.parametrize(("text", "metadata", "message"), [
    (None, None, "text: give a new text, or metadata to change, or both"),
    (None, {}, "metadata: empty; give the keys to change (null removes a key)"),
    (None, "tags", "metadata: expected a JSON object, got a string"),
    (None, {"memory_id": None}, "metadata: reserved key(s) memory_id; rename them"),
    (None, {"source": 5}, "metadata.source: expected a string of at most 512 characters"),
    (None, {"confidence": -1}, "metadata.confidence: expected a number from 0 to 1"),
    (" ", None, "text: must not be empty or only whitespace"),
    (7, None, "text: expected a string, got 7"),
])
def test_update_arguments_refused_with_the_field(text, metadata, message):
    with pytest.raises(InvalidInput) as refused:
        decode_update("mem_" + "a" * 32, text, metadata, None)
    assert refused.value.message.startswith(message)


def test_metadata_digest_ignores_order_and_sees_every_value():
    same = metadata_digest(["a", "b"], "s", '{"k": 1, "j": [1, 2]}')
    assert same == metadata_digest(["b", "a", "a"], "s", {"j": [1, 2], "k": 1})
    assert same != metadata_digest(["a", "b"], "s", {"j": [2, 1], "k": 1})
    assert same != metadata_digest(["a", "b"], "", {"j": [1, 2], "k": 1})
    assert same != metadata_digest(["a"], "s", {"j": [1, 2], "k": 1})
