"""The context tools' arguments and the history cursor (shared/conversation.py)."""

from __future__ import annotations

import base64

import pytest

from shared.conversation import (
    TokenCounter,
    decode_context,
    decode_cursor,
    decode_history,
    encode_cursor,
)
from shared.errors import InvalidInput
from shared.messages import ContextRequest, HistoryRequest

MEMORY = "mem_" + "ab" * 16
NOT_A_CURSOR = "before: not a cursor from get_history"


def refusal(call, *args) -> str:
    with pytest.raises(InvalidInput) as refused:
        call(*args)
    return refused.value.message


def test_a_cursor_goes_back_to_where_the_page_ended():
    cursor = encode_cursor(1_763_938_000_123_456, MEMORY)
    assert cursor.isascii() and "=" not in cursor
    assert decode_cursor(cursor) == (1_763_938_000_123_456, MEMORY)
    assert decode_history("t", None, None, cursor) == HistoryRequest(
        thread="t", before_us=1_763_938_000_123_456, before_id=MEMORY)
    assert decode_history("t", "ns", 3, None) == HistoryRequest(thread="t", namespace="ns",
                                                                limit=3)


@pytest.mark.parametrize("cursor", [
    "", "yesterday", "é", "\ud800", "A" * 201, 5, ["x"],
    base64.urlsafe_b64encode(b'[1.5, "mem_' + b"ab" * 16 + b'"]').decode(),  # not whole us
    base64.urlsafe_b64encode(b'[15, "mem_1"]').decode(),  # not a memory id
    base64.urlsafe_b64encode(b'{"at": 15}').decode(),
])
def test_anything_else_is_not_a_cursor(cursor):
    assert refusal(decode_history, "t", None, None, cursor).startswith(NOT_A_CURSOR)


def test_context_arguments_take_the_defaults_and_strip_the_query():
    assert decode_context("  what now? ", None, None, None, None, None) == ContextRequest(
        query="what now?")
    assert decode_context("q", "chat", "ns", 100, 0, 50) == ContextRequest(
        query="q", thread="chat", namespace="ns", token_budget=100, history_turns=0,
        memories=50)


@pytest.mark.parametrize(("args", "message"), [
    (("q", None, None, 99, None, None), "token_budget: must be at least 100"),
    (("q", None, None, 100_001, None, None), "token_budget: must be at most 100000"),
    (("q", None, None, None, 101, None), "history_turns: must be at most 100"),
    (("q", None, None, None, None, -1), "memories: must be at least 0"),
    (("q", "", None, None, None, None), "thread: expected a string of 1-512 characters "
     '(the metadata "thread" the turns were added with), got 0 characters'),
    (("q", 7, None, None, None, None), "thread: expected a string of 1-512 characters"),
    (("a\ud800", None, None, None, None, None), "query: not valid UTF-8"),
    ((" ", None, None, None, None, None), "query: must not be empty or only whitespace"),
    (("q" * 2001, None, None, None, None, None), "query: too long (at most 2,000 characters)"),
])
def test_context_arguments_are_refused_with_the_field_and_the_limit(args, message):
    assert refusal(decode_context, *args).startswith(message)


def test_lines_joined_by_newlines_count_as_the_sum_of_their_counts():
    counter = TokenCounter()
    lines = ["## Relevant memories", f"- [{MEMORY} | fact | 2026-11-23] Ana: naïve café?",
             "日本語のテキスト", "x" * 300]
    assert counter.count("\n".join(lines)) == sum(counter.count_each(lines))
    assert counter.count_each([]) == []
