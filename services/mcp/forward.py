"""The front's client for the query service: msgspec JSON over httpx2, errors translated.
Every call carries the front's credential (ZAPOMNI_QUERY_SECRET) when one is set."""

from __future__ import annotations

from typing import TypeVar

import httpx2
import msgspec

from zapomni.shared.protocol.answers import ErrorBody
from zapomni.shared.protocol.errors import ERROR_KINDS, Unavailable, ZapomniError
from zapomni.shared.tls import tls_context

T = TypeVar("T")
REFUSED = ("the query service refused the front's credential; the operator must give both the "
           "same ZAPOMNI_QUERY_SECRET")
_encode = msgspec.json.Encoder().encode


class QueryClient:
    def __init__(self, base_url: str, timeout: float, secret: str = "") -> None:
        self._timeout = timeout
        headers = {"content-type": "application/json"}
        if secret:
            headers["authorization"] = f"Bearer {secret}"
        self._client = httpx2.AsyncClient(
            base_url=base_url, timeout=httpx2.Timeout(timeout, connect=min(timeout, 3.0)),
            verify=tls_context(), headers=headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def healthy(self) -> bool:
        try:
            return (await self._client.get("/healthz")).status_code == 200
        except httpx2.HTTPError:
            return False

    async def call(self, path: str, body: msgspec.Struct, kind: type[T]) -> T:
        try:
            response = await self._client.post(path, content=_encode(body))
        except httpx2.TimeoutException:
            raise Unavailable(f"the query service did not answer within {self._timeout:g}s; "
                              "retry in a few seconds") from None
        except httpx2.TransportError:
            raise Unavailable("the query service is unreachable (is zapomni-query running?); "
                              "retry in a few seconds") from None
        if response.status_code == 200:
            return msgspec.json.decode(response.content, type=kind)
        if response.status_code == 401:
            raise ZapomniError(REFUSED)
        try:
            error = msgspec.json.decode(response.content, type=ErrorBody)
        except msgspec.DecodeError:
            raise ZapomniError("the query service failed; retry later") from None
        raise ERROR_KINDS.get(error.kind, ZapomniError)(error.message)
