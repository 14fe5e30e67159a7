"""How a question names a symbol of code (services/query/symbols.py): written out, by the
words of its name, or by its docstring's words."""

from __future__ import annotations

from zapomni.services.query.symbols import asked_words, match_score, written


def score(query: str, key: str, summary: str = "") -> float:
    return match_score(key, summary, asked_words(query), written(query))


def test_a_name_written_out_or_its_dotted_tail_names_the_symbol_first():
    query = "where is BaseEventLoop.run_until_complete defined"
    assert written(query) == {"BaseEventLoop.run_until_complete"}
    exact = score(query, "asyncio.base_events.BaseEventLoop.run_until_complete")
    other = score(query, "asyncio.events.AbstractEventLoop.run_until_complete")
    assert exact > other > 0
    assert score("who calls asyncio.tasks.Task", "asyncio.tasks.Task") > 10


def test_the_words_of_a_name_count_when_at_least_half_are_asked():
    query = "where does a bounded semaphore raise when released too many times"
    assert score(query, "asyncio.locks.BoundedSemaphore") > score(
        query, "asyncio.locks.Semaphore") > 0
    assert score(query, "asyncio.locks.BoundedSemaphore.release") > score(
        query, "asyncio.locks.Lock.release") > 0
    assert score(query, "asyncio.tasks.run_coroutine_threadsafe") == 0


def test_a_docstring_names_a_symbol_with_two_of_the_questions_words():
    query = "where is an awaitable protected from being cancelled"
    assert score(query, "asyncio.tasks.shield",
                 "Wait for a future, shielding it from cancellation.") == 0  # one word
    assert score(query, "asyncio.tasks.shield",
                 "Protect an awaitable object from being cancelled.") > 1
