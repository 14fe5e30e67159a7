"""Time words at the ends of the calendar and in any script (services/query/when.py): a date
at year 9999's end, a month whose next one is past it, an as_of anywhere in the API's range,
and a query whose lower case is longer than itself (U+0130) read without an exception, each
window inside what can be shown as ISO-8601 and holding the date it names, the words found
a part of the query as written. Then the parser fuzzed over the whole range with hypothesis."""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zapomni.services.query.when import (
    DAY,
    MONTHS,
    WEEKDAYS,
    civil_from_days,
    days_from_civil,
    month_span,
    read_time,
)
from zapomni.shared.protocol.times import EARLIEST, LATEST, iso

LATE = datetime(9999, 12, 30, tzinfo=UTC).timestamp()  # the latest as_of the API takes
FIRST = datetime(1, 1, 1, tzinfo=UTC).timestamp()  # what ISO-8601 (datetime) can show
LAST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def seconds(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_a_date_at_the_end_of_year_9999_is_its_day():
    """It raised OverflowError in day_span (the day after it is year 10000): a 500."""
    when = read_time("what happened on 9999-12-31", LATE)
    assert when.words == "9999-12-31"
    assert (when.lo, when.hi) == (seconds("9999-12-31"), LAST)
    assert iso(when.hi) == "9999-12-31T23:59:59Z"


def test_the_last_month_of_9999_ends_inside_the_range():
    """month_span(9999, 12) raised OverflowError, "in December" with a late as_of too."""
    assert month_span(9999, 12) == (seconds("9999-12-01"), seconds("9999-12-01") + 31 * DAY)
    when = read_time("what did I do in December?", LATE)
    assert (when.lo, when.hi) == (seconds("9999-12-01"), LAST)


def test_time_words_near_year_one_stay_inside_the_range():
    early = datetime(1, 1, 3, 12, tzinfo=UTC).timestamp()
    for query in ("what did I do the day before yesterday?", "what happened last week?",
                  "last month", "last year", "what was it last weekend", "999 years ago",
                  "in December", "on Sunday"):
        when = read_time(query, early)
        assert when.window, query
        assert FIRST <= when.lo <= when.hi <= LAST, query


def test_words_are_reported_as_the_query_writes_them_in_any_script():
    """A match in query.lower() sliced the query: "İ" lowers to two characters, so the
    words of "İİİ yesterday" came out as 'terday'."""
    assert read_time("İİİ yesterday", LATE).words == "yesterday"
    assert read_time("İstanbul: what did I do YESTERDAY, currently?", LATE).words == \
        "YESTERDAY, currently"
    assert read_time("Where did İlkay live initially?", LATE).words == "initially"


def test_the_calendar_arithmetic_agrees_with_datetime_across_its_range():
    epoch = date(1970, 1, 1).toordinal()
    for day in (date.min, date(1, 3, 1), date(1582, 10, 15), date(1600, 2, 29),
                date(1900, 3, 1), date(1970, 1, 1), date(2000, 2, 29), date(2026, 2, 28),
                date.max):
        days = day.toordinal() - epoch
        assert days_from_civil(day.year, day.month, day.day) == days
        assert civil_from_days(days) == (day.year, day.month, day.day)


@settings(max_examples=1000, deadline=None, database=None, derandomize=True)
@given(st.integers(min_value=date.min.toordinal(), max_value=date.max.toordinal()))
def test_every_day_of_the_range_round_trips(ordinal):
    day = date.fromordinal(ordinal)
    days = ordinal - date(1970, 1, 1).toordinal()
    assert days_from_civil(day.year, day.month, day.day) == days
    assert civil_from_days(days) == (day.year, day.month, day.day)


# ---- the fuzz: time expressions of every rule, any date of the range, any as_of ----

# any as_of the API takes, and its ends; any date, the range's ends drawn often
AS_OF = st.one_of(st.floats(min_value=EARLIEST, max_value=LATEST, allow_nan=False),
                  st.sampled_from([EARLIEST, LATEST, LAST, FIRST]))
ENDS = [date.min, date(1, 1, 31), date(1, 12, 31), date(9999, 1, 1), date(9999, 12, 1),
        date(9999, 12, 30), date.max]
DATES = st.one_of(st.dates(min_value=date.min, max_value=date.max), st.sampled_from(ENDS))
WRITTEN_YEARS = st.dates(min_value=date(1900, 1, 1), max_value=date(2099, 12, 31))
NUMBER = st.sampled_from(["a", "an", "one", "two", "twelve", "a couple of", "a few",
                          "several", "1", "7", "42", "999"])
UNIT = st.sampled_from(["day", "days", "week", "weeks", "month", "months", "year", "years"])
NOISE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def expression(draw) -> tuple[str, date | None]:
    """A time expression and the date it names outright (None for a relative one). Dates
    in words name years 1900-2099, the years the rules read in words."""
    day, worded = draw(DATES), draw(WRITTEN_YEARS)
    month, named_month = MONTHS[day.month - 1], MONTHS[worded.month - 1]
    named = {
        "iso": (f"on {day.isoformat()}", day),
        "day month year": (f"on {worded.day} {named_month} {worded.year}", worded),
        "month day, year": (f"{named_month.title()} {worded.day}, {worded.year}", worded),
        "month year": (f"in {named_month} {worded.year}", worded),
    }
    relative = [
        f"{draw(NUMBER)} {draw(UNIT)} ago",
        f"the past {draw(NUMBER)} {draw(UNIT)}",
        f"{draw(st.sampled_from(['last', 'this', 'past', 'previous']))} "
        f"{draw(st.sampled_from(['week', 'weekend', 'month', 'year']))}",
        draw(st.sampled_from(["yesterday", "today", "the day before yesterday", "tonight"])),
        f"last {draw(st.sampled_from(WEEKDAYS))}",
        f"{draw(st.sampled_from(['in', 'since', 'before', 'until', 'by']))} {month}",
        f"since {month} {day.day}",
        f"in {day.year:04d}",
    ]
    kind = draw(st.sampled_from([*named, "relative"]))
    if kind == "relative":
        return draw(st.sampled_from(relative)), None
    return named[kind]


@settings(max_examples=1500, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(expression(), NOISE, NOISE, st.sampled_from(["", " now", " initially", " Now?"]),
       AS_OF, st.booleans())
def test_the_time_words_of_any_question_at_any_as_of(said, before, after, order, as_of,
                                                     shout):
    words, named = said
    query = f"{before} What happened {words}{order} {after}"
    query = query.upper() if shout else query
    when = read_time(query, as_of)  # no exception, whatever the date and the as_of
    for part in filter(None, when.words.split(", ")):  # the words as the query writes them
        assert part in query
    for end in (when.lo, when.hi):
        assert end is None or (math.isfinite(end) and FIRST <= end <= LAST)
        assert end is None or re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z",
                                           iso(end))
    if when.lo is not None and when.hi is not None:
        assert when.lo <= when.hi
    found = when.words.split(", ")[0].lower()
    if named is not None and when.window and found == words.lower().removeprefix("on "):
        # a date named outright: the window holds all of that day (its month for "in")
        start = datetime(named.year, named.month, named.day, tzinfo=UTC).timestamp()
        assert when.lo is None or when.lo <= start
        last = min(LAST, start + DAY - 1)
        assert when.hi is None or last <= when.hi


def test_a_window_of_a_date_named_is_that_day():
    for text in ("0001-01-01", "1969-07-20", "2024-02-29", "9999-12-30"):
        start = seconds(text)
        when = read_time(f"what happened on {text}", LATE)
        assert (when.lo, when.hi) == (start, min(LAST, start + DAY)), text
    assert read_time("on 2026-02-30", LATE).lo is None  # no such day: no window
    assert not read_time("on 0000-01-01", LATE).window  # no year 0
    assert read_time("yesterday", LATE).lo == seconds("9999-12-29")
    # before the first day ISO-8601 shows: the window is held at it
    assert (read_time("yesterday", FIRST + DAY / 2).lo, read_time("yesterday", FIRST + DAY / 2
                                                                  ).hi) == (FIRST, FIRST)
