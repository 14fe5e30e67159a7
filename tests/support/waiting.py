"""Waiting for a state, with a deadline: a test never asserts on how long something took and
never polls forever. When the deadline passes, it fails saying what it waited for and what it
saw last."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str,
                     *, timeout: float = 60.0, every: float = 0.05) -> T:
    """Await ``probe()`` until ``done`` holds for its value, and return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}; last seen: {value!r}")
        await asyncio.sleep(every)
