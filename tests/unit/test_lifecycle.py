"""The pure parts of the lifecycle: list cursors and first lines, the listing's query, and
the write policy's setting and confidence rule."""

from __future__ import annotations

import pytest

from zapomni.services.query.listing import first_line, read_cursor, write_cursor
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.policy import Rule, judge_confidence, parse_policy, rule_for
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_lists

MEM = "mem_" + "a" * 32


def test_a_cursor_reads_back_only_in_its_own_order():
    cursor = write_cursor("newest", -1_795_480_445_898_116, 1_795_480_445_898_117, MEM)
    assert read_cursor(cursor, "newest") == (-1_795_480_445_898_116, 1_795_480_445_898_117,
                                             MEM)
    with pytest.raises(InvalidInput, match="^cursor: not a cursor list_memories returned"):
        read_cursor(cursor, "oldest")


@pytest.mark.parametrize("cursor", ["x", "!!!!", "bm90IGpzb24", "WyJuIiwtMSwibWVtXyJd",
                                    "é", write_cursor("newest", 2**62, 5, MEM),
                                    write_cursor("newest", 5, 2**60, MEM),
                                    write_cursor("newest", 5, 5, "mem_1")])
def test_a_malformed_cursor_is_refused(cursor):
    with pytest.raises(InvalidInput, match="^cursor: "):
        read_cursor(cursor, "newest")


def test_the_first_line_is_bounded():
    assert first_line("Title\nbody") == "Title"
    assert first_line("Windows\r\nline") == "Windows"
    assert first_line("x" * 200) == "x" * 200
    assert first_line("x" * 256) == "x" * 199 + "…"


def test_the_listing_shows_memories_still_ingesting_but_never_expired_ones():
    for query in (cypher_lists.LIST_NEWEST_ALL, cypher_lists.LIST_NEWEST_IN,
                  cypher_lists.LIST_OLDEST_ALL, cypher_lists.LIST_OLDEST_IN):
        assert "m.ready" not in query.split("RETURN")[0]
        assert "m.expires_at > $now" in query and "m.superseded_by IS NULL" in query
        assert "$tags_all" in query and "LIMIT $limit" in query


def test_the_write_policy_setting_is_checked_at_start():
    settings = Settings.from_env({"ZAPOMNI_WRITE_POLICY": '{"*": {"min_confidence": 0.5}, '
                                  '"chat": {"max_per_thread": 50}}'})
    assert rule_for(settings.write_policy, "notes") == Rule(min_confidence=0.5)
    assert rule_for(settings.write_policy, "chat") == Rule(max_per_thread=50)
    assert rule_for("", "chat") is None and parse_policy("  ") == {}


@pytest.mark.parametrize(("value", "message"), [
    ("{bad", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ('{"Chat!": {}}', "'Chat!' is not a namespace name"),
    ('{"chat": {"max_per_thread": 0}}', "chat.max_per_thread: must be at least 1"),
    ('{"chat": {"window_seconds": 9999999}}', "chat.window_seconds: must be at most 2592000"),
    ('{"*": {"min_confidence": 1.5}}', r"\*.min_confidence: must be at most 1"),
    ('{"*": {"colour": "red"}}', r"\*.colour: unknown field"),
    ('{"chat": 5}', "chat: expected a JSON object, got an integer"),
])
def test_a_bad_write_policy_stops_the_process_naming_the_setting(value, message):
    with pytest.raises(SystemExit, match=f"^zapomni: bad setting: ZAPOMNI_WRITE_POLICY: "
                                         f"{message}"):
        Settings.from_env({"ZAPOMNI_WRITE_POLICY": value})


def test_confidence_is_judged_only_when_stated_unless_required():
    rule = Rule(min_confidence=0.5)
    unsure = decode_add_memory("maybe", {"confidence": 0.49}, "chat")
    assert judge_confidence(rule, unsure).startswith("metadata.confidence: 0.49 is below "
                                                     "the minimum of 0.5 in namespace 'chat'")
    assert judge_confidence(rule, decode_add_memory("sure", {"confidence": 0.5}, None)) == ""
    assert judge_confidence(rule, decode_add_memory("plain", None, None)) == ""
    strict = Rule(min_confidence=0.5, require_confidence=True)
    assert judge_confidence(strict, decode_add_memory("plain", None, None)).startswith(
        "metadata.confidence: required in namespace 'default'")
