"""FalkorDB in Redis Cluster mode (3 masters + 3 replicas of the embedded server): namespaces
on every shard, written by real workers and searched through the MCP tools and the query
service; and a master killed (-9) while memories are in flight into its namespace, its
replica taking over, with no accepted memory lost.

"Accepted" is a memory whose ingest task is ``done``: the worker marks it so only once a
replica of the master holds its writes (ZAPOMNI_FALKORDB_WAIT_REPLICAS,
shared/store/replication.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest
from fastmcp import Client
from redis.cluster import key_slot

from tests.support.cluster import Cluster, Node, cluster_info, falkordb_cluster, healthy, role
from tests.support.mcp import call, error
from tests.support.servers import ThreadedServer
from tests.support.waiting import eventually
from tests.support.workers import run_workers, wait_tasks
from zapomni.services.mcp.server import build_server
from zapomni.services.query.app import build_app
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import graph_name
from zapomni.shared.tasks import tasks

# (text, a question it answers)
FACTS = [
    ("The capital of Australia is Canberra, not Sydney.", "Which city is Australia's capital?"),
    ("Honeybees communicate the direction of flowers with a waggle dance.",
     "How do bees tell each other where flowers are?"),
    ("The Mariana Trench is the deepest part of the world's oceans.",
     "Where is the ocean deepest?"),
    ("Marie Curie won Nobel Prizes in both physics and chemistry.",
     "Who won Nobel Prizes in two sciences?"),
    ("Copper turns green over time because it forms a patina of copper carbonate.",
     "Why does copper become green?"),
    ("The Great Wall of China was built over many centuries by several dynasties.",
     "Who built the Great Wall and when?"),
    ("Octopuses have three hearts and blue blood.", "How many hearts does an octopus have?"),
    ("Mount Kilimanjaro in Tanzania is Africa's highest mountain.",
     "What is the tallest mountain in Africa?"),
]
ARTICLE = " ".join(
    f"Paragraph {i} is about the history of lighthouse number {i} on the northern coast, "
    f"its keeper, the storms of year {1800 + i} and the ships it guided home safely."
    for i in range(24))
MEMORY_COUNT = "MATCH (m:Memory) RETURN count(m)"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with falkordb_cluster() as cluster:
        yield cluster


@pytest.fixture
def on_cluster(settings: Settings, cluster: Cluster) -> Settings:
    """The queue and task records stay on the test's one Redis; the graphs go to the cluster,
    and a task is done once one replica has its writes."""
    return msgspec.structs.replace(settings, falkordb_url=cluster.url, falkordb_cluster=True,
                                   falkordb_wait_replicas=1)


@pytest.fixture
async def client(on_cluster: Settings) -> AsyncIterator[Client]:
    """The MCP tools, with the real query service on the cluster behind them."""
    port = int(on_cluster.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(on_cluster), port=port):
        async with Client(build_server(on_cluster)) as client:
            yield client


def spread_namespaces(cluster: Cluster, per_master: int) -> dict[int, list[str]]:
    """Namespaces whose graph key hashes to each master's slots: master port -> names."""
    spread: dict[int, list[str]] = {n.port: [] for n in cluster.masters()}
    for i in itertools.count():
        name = f"shard-{i}"
        owner = spread[cluster.master_of(key_slot(graph_name(name).encode())).port]
        if len(owner) < per_master:
            owner.append(name)
        if all(len(names) == per_master for names in spread.values()):
            return spread


def graphs_on(node: Node) -> list[str]:
    with contextlib.closing(node.client()) as client:
        return client.execute_command("GRAPH.LIST")


def memories_on(node: Node, namespace: str) -> int:
    with contextlib.closing(node.client()) as client:
        reply = client.execute_command("GRAPH.RO_QUERY", graph_name(namespace), MEMORY_COUNT)
    return int(reply[1][0][0])


def replica_of(cluster: Cluster, master: Node) -> Node:
    for node in cluster.live():
        with contextlib.closing(node.client()) as client:
            reply = client.execute_command("ROLE")
        if reply[0] == "slave" and int(reply[2]) == master.port:
            return node
    raise LookupError(f"no replica follows the master on port {master.port}")


async def add(client: Client, facts: list[tuple[str, str]], namespace: str) -> list[dict]:
    return [await call(client, "add_memory", text=text, namespace=namespace)
            for text, _ in facts]


async def found(client: Client, question: str, namespace: str) -> list[str]:
    answer = await call(client, "search_memory", query=question, namespace=namespace,
                        mode="vector", limit=3)
    return [hit["memory_id"] for hit in answer["results"]]


@pytest.mark.timeout(600)  # 80 s measured on a host at load 30, cluster start included
async def test_namespaces_on_every_master_are_written_and_searched(cluster, on_cluster,
                                                                  client, aredis, part_chunks):
    spread = spread_namespaces(cluster, per_master=2)
    receipts = {ns: await add(client, FACTS[:3], ns) for names in spread.values()
                for ns in names}
    # and a document that fans out into parts, on every master
    documents = {names[0]: await call(client, "add_memory", text=ARTICLE, namespace=names[0])
                 for names in spread.values()}

    part_chunks(4)
    await run_workers(msgspec.structs.replace(on_cluster, chunk_tokens=64), count=2,
                      timeout=300)

    await wait_tasks(aredis, [r["task_id"] for rs in receipts.values() for r in rs]
                     + [r["task_id"] for r in documents.values()])
    for ns, added in receipts.items():
        for receipt, (_, question) in zip(added, FACTS, strict=False):
            assert (await found(client, question, ns))[0] == receipt["memory_id"], ns
    for ns, receipt in documents.items():
        assert (await tasks.get_task(aredis, receipt["task_id"])).total > 1
        hits = await found(client, "Who kept lighthouse number 17?", ns)
        assert receipt["memory_id"] in hits, ns
    for port, names in spread.items():  # each graph lives on its slot's master and replica
        master = next(n for n in cluster.nodes if n.port == port)
        for node in (master, replica_of(cluster, master)):
            assert sorted(graphs_on(node)) == sorted(graph_name(ns) for ns in names)


async def fail_over_mid_ingest(cluster: Cluster, settings: Settings, client: Client, aredis,
                               namespace: str) -> tuple[Node, list[dict], list[str]]:
    """Cut the namespace's master off from its replica, let workers write FACTS[3:] there,
    kill the master (-9) and wait for the replica to take over. Returns the new master, the
    receipts, and the states their tasks were in when the master died."""
    master = cluster.master_of(key_slot(graph_name(namespace).encode()))
    replica = replica_of(cluster, master)
    # the replica stops, and the master drops its link: the master acknowledges writes no
    # one else has (a replica only lagging behind would get them after the master's death)
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        with contextlib.closing(master.client()) as admin:
            admin.execute_command("CLIENT", "KILL", "TYPE", "replica")
        receipts = await add(client, FACTS[3:], namespace)
        await run_workers(settings, max_jobs=len(receipts), timeout=300)
        assert memories_on(master, namespace) > len(FACTS[:3])  # written, acknowledged
        states = [(await tasks.get_task(aredis, r["task_id"])).state for r in receipts]
        cluster.kill(master)
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)

    async def promoted() -> tuple[str, str]:
        return role(replica), cluster_info(replica).get("cluster_state", "")

    await eventually(promoted, lambda seen: seen == ("master", "ok"),
                     "the replica to take over from the killed master", timeout=120)
    # what the master acknowledged and nobody else had died with it
    assert memories_on(replica, namespace) == len(FACTS[:3])
    return replica, receipts, states


@pytest.mark.timeout(900)  # 50-70 s measured; a failover and a replica's full sync
async def test_a_master_killed_mid_ingest_loses_no_accepted_memory(cluster, on_cluster,
                                                                  client, aredis):
    namespace = spread_namespaces(cluster, per_master=1)[cluster.nodes[0].port][0]
    old_master = cluster.nodes[0]
    first = await add(client, FACTS[:3], namespace)
    await run_workers(on_cluster, timeout=300)
    await wait_tasks(aredis, [r["task_id"] for r in first])

    new_master, second, states = await fail_over_mid_ingest(cluster, on_cluster, client,
                                                            aredis, namespace)
    assert "done" not in states, states  # none confirmed: none accepted

    await asyncio.to_thread(cluster.start, old_master)  # back, as the new master's replica
    await eventually(lambda: asyncio.to_thread(healthy, cluster), bool,
                     "the old master to follow its former replica", timeout=120)
    await run_workers(on_cluster, timeout=600)

    accepted = first + second
    await wait_tasks(aredis, [r["task_id"] for r in accepted])
    assert role(old_master) == "slave"
    assert memories_on(new_master, namespace) == len(accepted)
    for receipt, (_, question) in zip(accepted, FACTS, strict=True):
        assert (await found(client, question, namespace))[0] == receipt["memory_id"]


@pytest.mark.timeout(900)  # 40-50 s measured
async def test_without_waiting_for_a_replica_a_failover_loses_done_memories(
        cluster, on_cluster, client, aredis):
    """What ZAPOMNI_FALKORDB_WAIT_REPLICAS=0 (the default, for one server) risks in a
    cluster: tasks done on the master's word, their memories gone with it."""
    settings = msgspec.structs.replace(on_cluster, falkordb_wait_replicas=0)
    namespace = spread_namespaces(cluster, per_master=1)[cluster.nodes[1].port][0]
    first = await add(client, FACTS[:3], namespace)
    await run_workers(settings, timeout=300)
    await wait_tasks(aredis, [r["task_id"] for r in first])

    new_master, second, states = await fail_over_mid_ingest(cluster, settings, client, aredis,
                                                            namespace)

    lost = [r for r, state in zip(second, states, strict=True) if state == "done"]
    assert lost
    assert memories_on(new_master, namespace) == len(first)
    for receipt in lost:
        record = await tasks.get_task(aredis, receipt["task_id"])
        assert record.state == "done"
        assert "not found" in await error(client, "get_memory",
                                          memory_id=receipt["memory_id"], namespace=namespace)
