"""The query service answers only the front: every /v1 call carries ZAPOMNI_QUERY_SECRET
(the suite's settings set one, as compose and `zapomni up` do); a call without it, or with
another, is refused before its body is read; health and metrics stay open."""

from __future__ import annotations

import httpx2
import msgspec
import pytest

from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.answers import Stats
from zapomni.shared.protocol.api import StatsRequest
from zapomni.shared.protocol.errors import ZapomniError

BODY = msgspec.json.encode(StatsRequest(namespace="default"))


async def test_only_the_fronts_credential_is_answered(settings, query_service):
    assert settings.query_secret
    async with httpx2.AsyncClient(base_url=query_service) as http:
        anonymous = await http.post("/v1/stats", content=BODY)
        wrong = await http.post("/v1/stats", content=BODY,
                                headers={"authorization": "Bearer not-the-secret"})
        right = await http.post("/v1/stats", content=BODY, headers={
            "authorization": f"Bearer {settings.query_secret}"})
        health = [(await http.get(path)).status_code for path in ("/healthz", "/readyz",
                                                                   "/metrics")]
    assert anonymous.status_code == wrong.status_code == 401
    assert anonymous.json()["kind"] == "unauthorized"
    assert "ZAPOMNI_QUERY_SECRET" in anonymous.json()["message"]
    assert settings.query_secret not in anonymous.text
    assert right.status_code == 200 and right.json()["memories"] == 0
    assert health == [200, 200, 200]

    front = Front(settings)
    other = Front(msgspec.structs.replace(settings, query_secret="another-secret-altogether"))
    try:
        stats = await front.query.call("/v1/stats", StatsRequest(), Stats)
        with pytest.raises(ZapomniError, match="refused the front's credential; the operator "
                                               "must give both the same ZAPOMNI_QUERY_SECRET"):
            await other.query.call("/v1/stats", StatsRequest(), Stats)
    finally:
        await front.aclose()
        await other.aclose()
    assert stats.memories == 0


def test_beyond_loopback_the_query_service_needs_a_secret(settings):
    with pytest.raises(SystemExit, match="refusing to serve the query service on 0.0.0.0 "
                                         "without ZAPOMNI_QUERY_SECRET"):
        msgspec.structs.replace(settings, query_host="0.0.0.0", query_secret="").check_query_bind()
    msgspec.structs.replace(settings, query_host="0.0.0.0").check_query_bind()
    msgspec.structs.replace(settings, query_secret="").check_query_bind()  # loopback
