"""Which namespaces a caller may use, and whether it may write: scoped bearer tokens
(ZAPOMNI_MCP_TOKENS, JSON) and the same scope carried by a JWT's claims.

    {"<a long random token>": {"namespaces": ["team-a-*", "shared"], "write": true},
     "<another one>":         {"namespaces": ["shared"]}}

An entry of ``namespaces`` is a namespace name, or a prefix ending in ``*`` (``team-a-*``:
every namespace whose name starts with ``team-a-``; ``*`` alone: every namespace). ``write``
(default false) lets the token call the tools that write (add, update, delete, build_graph,
ingest_path, reembed, cancel_task); a token without it only reads. ZAPOMNI_MCP_TOKEN, the one
shared token, covers every namespace and writes (``EVERYTHING``).

A JWT carries the same in two claims: ``zapomni_namespaces`` (a list of names and prefixes, or
one string of them separated by blanks) and ``zapomni_write`` (true or false). A JWT without
``zapomni_namespaces`` covers no namespace; entries that are no name or prefix are left out.

The front checks every call against the caller's scope in one place (services/mcp/scope.py);
a call outside it is refused in one line that names the namespace and says the token does not
cover it, the same whether the namespace exists or not.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from zapomni.shared.protocol.base import NAMESPACE_PATTERN
from zapomni.shared.protocol.validation import describe, json_setting

SETTING = "ZAPOMNI_MCP_TOKENS"
NAMESPACES_CLAIM = "zapomni_namespaces"
WRITE_CLAIM = "zapomni_write"
MIN_TOKEN_CHARS = 16  # shorter is a password, not a secret a client holds
MAX_TOKENS = 1000
MAX_ENTRIES = 100  # namespaces and prefixes one token names
PREFIX = re.compile(r"^(?:[a-z0-9][a-z0-9_-]{0,62})?\*$")


class Scope(msgspec.Struct, frozen=True):
    """Namespaces by name and by prefix, and whether writes are allowed."""

    names: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    write: bool = False

    def covers(self, namespace: str) -> bool:
        return namespace in self.names or any(namespace.startswith(p) for p in self.prefixes)

    @property
    def everything(self) -> bool:
        return self.write and "" in self.prefixes


EVERYTHING = Scope(prefixes=("",), write=True)
NOTHING = Scope()


class TokenEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    namespaces: list[str]
    write: bool = False


def is_entry(entry: Any) -> bool:
    """A namespace name or a prefix ending in '*'."""
    return isinstance(entry, str) and bool(re.fullmatch(NAMESPACE_PATTERN, entry)
                                           or PREFIX.fullmatch(entry))


def make_scope(entries: list[str], write: bool) -> Scope:
    """The scope of ``entries`` (checked already: names and prefixes)."""
    return Scope(names=frozenset(e for e in entries if not e.endswith("*")),
                 prefixes=tuple(sorted({e[:-1] for e in entries if e.endswith("*")})),
                 write=write)


def token_key(token: str) -> str:
    """What a token is looked up by: its sha256, so a lookup's time says nothing of the
    tokens it did not match."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(text: str) -> dict[str, Scope]:
    """The scoped tokens in ``text`` (JSON; empty: none), by ``token_key``. ValueError
    naming the setting, the entry and what is wrong (never the token itself)."""
    raw = json_setting(text, SETTING,
                       '{"<token>": {"namespaces": ["team-a-*"], "write": true}}')
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not 1 <= len(raw) <= MAX_TOKENS:
        raise ValueError(f"{SETTING}: expected a JSON object of 1 to {MAX_TOKENS:,} tokens, "
                         'each -> {"namespaces": [...], "write": true or false}')
    scopes = {}
    for number, (token, value) in enumerate(raw.items(), 1):
        where = f"{SETTING}: token {number}"
        if len(token) < MIN_TOKEN_CHARS or token != token.strip():
            raise ValueError(f"{where}: at least {MIN_TOKEN_CHARS} characters, no blanks at "
                             "either end; use a long random string (openssl rand -hex 32)")
        try:
            entry = msgspec.convert(value, TokenEntry)
        except msgspec.ValidationError as exc:
            raise ValueError(f"{SETTING}: {describe(exc, f'token {number}')}; expected "
                             '{"namespaces": [...], "write": true or false}') from None
        if not 1 <= len(entry.namespaces) <= MAX_ENTRIES:
            raise ValueError(f"{where}: namespaces: expected 1 to {MAX_ENTRIES} entries")
        bad = next((e for e in entry.namespaces if not is_entry(e)), None)
        if bad is not None:
            raise ValueError(f"{where}: namespaces: {bad[:70]!r} is neither a namespace name "
                             "nor a prefix ending in '*' (\"team-a-*\"; \"*\" alone: all)")
        scopes[token_key(token)] = make_scope(entry.namespaces, entry.write)
    return scopes


def claims_of(scope_entries: list[str], write: bool) -> dict[str, Any]:
    """The claims a static token's AccessToken carries: the JWT claims, so one reader
    (``scope_of``) serves both."""
    return {NAMESPACES_CLAIM: list(scope_entries), WRITE_CLAIM: write}


def scope_of(claims: Mapping[str, Any]) -> Scope:
    """The scope a token's claims give: no ``zapomni_namespaces``, no namespace."""
    raw = claims.get(NAMESPACES_CLAIM)
    entries = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else []
    write = claims.get(WRITE_CLAIM)
    return make_scope([e for e in entries[:MAX_ENTRIES] if is_entry(e)],
                      write is True or write == "true")


def entries_of(scope: Scope) -> list[str]:
    """``scope``'s names and prefixes as a token's entries (``team-a-*``)."""
    return sorted(scope.names) + [p + "*" for p in scope.prefixes]


def refusal(namespace: str) -> str:
    """The one answer to a call on a namespace the token does not cover: the same whether
    the namespace exists or not."""
    return (f"namespace: '{namespace}' is not covered by this token; use a token whose "
            "namespaces include it")


def read_only(field: str, tool: str) -> str:
    return (f"{field}: this token may only read and {tool} writes; use a token with write "
            "access")
