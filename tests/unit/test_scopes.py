"""Scoped tokens (shared/protocol/scopes.py): the setting is checked whole at start, a scope covers
names and prefixes only, and a JWT's claims give a scope that is never wider than they say."""

import json

import pytest

from zapomni.shared.protocol.scopes import (
    EVERYTHING,
    NOTHING,
    parse_tokens,
    scope_of,
    token_key,
)
from zapomni.shared.settings import Settings

TOKEN = "k" * 32


def test_a_token_covers_its_names_and_prefixes_and_nothing_else():
    scopes = parse_tokens(json.dumps({TOKEN: {"namespaces": ["team-a-*", "shared"],
                                              "write": True}}))
    scope = scopes[token_key(TOKEN)]
    assert [scope.covers(n) for n in ("team-a-x", "team-a-", "shared", "shared2", "team-b",
                                      "team-a")] == [True, True, True, False, False, False]
    assert scope.write and not scope.everything
    assert EVERYTHING.covers("anything") and EVERYTHING.everything
    assert not NOTHING.covers("default")
    reader = parse_tokens(json.dumps({TOKEN: {"namespaces": ["*"]}}))[token_key(TOKEN)]
    assert reader.covers("x") and not reader.write and not reader.everything


@pytest.mark.parametrize("value, words", [
    ("{x", "not valid JSON"),
    ("[]", "expected a JSON object of 1 to 1,000 tokens"),
    (json.dumps({"short": {"namespaces": ["a"]}}), "token 1: at least 16 characters"),
    (json.dumps({TOKEN: {"namespaces": []}}), "token 1: namespaces: expected 1 to 100"),
    (json.dumps({TOKEN: {"namespaces": ["Team"]}}), "'Team' is neither a namespace name"),
    (json.dumps({TOKEN: {"namespaces": ["a*b"]}}), "'a*b' is neither a namespace name"),
    (json.dumps({TOKEN: {"namespaces": ["a"], "write": "yes"}}), "token 1.write: expected"),
    (json.dumps({TOKEN: {"namespace": ["a"]}}), "token 1.namespace: unknown field"),
])
def test_a_bad_setting_stops_the_process_naming_the_entry_not_the_token(value, words):
    with pytest.raises(SystemExit, match="ZAPOMNI_MCP_TOKENS") as caught:
        Settings.from_env(environ={"ZAPOMNI_MCP_TOKENS": value})
    assert words in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_jwt_claims_give_no_more_than_they_say():
    assert scope_of({}) == NOTHING  # no zapomni_namespaces: no namespace
    listed = scope_of({"zapomni_namespaces": ["a", "b-*", "Bad", "../x", 5],
                       "zapomni_write": True})
    assert listed.names == {"a"} and listed.prefixes == ("b-",) and listed.write
    spaced = scope_of({"zapomni_namespaces": "a  b-*", "zapomni_write": "true"})
    assert spaced.covers("a") and spaced.covers("b-1") and spaced.write
    for write in (1, "yes", "True", None, [True]):
        assert not scope_of({"zapomni_namespaces": ["a"], "zapomni_write": write}).write
    assert not scope_of({"zapomni_namespaces": {"a": 1}}).covers("a")
