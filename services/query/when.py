"""Time words in a question, read against the question's own "now" (``as_of``): a window of
event time ("yesterday", "last week", "three weeks ago", "in March", "on 4 May 2023",
"since June") and which end of a changed fact it asks for ("now", "currently", "latest":
the newest; "initially", "used to", "the first time", "before?": the oldest). Read-only,
pure: services/query/search.py turns the window into a soft prior over event time (never a
filter) and services/query/timeline.py reads the order.

A rule set of our own, not a date library: dateparser 1.5.0 (BSD-3-Clause), measured
2026-11-27 on 11 such questions on this 2-core host at load 15, took 0.83 s to import, 752 ms
for its first search_dates and then 4.0 ms a question on average (the target is 1 ms), read
"we" as a date, gave points where the question names a span ("in March": 26 March) and knows
no "initially" or "currently". These rules take ~20 µs a question (tests/bench/when.py).

Calendar arithmetic is in UTC, on day numbers (days since 1970-01-01, proleptic Gregorian:
``days_from_civil``/``civil_from_days``, H. Hinnant's algorithms), never on datetimes: a day
after 9999-12-31 or before 0001-01-01 is a number like any other, where datetime raised
OverflowError (issue 45: "on 9999-12-31" was a 500). The window is then held inside what
ISO-8601 can show (FIRST_SECOND..LAST_SECOND, datetime's range), where the answer shows it.
The patterns match a lower-case copy of the query whose offsets are the query's own, so
the words reported are the query's (U+0130 "İ" lowers to two characters: it stays as is).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

DAY = 86400.0
# the window's ends stay where ISO-8601 (datetime) can show them: 0001-01-01T00:00:00Z to
# 9999-12-31T23:59:59Z (a whole second: a fraction below the next day rounds up to it)
FIRST_SECOND = -62135596800.0
LAST_SECOND = 253402300799.0
MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
          "september", "october", "november", "december")
SHORT_MONTHS = {m[:3]: i for i, m in enumerate(MONTHS, start=1)} | {"sept": 9}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
           "a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}
UNITS = {"day": DAY, "week": 7 * DAY, "month": 30.44 * DAY, "year": 365.25 * DAY}

_NUM = r"(\d{1,3}|a couple of|couple of|a few|few|several|an?|one|two|three|four|five|six|" \
       r"seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(day|week|month|year)s?"
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|" \
         r"sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"

LATEST = re.compile(r"\b(now|currently|current|these days|nowadays|at the moment|at present|"
                    r"presently|latest|most recent(?:ly)?|newest|any ?more|still)\b")
EARLIEST = re.compile(r"\b(initially|originally|at first|at the (?:start|beginning)|"
                      r"in the beginning|(?:the|my|our|his|her|their) first|first time|"
                      r"used to|use to|previously|formerly|earlier|before(?=\s*(?:[?.!]|$|that\b|"
                      r"then\b)))")


@dataclass(frozen=True)
class When:
    """What a question's time words ask for. ``lo``/``hi``: a window of event time (unix
    seconds; None: open at that end; both None: no window). ``order``: "latest",
    "earliest" or "" (none said). ``words``: the expressions found, as written."""

    words: str = ""
    lo: float | None = None
    hi: float | None = None
    order: str = ""

    @property
    def window(self) -> bool:
        return self.lo is not None or self.hi is not None


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a date of the proleptic Gregorian calendar, any year."""
    year -= month <= 2
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146097 + of_era * 365 + of_era // 4 - of_era // 100 + of_year - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The date (year, month, day) of a day number, any day."""
    days += 719468
    era = days // 146097
    of_era = days - era * 146097
    year_of_era = (of_era - of_era // 1460 + of_era // 36524 - of_era // 146096) // 365
    of_year = of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * of_year + 2) // 153  # months from March
    month = shifted + (3 if shifted < 10 else -9)
    return year_of_era + era * 400 + (month <= 2), month, of_year - (153 * shifted + 2) // 5 + 1


def month_days(year: int, month: int) -> int:
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return MONTH_DAYS[month - 1] + leap


def weekday(day: int) -> int:
    """Monday 0 ... Sunday 6 (1970-01-01 was a Thursday)."""
    return (day + 3) % 7


@dataclass(frozen=True)
class Now:
    """The question's "now": unix seconds, its day number and that day's date."""

    at: float
    day: int
    year: int
    month: int

    @classmethod
    def of(cls, seconds: float) -> Now:
        day = math.floor(seconds / DAY)
        year, month, _ = civil_from_days(day)
        return cls(seconds, day, year, month)


def day_span(day: int) -> tuple[float, float]:
    return day * DAY, (day + 1) * DAY


def month_span(year: int, month: int) -> tuple[float, float]:
    first = days_from_civil(year, month, 1)
    return first * DAY, (first + month_days(year, month)) * DAY


def year_span(year: int) -> tuple[float, float]:
    return days_from_civil(year, 1, 1) * DAY, days_from_civil(year + 1, 1, 1) * DAY


def month_number(word: str) -> int:
    return SHORT_MONTHS[word[:4] if word.startswith("sept") else word[:3]]


def recent_month(month: int, now: Now) -> int:
    """The year of the latest ``month`` that began no later than ``now``."""
    return now.year if month <= now.month else now.year - 1


def date_day(year: int, month: int, day: int) -> int | None:
    """The day number of a date; None if there is no such day (30 February)."""
    if 1 <= month <= 12 and 1 <= day <= month_days(year, month):
        return days_from_civil(year, month, day)
    return None


# ---- the window rules, each (pattern, function(match, now) -> (lo, hi) | None) ----


def _ago(m: re.Match, now: Now) -> tuple[float, float]:
    count = NUMBERS.get(m[1]) or int(m[1])
    unit = UNITS[m[2]]
    point = now.at - count * unit
    if m[2] == "day":
        return day_span(math.floor(point / DAY))
    return point - unit / 2, point + unit / 2


def _relative_day(m: re.Match, now: Now) -> tuple[float, float]:
    back = {"today": 0, "tonight": 0, "this morning": 0, "this afternoon": 0,
            "this evening": 0, "yesterday": 1, "the day before yesterday": 2}[m[1]]
    return day_span(now.day - back)


def _last_unit(m: re.Match, now: Now) -> tuple[float, float]:
    """"last week": the calendar week before this one (Monday first); "this week": from its
    start to now; "past week": the seven days before now."""
    which, unit = m[1], m[2]
    if which in ("past", "last few", "the past") and unit != "weekend":
        return now.at - UNITS[unit], now.at
    if unit == "week":
        start = now.day - weekday(now.day)
        previous = start - 7
    elif unit == "weekend":
        saturday = now.day - ((weekday(now.day) - 5) % 7 or 7)
        return saturday * DAY, (saturday + 2) * DAY
    elif unit == "month":
        start = days_from_civil(now.year, now.month, 1)
        previous = days_from_civil(now.year - (now.month == 1), (now.month - 2) % 12 + 1, 1)
    else:
        start = days_from_civil(now.year, 1, 1)
        previous = days_from_civil(now.year - 1, 1, 1)
    if which == "this":
        return start * DAY, now.at
    return previous * DAY, start * DAY


def _past_n(m: re.Match, now: Now) -> tuple[float, float]:
    count = NUMBERS.get(m[1]) or int(m[1])
    return now.at - count * UNITS[m[2]], now.at


def _weekday(m: re.Match, now: Now) -> tuple[float, float]:
    """"last Saturday", "on Saturday": the latest such day before today."""
    back = (weekday(now.day) - WEEKDAYS.index(m[1])) % 7 or 7
    return day_span(now.day - back)


def _month(m: re.Match, now: Now) -> tuple[float, float]:
    month = month_number(m[1])
    year = int(m[2]) if m[2] else recent_month(month, now)
    return month_span(year, month)


def _day_month(m: re.Match, now: Now) -> tuple[float, float] | None:
    day, month = int(m[1]), month_number(m[2])
    return _on(day, month, m[3], now)


def _month_day(m: re.Match, now: Now) -> tuple[float, float] | None:
    month, day = month_number(m[1]), int(m[2])
    return _on(day, month, m[3], now)


def _on(day: int, month: int, year: str | None, now: Now) -> tuple[float, float] | None:
    found = date_day(int(year) if year else recent_month(month, now), month, day)
    return None if found is None else day_span(found)


def _iso_day(m: re.Match, now: Now) -> tuple[float, float] | None:
    year = int(m[1])
    found = date_day(year, int(m[2]), int(m[3])) if year >= 1 else None  # no year 0
    return None if found is None else day_span(found)


def _year(m: re.Match, now: Now) -> tuple[float, float]:
    return year_span(int(m[1]))


WINDOWS = [
    (re.compile(r"\b(the day before yesterday|yesterday|today|tonight|this morning|"
                r"this afternoon|this evening)\b"), _relative_day),
    (re.compile(rf"\b{_NUM} {_UNIT} (?:ago|back|earlier)\b"), _ago),
    (re.compile(rf"\b(?:the )?(?:past|last) {_NUM} {_UNIT}\b"), _past_n),
    (re.compile(r"\b(last|this|past|the past|previous) (week|weekend|month|year)\b"),
     _last_unit),
    (re.compile(r"\b(\d{4})-(\d\d)-(\d\d)\b"), _iso_day),
    (re.compile(rf"\b{_DAY}(?: of)? {_MONTH}\b,?(?: {_YEAR})?"), _day_month),
    (re.compile(rf"\b{_MONTH} {_DAY}\b(?:,? {_YEAR})?"), _month_day),
    (re.compile(r"\b(?:last|on|this past|past) (" + "|".join(WEEKDAYS) + r")\b"), _weekday),
    (re.compile(rf"\b(?:in|during|of|since|before|after|until|by) {_MONTH}\b(?:,? {_YEAR})?"),
     _month),
    (re.compile(rf"\b{_MONTH} {_YEAR}\b"), lambda m, now: month_span(int(m[2]),
                                                                    month_number(m[1]))),
    (re.compile(rf"\b(?:in|during|of|since|before|after|until|by) {_YEAR}\b"), _year),
]
# a window opened at one end by the word before it ("since March": from March on)
OPEN = re.compile(r"\b(since|after|before|until|by)\s*$")
LEAD = re.compile(r"(since|after|before|until|by)\b")


def read_time(query: str, as_of: float) -> When:
    """The time words of ``query`` asked at ``as_of`` (unix seconds, finite): the first
    window expression, and the order asked for. When() when there are none."""
    text = lower_in_place(query)
    now = Now.of(held(as_of))
    found, lo, hi = [], None, None
    for pattern, span in WINDOWS:
        match = pattern.search(text)
        if match is None:
            continue
        window = span(match, now)
        if window is None:
            continue
        lo, hi = held(window[0]), held(window[1])
        lead = OPEN.search(text[:match.start()]) or LEAD.match(match[0])
        if lead is not None and lead[1] in ("since", "after"):
            hi = None
        elif lead is not None:  # before, until, by: up to the start (by: the end)
            lo, hi = None, hi if lead[1] == "by" else lo
        found.append(query[match.start():match.end()].strip(" ,"))
        break
    order = ""
    earliest, latest = EARLIEST.search(text), LATEST.search(text)
    if earliest is not None:
        order = "earliest"
        found.append(query[earliest.start():earliest.end()])
    elif latest is not None:
        order = "latest"
        found.append(query[latest.start():latest.end()])
    return When(words=", ".join(found), lo=lo, hi=hi, order=order)


def lower_in_place(query: str) -> str:
    """``query`` in lower case, each character at its own offset: a character whose lower
    case is longer than one (only U+0130 "İ") is kept as it is."""
    text = query.lower()
    if len(text) == len(query):  # lower() never shortens: every character mapped to one
        return text
    return "".join(c if len(low := c.lower()) != 1 else low for c in query)


def held(seconds: float) -> float:
    """A point held inside what ISO-8601 can show (FIRST_SECOND..LAST_SECOND)."""
    return min(max(seconds, FIRST_SECOND), LAST_SECOND)


def closeness(at: float, when: When) -> float:
    """How well an event time fits the window: 1 inside it, falling off outside it by
    half every half-width (at least a day; a month for a window open at one end)."""
    if when.lo is not None and at < when.lo:
        gap = when.lo - at
    elif when.hi is not None and at > when.hi:
        gap = at - when.hi
    else:
        return 1.0
    if when.lo is not None and when.hi is not None:
        scale = max(DAY, (when.hi - when.lo) / 2)
    else:
        scale = 30 * DAY
    return 0.5 ** (gap / scale)
