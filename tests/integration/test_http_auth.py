"""The front over streamable HTTP with a bearer token."""

from __future__ import annotations

import httpx2
import msgspec
from fastmcp import Client

from tests.support.mcp import answer
from tests.support.servers import ThreadedServer
from zapomni.services.mcp.http import http_app

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"accept": "application/json, text/event-stream"}


async def test_a_token_is_required_when_configured(settings, query_service):
    token = "correct-horse-battery-staple"
    settings = msgspec.structs.replace(settings, mcp_token=token)
    with ThreadedServer(http_app(settings)) as server:
        url = f"{server.url}/mcp"
        async with httpx2.AsyncClient() as http:
            anonymous = await http.post(url, json=INITIALIZE, headers=HEADERS)
            wrong = await http.post(url, json=INITIALIZE,
                                    headers={**HEADERS, "authorization": "Bearer wrong"})
            health = await http.get(f"{server.url}/healthz")
        assert anonymous.status_code == wrong.status_code == 401
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert health.status_code == 200  # liveness stays public
        async with Client(url, auth=token) as client:
            stats = await answer(client, "get_stats", {})
        assert stats["memories"] == 0


async def test_jwts_from_an_identity_provider_are_verified(settings, query_service):
    from fastmcp.server.auth.providers.jwt import RSAKeyPair

    provider, stranger = RSAKeyPair.generate(), RSAKeyPair.generate()
    issuer, audience = "https://id.example.com", "zapomni"
    settings = msgspec.structs.replace(settings, mcp_jwt_public_key=provider.public_key,
                                       mcp_jwt_issuer=issuer, mcp_jwt_audience=audience)
    good = provider.create_token(subject="agent-7", issuer=issuer, audience=audience)
    bad = {"other audience": provider.create_token(issuer=issuer, audience="other"),
           "other issuer": provider.create_token(issuer="https://evil.example", audience=audience),
           "other key": stranger.create_token(issuer=issuer, audience=audience),
           "expired": provider.create_token(issuer=issuer, audience=audience,
                                            expires_in_seconds=-60)}
    with ThreadedServer(http_app(settings)) as server:
        url = f"{server.url}/mcp"
        async with httpx2.AsyncClient() as http:
            refused = {name: (await http.post(url, json=INITIALIZE, headers={
                **HEADERS, "authorization": f"Bearer {token}"})).status_code
                for name, token in bad.items()}
            metrics = await http.get(f"{server.url}/metrics",
                                     headers={"authorization": f"Bearer {good}"})
            metrics_anonymous = await http.get(f"{server.url}/metrics")
        async with Client(url, auth=good) as client:
            stats = await answer(client, "get_stats", {})
    assert refused == dict.fromkeys(bad, 401)
    assert (metrics.status_code, metrics_anonymous.status_code) == (200, 401)
    assert stats["memories"] == 0


def test_beyond_loopback_needs_a_token_or_jwts(settings):
    import pytest

    with pytest.raises(SystemExit, match="refusing to serve MCP on 0.0.0.0 without a token"):
        msgspec.structs.replace(settings, mcp_host="0.0.0.0").check_mcp_bind()
    msgspec.structs.replace(settings, mcp_host="0.0.0.0", mcp_token="t" * 32).check_mcp_bind()
    msgspec.structs.replace(settings, mcp_host="0.0.0.0",
                            mcp_jwt_jwks_uri="https://id.example.com/jwks").check_mcp_bind()
