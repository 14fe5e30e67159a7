"""The context tools' arguments and the history cursor (shared/text/conversation.py)."""

from __future__ import annotations

import base64

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from zapomni.services.query.context import TokenCounter, fit, one_line
from zapomni.shared.protocol.answers import ContextMemory, Turn
from zapomni.shared.protocol.api import ContextRequest, HistoryRequest
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.text.conversation import (
    decode_context,
    decode_cursor,
    decode_history,
    encode_cursor,
)

MEMORY = "mem_" + "ab" * 16
NOT_A_CURSOR = "before: not a cursor from get_history"


def refusal(call, *args) -> str:
    with pytest.raises(InvalidInput) as refused:
        call(*args)
    return refused.value.message


def test_a_cursor_goes_back_to_where_the_page_ended():
    cursor = encode_cursor(1_700_000_000_000_000, 1_763_938_000_123_456, MEMORY)
    assert cursor.isascii() and "=" not in cursor
    assert decode_cursor(cursor) == (1_700_000_000_000_000, 1_763_938_000_123_456, MEMORY)
    assert decode_history("t", None, None, cursor) == HistoryRequest(
        thread="t", before_us=1_700_000_000_000_000, before_cu=1_763_938_000_123_456,
        before_id=MEMORY)
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


COUNTER = TokenCounter()


def test_lines_joined_by_newlines_count_as_the_sum_of_their_counts():
    lines = ["## Relevant memories", f"- [{MEMORY} | fact | 2026-11-23] Ana: naïve café?",
             "日本語のテキスト", "x" * 300, "\u0301accent first", "bell\x07 ring", "🦀 crab"]
    assert COUNTER.count("\n".join(lines)) == sum(COUNTER.count(line) for line in lines)
    assert COUNTER.count("\n\n".join(lines)) == COUNTER.count(" ".join(lines))


@hypothesis_settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.lists(st.text(st.characters(codec="utf-8"), min_size=1, max_size=60), max_size=6))
def test_any_text_one_line_each_adds_up(texts):
    """What build_context relies on to count a prompt by its parts (services/query/context.py
    puts each item on one line, whitespace collapsed)."""
    lines = [one_line(text) for text in texts]
    assert COUNTER.count("\n".join(lines)) == sum(COUNTER.count(line) for line in lines)


WORDS = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=120),
    st.lists(st.sampled_from(["alpha", "Beta,", "δέλτα", "日本", "🦀", "x" * 30, "naïve"]),
             min_size=1, max_size=90).map(" ".join))


@hypothesis_settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=200).filter(str.strip),
       st.lists(WORDS, max_size=6), st.lists(WORDS, max_size=4), st.integers(100, 600))
def test_a_context_stays_in_its_budget_and_counts_its_own_prompt(query, said, found, budget):
    request = ContextRequest(query=query.strip(), thread="t", token_budget=budget)
    current = f"## Current message\n{request.query}"
    needed = COUNTER.count(current)
    assume(needed <= budget)
    turns = [Turn(memory_id=f"mem_{i:032x}", text=text, metadata={}, created_at="2026")
             for i, text in enumerate(said)]
    memories = [ContextMemory(memory_id=f"mem_{i:032x}", text=text, score=1.0 - i / 10,
                              why={}, metadata={}, created_at="2026-11-24T10:00:00+00:00",
                              occurred_at="2026-11-23T10:00:00+00:00", memory_type="note")
                for i, text in enumerate(found, 10)]
    context = fit(request, turns, memories, COUNTER, current, needed)
    info = context.metadata
    whole = fit(msgspec.structs.replace(request, token_budget=100_000), turns, memories,
                COUNTER, current, needed).metadata.total_tokens
    exact = fit(msgspec.structs.replace(request, token_budget=max(100, whole)), turns,
                memories, COUNTER, current, needed).metadata
    assert not exact.truncated and exact.total_tokens == whole  # an exact fit loses nothing
    assert info.total_tokens == COUNTER.count(context.prompt) <= budget
    assert context.history == turns[len(turns) - info.history_count:]  # the newest
    shown = {m.memory_id for m in context.memories}
    assert context.memories == [m for m in memories if m.memory_id in shown]  # best first
    assert info.truncated is (info.history_count < len(turns)
                              or info.memory_count < len(memories))
    lines = [f"- [23 Nov 2026] {one_line(m.text)}" for m in context.memories]
    said = [one_line(t.text) for t in context.history]
    sections = ([["## Relevant memories", *lines]] if lines else []) + (
        [["## Recent conversation", *said]] if said else [])
    assert context.prompt == "\n\n".join([*("\n".join(s) for s in sections), current])
    # and nothing was left out that would have fitted: each memory passed over was too long
    # for what the better ones left, and the next older turn too long for the rest
    room, used = budget - needed, 0
    for memory in memories:
        cost = COUNTER.count(f"- [23 Nov 2026] {one_line(memory.text)}") + (
            0 if used else COUNTER.count("## Relevant memories"))
        if memory.memory_id in shown:
            used += cost
        else:
            assert used + cost > room
    if info.history_count < len(turns):
        left = turns[len(turns) - info.history_count - 1]
        heading = 0 if said else COUNTER.count("## Recent conversation")
        assert info.total_tokens + heading + COUNTER.count(one_line(left.text)) > budget
