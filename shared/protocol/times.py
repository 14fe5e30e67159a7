"""The one time rule of the API: a point in time is ISO-8601 (a date or a datetime, UTC unless
it says otherwise) or unix seconds (a number, 0 or more); a duration is named as one
(``expires_in``: seconds from now). No number means "since 1970" in one field and "from now"
in another, so a negative number is refused, not read as before 1970: ``as_of=-5`` is far
likelier "5 ago" than 1969-12-31T23:59:55 (a time before 1970 is given as ISO-8601).
A string in ISO-8601's form that names no day (2026-02-30) or time (25:00) is told so.

Every field that takes a point in time reads it here: ``filters.after`` / ``before``,
``as_of``, metadata ``occurred_at`` (when what the memory says happened) and ``expires_at``.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime
from typing import Any

from zapomni.shared.protocol.errors import InvalidInput

# datetime's own range (years 1-9999), so that every accepted point can be shown as ISO-8601
EARLIEST = datetime(1, 1, 2, tzinfo=UTC).timestamp()
LATEST = datetime(9999, 12, 30, tzinfo=UTC).timestamp()
MAX_DURATION = 100 * 365 * 86400  # expires_in: at most 100 years
EXAMPLE = ("an ISO-8601 date or datetime such as 2026-01-31 or 2026-01-31T18:00:00Z, or unix "
           "seconds such as 1790000000")
# a date, and a time of day if one follows: the fields that can name no day or time
ISO_FIELDS = re.compile(r"(\d{4})-?(\d\d)-?(\d\d)(?:[T ](\d\d)(?::?(\d\d)(?::?(\d\d))?)?)?")


def kind_of(value: Any) -> str:
    """What a caller sent: a number as it is, anything else by its JSON type (a string may
    hold anything, so it is never quoted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and len(repr(value)) <= 24:
        return repr(value)
    kinds = {int: "an integer", float: "a number", str: "a string", list: "a list",
             dict: "a JSON object"}
    return next((name for kind, name in kinds.items() if isinstance(value, kind)),
                "another type")


def point_in_time(value: Any, field: str) -> float:
    """A point in time -> unix seconds; InvalidInput naming ``field`` otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
        if seconds < 0:
            raise InvalidInput(f"{field}: {kind_of(value)} is negative; unix seconds count "
                               "from 1970-01-01 and are never an offset from now: give the "
                               "point in time, as ISO-8601 (such as 1969-07-20) for one "
                               "before 1970")
        if not seconds <= LATEST:  # NaN fails too
            raise InvalidInput(f"{field}: {kind_of(value)} is outside the years 1-9999 as "
                               f"unix seconds; expected {EXAMPLE}")
        return seconds
    if not isinstance(value, str):
        raise InvalidInput(f"{field}: expected {EXAMPLE}; got {kind_of(value)}")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        wrong = no_such(value.strip())
        if wrong:
            raise InvalidInput(f"{field}: {wrong}") from None
        raise InvalidInput(f"{field}: expected {EXAMPLE}; got a string that is not "
                           "ISO-8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError):  # year 1 with a timezone east of UTC
        raise InvalidInput(f"{field}: outside the years 1-9999; expected {EXAMPLE}") from None


def no_such(text: str) -> str:
    """What a string in ISO-8601's form that datetime refuses names that does not exist (a
    month, a day or a time of day); "" when it is not in that form."""
    found = ISO_FIELDS.match(text)
    if found is None:
        return ""
    year, month, day = int(found[1]), int(found[2]), int(found[3])
    if year == 0:
        return f"no year 0: {found[0][:10]} (the years are 0001-9999)"
    if not 1 <= month <= 12:
        return f"no such month: {found[0][:10]} (months are 01-12)"
    days = calendar.monthrange(year, month)[1]
    if not 1 <= day <= days:
        return (f"no such day: {found[0][:10]} ({calendar.month_name[month]} {year} has "
                f"{days} days)")
    clock = [int(part) for part in found.groups()[3:] if part is not None]
    if any(part > limit for part, limit in zip(clock, (23, 59, 59), strict=False)):
        return (f"no such time of day: {found[0]} (hours are 00-23, minutes and seconds "
                "00-59)")
    return ""


def duration(value: Any, field: str) -> float:
    """A duration in seconds (1 to 100 years)."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 < value <= MAX_DURATION:
        raise InvalidInput(f"{field}: expected seconds from now, 1 to {MAX_DURATION:,} (100 "
                           f"years); got {kind_of(value)}")
    return float(value)


def iso_time(seconds: float | None) -> str:
    """A stored time as results show it: ISO-8601 UTC to the second (+00:00)."""
    return datetime.fromtimestamp(float(seconds or 0), UTC).isoformat(timespec="seconds")


def iso(seconds: float) -> str:
    """Unix seconds as ISO-8601 UTC with a Z, to the second (to the millisecond when the
    point has a fraction): how metadata shows a time it was given in either form."""
    moment = datetime.fromtimestamp(seconds, UTC)
    spec = "seconds" if float(seconds).is_integer() else "milliseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")
