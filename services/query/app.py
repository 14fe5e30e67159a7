"""The query service's HTTP JSON API (Starlette). Bodies are msgspec Structs both ways.

    POST /v1/search   SearchRequest -> SearchResponse
    POST /v1/memory   MemoryRef     -> MemoryRecord (404 when unknown)
    POST /v1/stats    StatsRequest  -> Stats
    POST /v1/entities EntitySearch  -> EntityList
    POST /v1/entity   EntityRef     -> EntityDetail (404 when unknown)
    POST /v1/list     ListRequest   -> MemoryPage
    POST /v1/history  HistoryRequest -> History
    POST /v1/context  ContextRequest -> Context
    GET  /healthz     the process is up
    GET  /readyz      FalkorDB and Redis answer
    GET  /metrics     Prometheus, including the queue and task gauges of the whole system
Errors: {"kind", "message"} with a status that says whether to retry (429, 503).

With ZAPOMNI_QUERY_SECRET set, every /v1 call must carry it (``Authorization: Bearer
<secret>``, as the front's calls do) or is refused (401) before its body is read; the health
and metrics routes stay open (they say nothing of what is stored). Without it the service
binds only to loopback (``Settings.check_query_bind``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
import redis.asyncio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from zapomni.services.query.context import TokenCounter, build_context, read_history
from zapomni.services.query.entities import get_entity, search_entities
from zapomni.services.query.listing import list_memories
from zapomni.services.query.rank import AccessLog
from zapomni.services.query.records import read_memory, read_stats
from zapomni.services.query.search import search_memory
from zapomni.shared import metrics
from zapomni.shared.embedding.embed import Embedder, make_embedder
from zapomni.shared.protocol.answers import ErrorBody
from zapomni.shared.protocol.api import (
    ContextRequest,
    EntityRef,
    EntitySearch,
    HistoryRequest,
    ListRequest,
    MemoryRef,
    SearchRequest,
    StatsRequest,
)
from zapomni.shared.protocol.errors import ZapomniError
from zapomni.shared.protocol.validation import describe
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks import capacity, heartbeat, tasks

log = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode
UNAUTHORIZED = ("this call lacks the front's credential (ZAPOMNI_QUERY_SECRET); only the MCP "
                "front may call the query service")
STATUS = {"invalid_input": 400, "not_found": 404, "overloaded": 429, "unavailable": 503,
          "embedding_unavailable": 503, "embedding_rejected": 409}


def json_response(body: Any, status: int = 200) -> Response:
    return Response(_encode(body), status_code=status, media_type="application/json")


def error_response(kind: str, message: str, status: int) -> Response:
    return json_response(ErrorBody(kind=kind, message=message), status)


class QueryState:
    """The query process's live resources."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.store = GraphStore(settings, max_connections=32)
        self.redis = redis.asyncio.Redis.from_url(
            settings.redis_url, socket_timeout=settings.request_timeout,
            socket_connect_timeout=min(3.0, settings.request_timeout))
        self.embedder: Embedder = make_embedder(settings)
        self.access = AccessLog(self.redis, settings)  # which memories search returned
        self.tokens = TokenCounter()  # build_context's budget
        self.credential = f"Bearer {settings.query_secret}".encode()

    def authorized(self, request: Request) -> bool:
        """The call carries the front's credential, or none is asked for."""
        if not self.settings.query_secret:
            return True
        given = request.headers.get("authorization", "").encode()
        return hmac.compare_digest(given, self.credential)

    async def aclose(self) -> None:
        await self.access.aclose()
        await self.embedder.aclose()
        await self.store.aclose()
        await self.redis.aclose()


def post(path: str, kind: type, handler: Callable[[QueryState, Any], Awaitable[Any]]) -> Route:
    """POST ``path``: the body decoded as a ``kind``, answered with what ``handler`` returns."""
    async def route(request: Request) -> Response:
        state: QueryState = request.app.state.query
        if not state.authorized(request):
            return error_response("unauthorized", UNAUTHORIZED, 401)
        try:
            body = msgspec.json.decode(await request.body(), type=kind)
        except msgspec.ValidationError as exc:
            return error_response("invalid_input", describe(exc), 400)
        except msgspec.DecodeError:
            return error_response("invalid_input", "the body is not valid JSON", 400)
        try:
            return json_response(await handler(state, body))
        except ZapomniError as exc:
            return error_response(exc.kind, exc.message, STATUS.get(exc.kind, 500))
        except Exception:
            log.exception("query service: unexpected error")
            return error_response("error", "internal error in the query service", 500)
    return Route(path, route, methods=["POST"])


async def healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    state: QueryState = request.app.state.query
    try:
        await state.redis.ping()
        await state.store.db.connection.ping()
    except Exception:
        return error_response("unavailable", "Redis or FalkorDB is not answering", 503)
    return json_response({"status": "ready"})


async def metrics_route(request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


async def export_system_gauges(state: QueryState, every: float = 5.0) -> None:
    """Queue depth, oldest job, workers and tasks: exported here, by one process, not by
    every worker."""
    while True:
        try:
            await update_system_gauges(state.redis, tasks.TASK_TTL)
        except Exception as exc:  # Redis away: keep the last values, try again
            log.warning("could not read queue gauges: %s", type(exc).__name__)
        await asyncio.sleep(every)


async def update_system_gauges(redis, task_ttl: int) -> None:
    now_ms = time.time() * 1000
    metrics.QUEUE_DEPTH.set(await tasks.queue_depth(redis))
    metrics.QUEUE_BYTES.set(await capacity.queued_bytes(redis))
    oldest = await redis.zrangebyscore(capacity.QUEUE_NAME, "-inf", now_ms, start=0, num=1,
                                       withscores=True)
    metrics.QUEUE_OLDEST.set((now_ms - oldest[0][1]) / 1000 if oldest else 0)
    metrics.WORKERS_ALIVE.set(await heartbeat.count_alive(redis))
    for state, count in (await tasks.task_totals(redis, task_ttl)).items():
        metrics.TASKS.labels(state).set(count)


def build_app(settings) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.query = QueryState(settings)
        await app.state.query.embedder.dimension()
        exporter = asyncio.create_task(export_system_gauges(app.state.query))
        try:
            yield
        finally:
            exporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exporter
            await app.state.query.aclose()

    routes = [
        post("/v1/search", SearchRequest, lambda s, b: search_memory(
            s.store, s.embedder, s.redis, s.settings, b, access=s.access)),
        post("/v1/memory", MemoryRef, lambda s, b: read_memory(s.store, b)),
        post("/v1/stats", StatsRequest, lambda s, b: read_stats(s.store, s.redis, s.settings, b)),
        post("/v1/entities", EntitySearch, lambda s, b: search_entities(s.store, b)),
        post("/v1/entity", EntityRef, lambda s, b: get_entity(s.store, b)),
        post("/v1/list", ListRequest, lambda s, b: list_memories(s.store, b)),
        post("/v1/history", HistoryRequest, lambda s, b: read_history(s.store, b)),
        post("/v1/context", ContextRequest, lambda s, b: build_context(
            s.store, s.embedder, s.redis, s.settings, s.tokens, b, access=s.access)),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_route),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
