"""The one time rule of the API: a point in time is ISO-8601 (a date or a datetime, UTC unless
it says otherwise) or unix seconds (a number); a duration is named as one (``expires_in``:
seconds from now). No number means "since 1970" in one field and "from now" in another.

Every field that takes a point in time reads it here: ``filters.after`` / ``before``,
``as_of``, metadata ``occurred_at`` (when what the memory says happened) and ``expires_at``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from zapomni.shared.protocol.errors import InvalidInput

# datetime's own range (years 1-9999), so that every accepted point can be shown as ISO-8601
EARLIEST = datetime(1, 1, 2, tzinfo=UTC).timestamp()
LATEST = datetime(9999, 12, 30, tzinfo=UTC).timestamp()
MAX_DURATION = 100 * 365 * 86400  # expires_in: at most 100 years
EXAMPLE = ("an ISO-8601 date or datetime such as 2026-01-31 or 2026-01-31T18:00:00Z, or unix "
           "seconds such as 1790000000")


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
        if not EARLIEST <= seconds <= LATEST:  # NaN fails both
            raise InvalidInput(f"{field}: {kind_of(value)} is outside the years 1-9999 as "
                               f"unix seconds; expected {EXAMPLE}")
        return seconds
    if not isinstance(value, str):
        raise InvalidInput(f"{field}: expected {EXAMPLE}; got {kind_of(value)}")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(f"{field}: expected {EXAMPLE}; got a string that is not "
                           "ISO-8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError):  # year 1 with a timezone east of UTC
        raise InvalidInput(f"{field}: outside the years 1-9999; expected {EXAMPLE}") from None


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
