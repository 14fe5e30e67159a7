"""The front over streamable HTTP with a bearer token: the shared one, or JWTs checked against
an identity provider's keys (a JWKS served over HTTP here, or one public key), its issuer and
this server's audience, their scope in the zapomni_namespaces and zapomni_write claims."""

from __future__ import annotations

import json

import httpx2
import msgspec
import pytest
from fastmcp import Client
from fastmcp.server.auth.providers.jwt import RSAKeyPair
from joserfc import jwk
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.mcp import answer, error
from tests.support.servers import ThreadedServer
from zapomni.services.mcp.http import http_app

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream"}
SEND = "send the header 'Authorization: Bearer TOKEN' with the shared token (ZAPOMNI_MCP_TOKEN)"
MISSING = f"unauthorized: this server needs a bearer token; {SEND}"
WRONG = f"unauthorized: this server does not accept the bearer token sent; {SEND}"
NOT_BEARER = f"unauthorized: this server found no bearer token in the Authorization header; {SEND}"


async def refusal(url: str, token: str | None) -> str:
    """What fastmcp's client raises when it connects with ``token``."""
    with pytest.raises(MCPError) as refused:
        async with Client(url, auth=token):
            pass
    return str(refused.value)


async def test_a_token_is_required_when_configured(settings, query_service):
    token = "correct-horse-battery-staple"
    settings = msgspec.structs.replace(settings, mcp_token=token)
    with ThreadedServer(http_app(settings)) as server:
        url = f"{server.url}/mcp"
        async with httpx2.AsyncClient() as http:
            anonymous = await http.post(url, json=INITIALIZE, headers=HEADERS)
            wrong = await http.post(url, json=INITIALIZE,
                                    headers={**HEADERS, "authorization": "Bearer wrong"})
            basic = await http.post(url, json=INITIALIZE,
                                    headers={**HEADERS, "authorization": "Basic dTpw"})
            metrics = await http.get(f"{server.url}/metrics")
            metrics_wrong = await http.get(f"{server.url}/metrics",
                                           headers={"authorization": "Bearer wrong"})
            metrics_right = await http.get(f"{server.url}/metrics",
                                           headers={"authorization": f"Bearer {token}"})
            health = await http.get(f"{server.url}/healthz")
            discovery = await http.get(f"{server.url}/.well-known/oauth-protected-resource")
        told = {"missing": await refusal(url, None), "wrong": await refusal(url, "wrong")}
        async with Client(url, auth=token) as client:
            stats = await answer(client, "get_stats", {})
    assert stats["memories"] == 0
    # fastmcp's client shows the body's JSON-RPC error: one line saying what to send
    assert told == {"missing": MISSING, "wrong": WRONG}
    # a plain HTTP client reads the same line in the body and, for a token sent, the challenge
    for response, said in ((anonymous, MISSING), (wrong, WRONG), (basic, NOT_BEARER),
                           (metrics, MISSING), (metrics_wrong, WRONG)):
        assert response.status_code == 401
        assert response.json()["error"]["message"] == said
        assert response.json()["error"]["code"] == -32003
    assert anonymous.headers["www-authenticate"] == basic.headers["www-authenticate"] == \
        'Bearer realm="zapomni"'  # RFC 6750 3.1: no error attribute without a bearer token
    assert wrong.headers["www-authenticate"] == (
        f'Bearer realm="zapomni", error="invalid_token", error_description="{WRONG}"')
    assert metrics_right.status_code == 200 and "zapomni_" in metrics_right.text
    assert health.status_code == 200  # liveness stays public
    assert discovery.status_code == 404  # no OAuth here: discovery finds none, no challenge


async def test_each_kind_of_token_is_named_in_the_refusal(settings, query_service):
    """The refusal names the settings of the tokens this server takes, never a token."""
    scoped = msgspec.structs.replace(settings, mcp_tokens=json.dumps(
        {"s" * 32: {"namespaces": ["team-a"]}}))
    everything = msgspec.structs.replace(
        scoped, mcp_token="t" * 32, mcp_jwt_public_key=RSAKeyPair.generate().public_key,
        mcp_jwt_issuer="https://id.example.com", mcp_jwt_audience="zapomni")
    told = {}
    for name, configured in (("scoped", scoped), ("everything", everything)):
        with ThreadedServer(http_app(configured)) as server:
            told[name] = await refusal(f"{server.url}/mcp", "wrong")
    assert told["scoped"] == ("unauthorized: this server does not accept the bearer token "
                              "sent; send the header 'Authorization: Bearer TOKEN' with a "
                              "scoped token (ZAPOMNI_MCP_TOKENS)")
    assert told["everything"] == (
        "unauthorized: this server does not accept the bearer token sent; send the header "
        "'Authorization: Bearer TOKEN' with the shared token (ZAPOMNI_MCP_TOKEN) or a scoped "
        "token (ZAPOMNI_MCP_TOKENS) or an unexpired JWT of the identity provider "
        "(ZAPOMNI_MCP_JWT_ISSUER) for this server's audience (ZAPOMNI_MCP_JWT_AUDIENCE)")
    assert "s" * 32 not in told["everything"] and "t" * 32 not in told["everything"]


def jwks_app(*providers: tuple[str, RSAKeyPair]) -> Starlette:
    """An identity provider's JWKS endpoint: each (kid, key pair)'s public key as a JWK."""
    keys = [{**jwk.import_key(pair.public_key, "RSA").as_dict(), "kid": kid, "use": "sig",
             "alg": "RS256"} for kid, pair in providers]

    async def jwks(request):
        return JSONResponse({"keys": keys})

    return Starlette(routes=[Route("/.well-known/jwks.json", jwks)])


async def test_jwts_are_checked_against_a_jwks_url_an_issuer_and_an_audience(settings,
                                                                              query_service):
    provider, stranger = RSAKeyPair.generate(), RSAKeyPair.generate()
    issuer, audience = "https://id.example.com", "zapomni"
    scope = {"zapomni_namespaces": ["team-a-*"], "zapomni_write": True}

    def token(pair=provider, **overrides) -> str:
        given = {"issuer": issuer, "audience": audience, "kid": "k1",
                 "additional_claims": scope} | overrides
        return pair.create_token(subject="agent-7", **given)

    bad = {"other audience": token(audience="other"), "no audience": token(audience=None),
           "other issuer": token(issuer="https://evil.example"),
           "other key": token(stranger), "unknown key id": token(kid="k9"),
           "expired": token(expires_in_seconds=-60)}
    with ThreadedServer(jwks_app(("k1", provider))) as idp:
        settings = msgspec.structs.replace(
            settings, mcp_jwt_jwks_uri=f"{idp.url}/.well-known/jwks.json",
            mcp_jwt_issuer=issuer, mcp_jwt_audience=audience)
        with ThreadedServer(http_app(settings)) as server:
            url = f"{server.url}/mcp"
            async with httpx2.AsyncClient() as http:
                refused = {name: (await http.post(url, json=INITIALIZE, headers={
                    **HEADERS, "authorization": f"Bearer {jwt}"})).status_code
                    for name, jwt in bad.items()}
                metrics = await http.get(f"{server.url}/metrics",
                                         headers={"authorization": f"Bearer {token()}"})
                metrics_anonymous = await http.get(f"{server.url}/metrics")
            async with Client(url, auth=token()) as client:
                stats = await answer(client, "get_stats", {"namespace": "team-a-notes"})
                added = await answer(client, "add_memory", {"text": "The tide turns at six.",
                                                            "namespace": "team-a-notes"})
                outside = await error(client, "get_stats", namespace="team-b")
            async with Client(url, auth=token(additional_claims={
                    "zapomni_namespaces": "team-a-notes", "zapomni_write": False})) as client:
                reader = await error(client, "add_memory", text="x", namespace="team-a-notes")
            async with Client(url, auth=token(additional_claims={})) as client:
                unscoped = await error(client, "get_stats", namespace="team-a-notes")
    assert refused == dict.fromkeys(bad, 401)
    assert (metrics.status_code, metrics_anonymous.status_code) == (200, 401)
    assert stats["memories"] == 0 and added["status"] == "queued"
    assert outside == ("namespace: 'team-b' is not covered by this token; use a token whose "
                       "namespaces include it")
    assert reader.startswith("namespace: this token may only read and add_memory writes")
    assert unscoped.startswith("namespace: 'team-a-notes' is not covered by this token")


async def test_jwts_signed_with_one_public_key_are_verified(settings, query_service):
    provider = RSAKeyPair.generate()
    issuer, audience = "https://id.example.com", "zapomni"
    settings = msgspec.structs.replace(settings, mcp_jwt_public_key=provider.public_key,
                                       mcp_jwt_issuer=issuer, mcp_jwt_audience=audience)
    good = provider.create_token(issuer=issuer, audience=audience,
                                 additional_claims={"zapomni_namespaces": ["*"]})
    with ThreadedServer(http_app(settings)) as server:
        async with httpx2.AsyncClient() as http:
            wrong = await http.post(f"{server.url}/mcp", json=INITIALIZE, headers={
                **HEADERS, "authorization": "Bearer " + provider.create_token(
                    issuer=issuer, audience="other")})
        async with Client(f"{server.url}/mcp", auth=good) as client:
            stats = await answer(client, "get_stats", {})
            read_only = await error(client, "delete_memory", memory_id="mem_" + "0" * 32)
    assert wrong.status_code == 401
    assert stats["memories"] == 0
    assert read_only.startswith("namespace: this token may only read")


def test_jwts_need_an_issuer_and_an_audience(settings):
    for given in ({}, {"mcp_jwt_issuer": "https://id.example.com"},
                  {"mcp_jwt_audience": "zapomni"}):
        for key in ({"mcp_jwt_jwks_uri": "https://id.example.com/jwks"},
                    {"mcp_jwt_public_key": RSAKeyPair.generate().public_key}):
            jwt_settings = msgspec.structs.replace(settings, **key, **given)
            with pytest.raises(SystemExit, match="refusing to accept JWTs without "
                                                 "ZAPOMNI_MCP_JWT_"):
                http_app(jwt_settings)


def test_beyond_loopback_needs_a_token_or_jwts(settings):
    with pytest.raises(SystemExit, match="refusing to serve MCP on 0.0.0.0 without a token"):
        msgspec.structs.replace(settings, mcp_host="0.0.0.0").check_mcp_bind()
    msgspec.structs.replace(settings, mcp_host="0.0.0.0", mcp_token="t" * 32).check_mcp_bind()
    msgspec.structs.replace(settings, mcp_host="0.0.0.0", mcp_tokens=json.dumps(
        {"t" * 32: {"namespaces": ["a"]}})).check_mcp_bind()
    msgspec.structs.replace(settings, mcp_host="0.0.0.0",
                            mcp_jwt_jwks_uri="https://id.example.com/jwks",
                            mcp_jwt_issuer="https://id.example.com",
                            mcp_jwt_audience="zapomni").check_mcp_bind()
