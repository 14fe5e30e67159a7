"""FalkorDB: the connection, one graph per namespace, and what a search reads of one first
(its embedding model and counts). Every query goes through ``run`` so library
errors are translated in one place. A namespace is prepared for writes (indexes, stored
shape, model) by shared/store/migrate.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import urlparse

import msgspec
import redis.asyncio
import redis.exceptions
from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import AsyncGraph
from falkordb.query_result import QueryResult
from redis.asyncio.cluster import RedisCluster

from zapomni.shared.protocol.errors import EmbeddingRejected, Overloaded, StoreError, Unavailable
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_moves, cypher_schema
from zapomni.shared.store.falkordb_internals import falkordb_on, read_cells

log = logging.getLogger(__name__)

TIMED_OUT = "Query timed out"  # FalkorDB's answer to a query past its TIMEOUT
NO_GRAPH = "Invalid graph operation on empty key"  # a read of a namespace never written
GRAPH_PREFIX = "zapomni:ns:"  # not "zapomni:{ns}": a namespace named "queue" would clash
# the vector index of a new namespace (FalkorDB fixes efRuntime when the index is created, with
# no per-query override): recall@10 0.986 at 10k chunks with ef_runtime 200 (100: 0.960);
# docs/benchmarks.md, "Vector search"
HNSW = {"m": 32, "ef_construction": 200, "ef_runtime": 200}
# FalkorDB up but refusing writes for now (refuses_writes, below)
FULL = ("FalkorDB cannot write: its disk is full or its memory limit is reached; free room "
        "for it (the work waits and retries meanwhile)")
# the store is away for now: down, or (in a cluster) a shard failing over or moved
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError,
               redis.exceptions.ClusterError, redis.exceptions.TryAgainError,
               redis.exceptions.AskError, redis.exceptions.SlotNotCoveredError,
               redis.exceptions.ReadOnlyError)


# what a Redis server answers while it cannot write: its append-only file failed (a full disk:
# MISCONF), too few replicas acknowledge (NOREPLICAS); redis-py raises its own classes for
# a memory limit reached (OOM) and a replica (READONLY). The server is up and reads work;
# writes come back once it has room
WRITE_REFUSALS = ("MISCONF", "NOREPLICAS")
REFUSING = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)


def refuses_writes(exc: BaseException) -> bool:
    """Whether ``exc`` is a Redis (or FalkorDB) server refusing to write for now. redis-py
    puts a pipeline's failed command before the server's words ("Command # 1 (...) of
    pipeline caused error: MISCONF ...")."""
    if isinstance(exc, REFUSING):
        return True
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    said = str(exc).rsplit("caused error: ", 1)[-1].lstrip("('\"")
    return said.startswith(WRITE_REFUSALS)


def graph_name(namespace: str) -> str:
    return GRAPH_PREFIX + namespace


def meta_pair(key: str, value: object) -> str:
    """How a top-level scalar metadata value is stored on a Memory (m.meta_kv) and matched
    by search filters: "key=<JSON value>", so 12 and "12" stay different and no user key
    ever becomes a property name in Cypher."""
    return f"{key}={msgspec.json.encode(value).decode()}"


def read_timeout_ms(settings: Settings) -> int:
    """FalkorDB stops a read after this long: nine tenths of the time the front waits for an
    answer (request_timeout), so a search the front gives up on does not keep FalkorDB busy,
    and the error says why before the front stops waiting."""
    return max(1, int(settings.request_timeout * 900))


class Graph(AsyncGraph):
    """One namespace's graph; its reads carry FalkorDB's per-query time limit."""

    def __init__(self, db: FalkorDB, name: str, read_timeout: int, raw: Any) -> None:
        super().__init__(db, name)
        self.read_timeout = read_timeout  # milliseconds
        self.key = name  # the graph's key
        self.raw = raw  # a client of the same server returning bytes (shared/store/postings.py)
        self.vector_prop = "embedding"  # where its chunks' vectors are (search_state says)


class GraphStore:
    """A FalkorDB client (a redis-py connection pool, or with ``falkordb_cluster`` a Redis
    Cluster client) and what this process has set up."""

    def __init__(self, settings: Settings, *, max_connections: int = 16) -> None:
        url = urlparse(settings.falkordb_url)
        address = dict(
            host=url.hostname or "127.0.0.1", port=url.port or 6379, password=url.password,
            socket_timeout=max(30.0, settings.request_timeout),
            socket_connect_timeout=min(settings.request_timeout, 3.0),
            decode_responses=True,  # what FalkorDB's client sets when it makes the pool
        )
        self.settings = settings
        # namespace -> (model, dim, vector property) whose indexes this process created
        self.prepared: dict[str, tuple[str, int, str]] = {}
        self.replids: dict[str, str] = {}  # namespace -> its master's replication id
        self.nodes: dict[str, redis.asyncio.Redis] = {}  # one client per master (replication)
        self.max_connections = max_connections
        self.pool: redis.asyncio.BlockingConnectionPool | None = None
        self.cluster: RedisCluster | None = None
        if settings.falkordb_cluster:
            self.cluster = RedisCluster(**address, max_connections=max_connections,
                                        require_full_coverage=False)
            self.db = falkordb_on(self.cluster, bounded(self.cluster.execute_command,
                                                        max_connections,
                                                        settings.request_timeout))
            self.raw: Any = RedisCluster(**{**address, "decode_responses": False},
                                         max_connections=max_connections,
                                         require_full_coverage=False)
            return
        # a blocking pool: a burst of queries waits for a free connection (up to
        # request_timeout) instead of failing at once with "Too many connections" (measured:
        # 50 concurrent searches made almost every one fail with redis-py's default pool)
        self.pool = redis.asyncio.BlockingConnectionPool(
            **address, max_connections=max_connections, timeout=settings.request_timeout)
        self.db = FalkorDB(connection_pool=self.pool)
        self.raw = redis.asyncio.Redis(connection_pool=redis.asyncio.BlockingConnectionPool(
            **{**address, "decode_responses": False}, max_connections=max_connections,
            timeout=settings.request_timeout))

    def graph(self, namespace: str) -> Graph:
        return Graph(self.db, graph_name(namespace), read_timeout_ms(self.settings), self.raw)

    async def aclose(self) -> None:
        for client in self.nodes.values():
            await client.aclose(close_connection_pool=True)
        await self.db.connection.aclose()
        if self.cluster is None:
            await self.raw.aclose(close_connection_pool=True)
        else:
            await self.raw.aclose()
        if self.pool is not None:
            await self.pool.aclose()


def bounded(execute: Callable[..., Awaitable[Any]], limit: int, timeout: float
            ) -> Callable[..., Awaitable[Any]]:
    """``execute`` with at most ``limit`` commands in flight, the rest waiting up to
    ``timeout`` seconds: what the blocking pool does for one node. (The cluster client's
    per-node limit raises at once instead of waiting.)"""
    slots = asyncio.Semaphore(limit)

    async def run_bounded(*args: Any, **kwargs: Any) -> Any:
        try:
            async with asyncio.timeout(timeout):
                await slots.acquire()
        except TimeoutError:
            raise redis.exceptions.ConnectionError("no connection available") from None
        try:
            return await execute(*args, **kwargs)
        finally:
            slots.release()
    return run_bounded


async def run(graph: AsyncGraph, query: str, params: dict[str, Any] | None = None, *,
              read_only: bool = False) -> list[list[Any]]:
    """Run one query; FalkorDB/redis errors become Unavailable or StoreError."""
    return (await execute(graph, query, params, read_only=read_only)).result_set


async def run_cells(graph: AsyncGraph, query: str, params: dict[str, Any] | None = None
                    ) -> list[list[Any]]:
    """A read-only query's rows of scalars (and arrays of them), read without the falkordb
    client's slow parsing of each cell (falkordb_internals.read_cells). Errors as ``run``'s."""
    return await execute(graph, query, params, read_only=True, cells=True)


async def execute(graph: AsyncGraph, query: str, params: dict[str, Any] | None = None, *,
                  read_only: bool = False, cells: bool = False
                  ) -> QueryResult | list[list[Any]]:
    """``run`` with the whole result: rows and what the query created or deleted (a
    QueryResult; ``cells``: ``read_cells``'s rows)."""
    limit = getattr(graph, "read_timeout", None) if read_only else None
    for attempt in (1, 2):
        try:
            if cells:
                return await read_cells(graph, query, params, limit)
            if read_only:
                return await graph.ro_query(query, params, timeout=limit)
            return await graph.query(query, params)
        except UNREACHABLE as exc:
            raise Unavailable("FalkorDB is unreachable; retry in a few seconds") from exc
        except redis.exceptions.ResponseError as exc:
            pushed = pushback(exc, limit)
            if pushed is not None:
                raise pushed from None
            if attempt == 1 and "db.idx." in str(exc):
                # after a restart FalkorDB rebuilds its indexes in the background, and an
                # index query meanwhile fails with "Invalid arguments"
                if await indexes_building(graph):
                    raise Unavailable("FalkorDB is rebuilding its indexes (it restarted); "
                                      "retry in a few seconds") from exc
                continue  # the index was finished between the query and the check
            if str(exc) == NO_GRAPH:  # the callers that expect it answer politely
                log.debug("%s: no graph yet", getattr(graph, "name", "?"))
            else:
                log.error("falkordb refused a query: %s", exc)
            raise StoreError("the graph store refused a query") from exc
    raise AssertionError("unreachable")


def pushback(exc: redis.exceptions.ResponseError, limit: int | None
             ) -> Overloaded | Unavailable | None:
    """The store pushing back for now: a read over its time limit, or no room to write."""
    if str(exc) == TIMED_OUT:
        return Overloaded(f"the query ran over its time limit ({(limit or 0) / 1000:g} s) in "
                          "the graph store and was stopped; retry in a few seconds, or ask "
                          "for less (a lower limit, a filter)")
    if refuses_writes(exc):
        return Unavailable(FULL)
    return None


async def indexes_building(graph: AsyncGraph) -> bool:
    """True while an index of this graph is not yet usable ("[Indexing] n/m: UNDER
    CONSTRUCTION" in db.indexes)."""
    try:
        rows = (await graph.ro_query(cypher_schema.INDEX_STATUS)).result_set
    except (redis.exceptions.RedisError, OSError):
        return False
    return any(status != "OPERATIONAL" for _, status in rows)


async def answer(pending: Awaitable[Any]) -> Any:
    """The server's answer to a command or pipeline sent without ``run``; the server away
    is Unavailable, as for every graph query."""
    try:
        return await pending
    except UNREACHABLE as exc:
        raise Unavailable("FalkorDB is unreachable; retry in a few seconds") from exc
    except redis.exceptions.ResponseError as exc:
        if refuses_writes(exc):
            raise Unavailable(FULL) from exc
        raise


async def namespace_exists(store: GraphStore, namespace: str) -> bool:
    return bool(await answer(store.db.connection.exists(graph_name(namespace))))


async def list_graphs(store: GraphStore) -> list[str]:
    """Every graph on the server (GRAPH.LIST; in a cluster, of every master): one per
    namespace, plus any not ours."""
    if store.cluster is None:
        return list(await answer(store.db.list_graphs()))
    per_node = await answer(store.cluster.execute_command(
        "GRAPH.LIST", target_nodes=RedisCluster.PRIMARIES))
    return [name for names in per_node.values() for name in names]


def model_mismatch(namespace: str, have: tuple[str, int], want: tuple[str, int]
                   ) -> EmbeddingRejected:
    return EmbeddingRejected(
        f"namespace '{namespace}' holds vectors of {have[0]} ({have[1]}-d) but this process "
        f"embeds with {want[0]} ({want[1]}-d); vectors of two models cannot be mixed. "
        f"To move the namespace to {want[0]}, run `zapomni reembed --namespace {namespace}` "
        "with workers that embed with it; otherwise set the embedder the namespace was built "
        f"with ({have[0]})."
    )


class SearchState(NamedTuple):
    """What a search reads of its namespace first (cypher_schema.SEARCH_STATE)."""

    prop: str  # the chunk property of this model's vectors ('' when nothing is stored yet)
    chunks: int
    threads: int  # THEN edges: turns linked in conversations
    versions: bool = False  # update_memory replaced a memory here (cypher_schema.MARK_VERSIONS)
    code: bool = False  # symbols of source code were written here (cypher_schema.MARK_CODE)


async def search_state(store: GraphStore, namespace: str, model: str, dim: int
                       ) -> SearchState:
    """For readers: the chunk property that holds this model's vectors ('' when the namespace
    holds nothing yet), with the counts a search needs, in one read. Raises when
    the namespace is built with another model. Read on every search: a reembed switches the
    namespace to its new model at any time."""
    try:
        rows = await run_cells(store.graph(namespace), cypher_schema.SEARCH_STATE)
    except StoreError:
        if await namespace_exists(store, namespace):
            raise
        rows = []  # no graph yet: a read of a key that does not exist is refused
    if not rows or rows[0][0] is None:
        return SearchState("", 0, 0)
    model_had, dim_had, prop, chunks, threads, versions, code = rows[0]
    if (model_had, int(dim_had)) != (model, dim):
        raise model_mismatch(namespace, (model_had, int(dim_had)), (model, dim))
    return SearchState(prop or cypher_moves.PROPS[0], int(chunks), int(threads),
                       bool(versions), bool(code))
