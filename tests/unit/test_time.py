"""The pure parts of event time: time words read against as_of, the prior's fit, which end of
a changed fact a question asks for, and how changed statements are paired and ordered."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from zapomni.services.query.fusion import Candidate
from zapomni.services.query.timeline import (
    arrange,
    asked_order,
    pair_statements,
    subject_of,
    time_terms,
)
from zapomni.services.query.when import DAY, When, closeness, read_time
from zapomni.shared.protocol.answers import SignalMatch

FRIDAY = datetime(2023, 5, 26, 12, 0, tzinfo=UTC).timestamp()  # as_of: Friday 26 May 2023


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("query", "words", "lo", "hi", "order"), [
    ("What did I buy yesterday?", "yesterday", "2023-05-25", "2023-05-26", ""),
    ("What did we discuss last week?", "last week", "2023-05-15", "2023-05-22", ""),
    ("What happened three weeks ago?", "three weeks ago", "2023-05-02", "2023-05-09",
     ""),
    ("How many appointments did I have in March?", "in March", "2023-03-01", "2023-04-01", ""),
    ("Where was I in June?", "in June", "2022-06-01", "2022-07-01", ""),  # the latest June
    ("What did I eat on 4 May 2023?", "4 May 2023", "2023-05-04", "2023-05-05", ""),
    ("What did I do on May 4th, 2022?", "May 4th, 2022", "2022-05-04", "2022-05-05", ""),
    ("What did I do last Saturday?", "last Saturday", "2023-05-20", "2023-05-21", ""),
    ("What did I do a couple of days ago?", "a couple of days ago", "2023-05-24", "2023-05-25",
     ""),
    ("What changed since March?", "since March", "2023-03-01", None, ""),
    ("What did I buy before May 2023?", "before May 2023", None, "2023-05-01", ""),
    ("Where does the user live now?", "now", None, None, "latest"),
    ("Which service did I start using most recently?", "most recently", None, None, "latest"),
    ("Where did the user live initially?", "initially", None, None, "earliest"),
    ("Where did I use to work?", "use to", None, None, "earliest"),
    ("Where did I live before?", "before", None, None, "earliest"),
    ("What did I eat with the team before the meeting?", "", None, None, ""),
    ("We talked about the weather", "", None, None, ""),  # "we" is no date
])
def test_time_words_are_read_against_as_of(query, words, lo, hi, order):
    when = read_time(query, FRIDAY)
    assert (when.words, when.order) == (words, order)
    assert (when.lo, when.hi) == (None if lo is None else day(lo), None if hi is None
                                  else day(hi))


def test_the_prior_is_one_inside_the_window_and_halves_every_half_width_outside():
    week = When(lo=day("2023-05-15"), hi=day("2023-05-22"))
    assert closeness(day("2023-05-18"), week) == 1.0
    assert closeness(day("2023-05-22") + 3.5 * DAY, week) == pytest.approx(0.5)
    assert closeness(day("2023-05-15") - 7 * DAY, week) == pytest.approx(0.25)
    since = When(lo=day("2023-03-01"))
    assert closeness(day("2023-03-01") - 30 * DAY, since) == pytest.approx(0.5)


@pytest.mark.parametrize(("query", "order"), [
    ("Where does Mira live?", "present"),
    ("What car do I drive?", "present"),
    ("Where does the user live now?", "latest"),
    ("Where did Mira live?", ""),
    ("What car did Mira drive initially?", "earliest"),
    ("Which city was the conference in?", ""),
])
def test_a_present_tense_question_asks_for_the_present(query, order):
    assert asked_order(read_time(query, FRIDAY), query) == order


def test_the_subject_is_the_speaker_or_the_name_a_statement_starts_with():
    assert subject_of("I live in Kraków.", "user") == ("user", "", "self")
    assert subject_of("Kraków is lovely.", "assistant") == ("assistant", "", "Kraków")
    assert subject_of("Mira has moved to Porto.", None) == ("", "", "Mira")
    assert subject_of("The Halcyon deadline moved.", None) == ("", "", "Halcyon")
    assert subject_of("[8 May, 2023] Caroline: I went to a support group.", None) == (
        "", "Caroline", "self")
    assert subject_of("The budget is 40,000 euros.", None) == ("", "", "")


def test_statements_pair_with_their_closest_on_the_other_side_of_time():
    times = {"lisbon": (1.0, 1.0), "orbitech": (1.0, 2.0), "porto": (5.0, 5.0),
             "glasswing": (6.0, 6.0), "braga": (9.0, 9.0)}
    sims = {("lisbon", "porto"): 0.77, ("lisbon", "glasswing"): 0.5, ("orbitech", "porto"): 0.55,
            ("orbitech", "glasswing"): 0.6, ("porto", "braga"): 0.8, ("lisbon", "braga"): 0.7,
            ("orbitech", "braga"): 0.5, ("glasswing", "braga"): 0.4}
    chains = pair_statements(list(sims), sims, times, set())
    # a city changed twice is a chain of three; the job is its own
    assert chains == [["lisbon", "porto", "braga"], ["orbitech", "glasswing"]]
    assert pair_statements(list(sims), {k: 0.99 for k in sims}, times, set()) == []  # restated
    low = {("lisbon", "porto"): 0.35}
    assert pair_statements(list(low), low, times, set()) == []
    assert pair_statements(list(low), low, times, {"porto"}) == [["lisbon", "porto"]]


def test_a_chain_is_ordered_over_the_places_it_holds_and_marked():
    candidates = [Candidate(row=[m, f"{m}:0", m, 0.0, 0, 1], score=s)
                  for m, s in (("old", 0.9), ("other", 0.8), ("new", 0.7))]
    firsts = {"old": 0, "other": 1, "new": 2}
    now = arrange(candidates, firsts, [["old", "new"]], "latest")
    assert [c.memory_id for c in now] == ["new", "other", "old"]
    assert now[2].outdated_by == "new" and now[2].why["currency"].newer == "new"
    assert now[0].outdated_by == "" and now[0].why["currency"].older == "old"
    first = arrange(candidates, firsts, [["old", "new"]], "earliest")
    assert [c.memory_id for c in first] == ["old", "other", "new"]
    past = arrange(candidates, firsts, [["old", "new"]], "")
    assert [c.memory_id for c in past] == ["old", "other", "new"]
    assert past[0].outdated_by == "new"  # marked, not moved
    # a present-tense question: only a chain whose newest says it changed (STRONG) moves
    kept = arrange(candidates, firsts, [["old", "new"]], "latest", only=set())
    assert [c.memory_id for c in kept] == ["old", "other", "new"]
    assert kept[0].outdated_by == "new"
    moved = arrange(candidates, firsts, [["old", "new"]], "latest", only={"new"})
    assert [c.memory_id for c in moved] == ["new", "other", "old"]


def test_a_moved_statement_shows_the_score_it_was_ranked_by():
    """Issue 51: "where did I live initially?" showed Kraków first with 0.755 and Gdańsk third
    with 0.931. A statement a chain moves takes the score of the place it takes, and
    why.currency.points says by how much."""
    candidates = [Candidate(row=[m, f"{m}:0", m, 0.0, 0, 1], score=s)
                  for m, s in (("new", 0.931), ("other", 0.8), ("old", 0.755))]
    first = arrange(candidates, {"new": 0, "other": 1, "old": 2}, [["old", "new"]], "earliest")
    assert [(c.memory_id, c.score) for c in first] == [("old", 0.931), ("other", 0.8),
                                                        ("new", 0.755)]
    assert first[0].why["currency"].points == pytest.approx(0.176)
    assert first[2].why["currency"].points == pytest.approx(-0.176)
    marked = arrange(candidates, {"new": 0, "other": 1, "old": 2}, [["old", "new"]], "")
    assert marked[0].score == 0.931 and marked[0].why["currency"].points is msgspec.UNSET


def test_a_chain_moves_only_where_its_wanted_statement_answers_the_question():
    """The user's intro ("I'm a nurse and I live in Kraków") and "I moved to Gdańsk" are a
    chain; asked about the job, the intro matches, the move does not (cosine 0.14 against
    0.40): the move is not put first, both stay marked."""
    def found(memory: str, score: float, cosine: float) -> Candidate:
        return Candidate(row=[memory, f"{memory}:0", memory, 0.0, 0, 1], score=score,
                         why={"vector": SignalMatch(rank=1, score=cosine)})

    job = [found("intro", 0.62, 0.40), found("tired", 0.41, 0.26), found("move", 0.34, 0.14)]
    firsts = {"intro": 0, "tired": 1, "move": 2}
    kept = arrange(job, firsts, [["intro", "move"]], "latest")
    assert [c.memory_id for c in kept] == ["intro", "tired", "move"]
    assert kept[0].outdated_by == "move"
    city = [found("intro", 0.95, 0.33), found("tired", 0.41, 0.26), found("move", 0.75, 0.30)]
    moved = arrange(city, firsts, [["intro", "move"]], "latest")
    assert [(c.memory_id, c.score) for c in moved] == [("move", 0.95), ("tired", 0.41),
                                                       ("intro", 0.75)]
    # a chain that gained a third statement by a looser likeness (./dev bench currency: "I
    # work at Orbitech", "I started a new job at Northwind", then "I moved to Bergen"): what
    # answers the question moves, the move to Bergen stays where it ranks
    work = [found("orbitech", 0.97, 0.49), found("other", 0.8, 0.3),
            found("northwind", 0.71, 0.31), found("bergen", 0.64, 0.21)]
    now = arrange(work, {"orbitech": 0, "other": 1, "northwind": 2, "bergen": 3},
                  [["orbitech", "northwind", "bergen"]], "latest")
    assert [(c.memory_id, c.score) for c in now] == [
        ("northwind", 0.97), ("other", 0.8), ("orbitech", 0.71), ("bergen", 0.64)]
    assert [c.outdated_by for c in now] == ["bergen", "", "bergen", ""]  # the chain's marks


@pytest.mark.parametrize("which", ["last", "this", "past", "the past", "previous"])
@pytest.mark.parametrize("unit", ["week", "weekend", "month", "year"])
def test_every_last_this_or_past_unit_is_a_window_up_to_as_of(which, unit):
    """"the past weekend" once raised KeyError in the query service (a 500 for the user)."""
    when = read_time(f"What did I cook {which} {unit}?", FRIDAY)
    assert when.words == f"{which} {unit}"
    assert when.lo is not None and when.hi is not None
    assert when.lo < when.hi <= FRIDAY


@pytest.mark.parametrize(("query", "timed", "alone"), [
    ("What did I do last week?", {"last", "week"}, True),
    ("What happened yesterday?", {"yesterday"}, True),
    ("What did I do on Saturday?", set(), True),  # a day's name stays a word
    ("Where did I go hiking last week?", {"last", "week"}, False),
    ("What did Caroline paint three weeks ago?", {"three", "weeks", "ago"}, False),
    ("Where did Caroline move from 4 years ago?", set(), False),  # years: words still
    ("What did we see on the camping trip last year?", set(), False),
    ("What did we eat in March 2023?", set(), False),  # March may be in the passage
    ("What is my job now?", set(), False),  # no window
    ("Where did I live initially?", set(), False),
])
def test_the_words_of_a_relative_window_are_the_questions_time(query, timed, alone):
    """Issue 51: "week" of "What did I do last week?" matched "for a week in July" first; a
    question that says nothing but its time is asked about its window."""
    assert time_terms(query, read_time(query, FRIDAY)) == (frozenset(timed), alone)
