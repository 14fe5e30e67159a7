"""Nothing accepted is lost when a FalkorDB master dies: a worker confirms that its writes
reached ``falkordb_wait_replicas`` replicas before it marks a task done.

Redis replicates asynchronously: a master acknowledges a write before any replica has it, so
a master that dies at that moment takes the write with it, and its replica takes over
without it. Redis's ``WAIT n timeout`` blocks until n replicas acknowledge everything this
connection wrote; the replication stream is one ordered log per master, so a write sent on
the same connection after all of a job's writes, confirmed by ``WAIT``, confirms them all.

Two things make that exact here:

- one connection: ``confirm`` sends ``SET`` of a key in the namespace's hash slot, ``WAIT``
  and ``INFO replication`` in one pipeline to the master serving that slot (the cluster
  client spreads commands over pooled connections, and ``WAIT`` on a connection that wrote
  nothing returns at once);
- the same master: ``mark`` notes the master's replication id before the job writes, and
  ``confirm`` refuses when it changed. A replica promoted meanwhile has a new one; the job's
  writes may have died with the old master, so the job runs again (its writes are
  idempotent) instead of being confirmed on a node that never had them.

Both do nothing when ``falkordb_wait_replicas`` is 0.
"""

from __future__ import annotations

import msgspec
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from zapomni.shared.protocol.errors import Unavailable
from zapomni.shared.store.graphstore import UNREACHABLE, GraphStore, graph_name

SYNC_TTL_MS = 60_000  # the key confirm writes is gone a minute later
# seconds WAIT waits for the replicas before the job is retried (a replica on the same
# network acknowledges in milliseconds)
WAIT_TIMEOUT = 2.0


class Mark(msgspec.Struct, frozen=True):
    """The master a job's writes go to: its address and replication id."""

    node: str
    replid: str


def sync_key(namespace: str) -> str:
    """A key in the graph's hash slot: the graph key as hash tag (namespaces have no braces)."""
    return "{" + graph_name(namespace) + "}:synced"


async def mark(store: GraphStore, namespace: str) -> Mark | None:
    """Before a job writes: which master takes its writes. A namespace whose master changed
    since this process last looked is prepared again (its indexes may have been lost)."""
    if not store.settings.falkordb_wait_replicas:
        return None
    try:
        if store.cluster is not None:  # the cluster client finds a moved slot's new master
            await store.cluster.exists(graph_name(namespace))
        node, client = await _master(store, namespace)
        info = await client.info("replication")
    except UNREACHABLE as exc:
        raise Unavailable("FalkorDB is unreachable; retry in a few seconds") from exc
    if info.get("role") != "master":  # a stale view: the client learns it at its next query
        raise Unavailable(f"namespace '{namespace}' has no master now (a failover is under "
                          "way); retry in a few seconds")
    replid = str(info["master_replid"])
    if store.replids.get(namespace) != replid:
        store.prepared.pop(namespace, None)
        store.replids[namespace] = replid
    return Mark(node=node, replid=replid)


async def confirm(store: GraphStore, namespace: str, since: Mark | None) -> None:
    """After a job's writes, before its task moves on: ``falkordb_wait_replicas`` replicas
    of the same master have them, or Unavailable (the job retries)."""
    if since is None:
        return
    want = store.settings.falkordb_wait_replicas
    try:
        node, client = await _master(store, namespace)
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(sync_key(namespace), since.replid, px=SYNC_TTL_MS)
            pipe.execute_command("WAIT", want, int(WAIT_TIMEOUT * 1000))
            pipe.info("replication")
            _, acked, info = await pipe.execute()
    except UNREACHABLE as exc:
        raise Unavailable("FalkorDB is unreachable; retry in a few seconds") from exc
    if node != since.node or str(info.get("master_replid")) != since.replid:
        raise Unavailable(f"namespace '{namespace}' moved to another master while it was "
                          "written (a failover); its writes are made again")
    if int(acked) < want:
        raise Unavailable(f"only {acked} of the {want} replica(s) required confirmed the "
                          f"writes to namespace '{namespace}' within "
                          f"{WAIT_TIMEOUT:g} s")


async def _master(store: GraphStore, namespace: str) -> tuple[str, redis.asyncio.Redis]:
    """The master serving the namespace's graph, and a client of that one node."""
    if store.cluster is None:
        return "", redis.asyncio.Redis(connection_pool=store.pool)
    await store.cluster.initialize()  # again after a failure closed it
    node = store.cluster.get_node_from_key(graph_name(namespace))
    if node.name not in store.nodes:
        store.nodes[node.name] = redis.asyncio.Redis(
            connection_pool=redis.asyncio.BlockingConnectionPool(
                **_node_kwargs(store.cluster, node.host, node.port),
                max_connections=store.max_connections,
                timeout=store.settings.request_timeout))
    return node.name, store.nodes[node.name]


def _node_kwargs(cluster: RedisCluster, host: str, port: int) -> dict:
    kwargs = cluster.get_connection_kwargs()
    keep = ("password", "username", "socket_timeout", "socket_connect_timeout")
    return {"host": host, "port": port, "decode_responses": True,
            **{k: kwargs[k] for k in keep if k in kwargs}}

