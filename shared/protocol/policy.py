"""The write policy: which adds a namespace accepts (ZAPOMNI_WRITE_POLICY, JSON).

    {"*": {"min_confidence": 0.5},
     "chat": {"max_per_thread": 50, "window_seconds": 3600, "min_confidence": 0.7}}

A namespace's own entry applies to it whole; "*" applies to every namespace without one
(``"notes": {}`` exempts notes). Rules:

- ``min_confidence`` (0-1): an add whose metadata.confidence is lower is refused. One that
  states no confidence is accepted (the policy judges a stated confidence: a text a person
  adds is not a guess), unless ``require_confidence`` is true.
- ``max_per_thread`` with ``window_seconds`` (default 3600): at most that many adds to one
  thread (metadata.thread) in any such window (sliding). Adds without a thread are not
  counted.

A refused add is an answer, not an error: ``Refused`` (stored false, the reason), no task,
nothing queued. The window is a sorted set per thread in Redis, bounded (at most
max_per_thread members, expiring with the window):

    zapomni:window:{ns}:{thread hash}   add ticket -> when it was counted (ms, Redis's clock)

It is counted in the same script that checks it, so two fronts never both take the last
place; an add then refused for another reason (the queue is full, the text is a duplicate)
gives its place back (``refund``): a refused write does not count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from typing import Annotated

import msgspec
from msgspec import Meta
from redis.asyncio import Redis
from redis.exceptions import RedisError

from zapomni.shared.protocol.api import AddMemory
from zapomni.shared.protocol.base import NAMESPACE_PATTERN
from zapomni.shared.protocol.validation import describe, json_setting

SETTING = "ZAPOMNI_WRITE_POLICY"
MAX_PER_THREAD = 10_000
MAX_WINDOW_SECONDS = 30 * 86400


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_confidence: Annotated[float, Meta(ge=0, le=1)] | None = None
    require_confidence: bool = False
    max_per_thread: Annotated[int, Meta(ge=1, le=MAX_PER_THREAD)] | None = None
    window_seconds: Annotated[int, Meta(ge=1, le=MAX_WINDOW_SECONDS)] = 3600


# KEYS: the thread's window. ARGV: window ms, max, ticket. Returns {1, count} when counted;
# {0, count, ms until the oldest leaves the window} when the window is full
_COUNT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, n, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return {1, n + 1, 0}
"""


@functools.lru_cache(maxsize=4)
def parse_policy(text: str) -> dict[str, Rule]:
    """The policy in ``text`` (JSON; empty: none). ValueError naming the setting, the key
    and what is wrong. Cached: read again on every write (rule_for)."""
    raw = json_setting(text, SETTING, '{"*": {"min_confidence": 0.5}}')
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{SETTING}: expected a JSON object of namespace (or \"*\") -> rules")
    policy = {}
    for name, rule in raw.items():
        if name != "*" and not re.fullmatch(NAMESPACE_PATTERN, name):
            raise ValueError(f"{SETTING}: {name[:70]!r} is not a namespace name or \"*\"")
        try:
            policy[name] = msgspec.convert(rule, Rule)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{SETTING}: {describe(exc, name)}") from None
    return policy


def rule_for(text: str, namespace: str) -> Rule | None:
    policy = parse_policy(text)
    return policy.get(namespace, policy.get("*"))


def judge_confidence(rule: Rule, memory: AddMemory) -> str:
    """Why ``rule`` refuses ``memory`` for its confidence; '' when it does not."""
    least = rule.min_confidence
    if memory.confidence is None:
        if rule.require_confidence:
            need = f" of at least {least:g}" if least is not None else ""
            return (f"metadata.confidence: required in namespace '{memory.namespace}' (write "
                    f"policy); nothing was stored. Add it with a confidence{need} (0-1)")
        return ""
    if least is not None and memory.confidence < least:
        return (f"metadata.confidence: {memory.confidence:g} is below the minimum of "
                f"{least:g} in namespace '{memory.namespace}' (write policy); nothing was "
                "stored")
    return ""


def window_key(namespace: str, thread: str) -> str:
    return f"zapomni:window:{namespace}:{hashlib.sha256(thread.encode()).hexdigest()[:32]}"


async def count_write(redis: Redis, rule: Rule, memory: AddMemory, ticket: str) -> str:
    """Count ``ticket`` in its thread's window; why not, when the window is full ('' when
    counted, or when the rule sets no thread limit or the memory has no thread)."""
    if rule.max_per_thread is None or not memory.thread:
        return ""
    ok, count, wait_ms = await redis.eval(
        _COUNT, 1, window_key(memory.namespace, memory.thread), rule.window_seconds * 1000,
        rule.max_per_thread, ticket)
    if ok:
        return ""
    wait = max(1, -(-int(wait_ms) // 1000))
    return (f"metadata.thread: {int(count):,} memories in {rule.window_seconds:,} s is the "
            f"limit for one thread in namespace '{memory.namespace}' (write policy); nothing "
            f"was stored. Retry in {wait:,} s")


async def refund(redis: Redis, rule: Rule, memory: AddMemory, ticket: str) -> None:
    """Give back the place ``ticket`` took in its thread's window (an add refused after it
    was counted). Redis down: the place stays taken until the window passes."""
    if rule.max_per_thread is None or not memory.thread:
        return
    with contextlib.suppress(RedisError, OSError):
        await redis.zrem(window_key(memory.namespace, memory.thread), ticket)
