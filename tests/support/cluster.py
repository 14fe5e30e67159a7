"""A real FalkorDB cluster for tests and benchmarks: six embedded servers (redis-server +
falkordb.so) in Redis Cluster mode on free loopback ports, three masters holding a third of
the hash slots each and one replica of each master, formed with CLUSTER MEET / ADDSLOTSRANGE
/ REPLICATE (no redis-cli). A node can be killed (-9) and started again on its port and data
directory, where it rejoins the cluster (as a replica, once its replica took over)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    port_free,
    server_command,
    stop_process,
    wait_for_server,
)

SLOTS = 16384
# a master unreachable this long is failed over by its replica. Not shorter: on a loaded
# host a server can stall for a second, and its replica would take over unasked
NODE_TIMEOUT_MS = 2000


@dataclass
class Node:
    port: int
    data: Path
    process: subprocess.Popen | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=5,
                           decode_responses=True)


@dataclass
class Cluster:
    binaries: tuple[Path, Path]
    nodes: list[Node] = field(default_factory=list)
    node_timeout_ms: int = NODE_TIMEOUT_MS

    @property
    def url(self) -> str:
        """Where clients start: any node; the client learns the others from it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def start(self, node: Node) -> None:
        command = [*server_command(self.binaries, node.port, node.data, persistent=False),
                   "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", str(self.node_timeout_ms),
                   # a shard down leaves the others serving (the default stops them all)
                   "--cluster-require-full-coverage", "no",
                   # a replica takes over however long it was cut off from its master (the
                   # default refuses past 10 node timeouts; tests stop replicas on purpose)
                   "--cluster-replica-validity-factor", "0"]
        node.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_for_server(node.port, node.process, timeout=60)

    def kill(self, node: Node) -> None:
        """kill -9: no shutdown, no last words to the replicas."""
        assert node.process is not None
        node.process.kill()
        node.process.wait()

    def masters(self) -> list[Node]:
        """The nodes that are masters now, as the live nodes see it."""
        return [n for n in self.live() if role(n) == "master"]

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.process is not None and n.process.poll() is None]

    def master_of(self, slot: int) -> Node:
        """The node serving this hash slot now (CLUSTER SLOTS, asked of a live node)."""
        with contextlib.closing(self.live()[0].client()) as client:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        for start, end, master, *_ in ranges:
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise LookupError(f"no master serves slot {slot}")


def role(node: Node) -> str:
    with contextlib.closing(node.client()) as client:
        return client.execute_command("ROLE")[0]


def node_id(node: Node) -> str:
    with contextlib.closing(node.client()) as client:
        return client.execute_command("CLUSTER", "MYID")


def cluster_info(node: Node) -> dict[str, str]:
    with contextlib.closing(node.client()) as client:
        text = client.execute_command("CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


def healthy(cluster: Cluster) -> bool:
    """Every live node says the cluster is ok, and every master has a replica in sync."""
    nodes = cluster.live()
    if not all(cluster_info(n).get("cluster_state") == "ok" for n in nodes):
        return False
    masters = cluster.masters()
    if len(masters) != 3:
        return False
    for master in masters:
        with contextlib.closing(master.client()) as client:
            info = client.info("replication")
        if not any(isinstance(v, dict) and v.get("state") == "online"
                   for k, v in info.items() if k.startswith("slave")):
            return False
    return True


def wait_until(check, what: str, timeout: float = 120.0) -> None:
    """Poll ``check()`` until true; fail saying what was awaited. (Synchronous: cluster set-up
    runs before a test's event loop.)"""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)


def form(cluster: Cluster) -> None:
    """Meet, give each master a third of the slots, make each other node a replica."""
    first = cluster.nodes[0]
    masters, replicas = cluster.nodes[:3], cluster.nodes[3:]
    for node in cluster.nodes[1:]:
        with contextlib.closing(node.client()) as client:
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", first.port)
    bounds = [SLOTS * i // 3 for i in range(4)]
    for i, master in enumerate(masters):
        with contextlib.closing(master.client()) as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)

    def all_met() -> bool:
        return all(int(cluster_info(n).get("cluster_known_nodes", 0)) == len(cluster.nodes)
                   for n in cluster.nodes)

    wait_until(all_met, "every node to know the others")
    for master, replica in zip(masters, replicas, strict=True):
        master_id = node_id(master)
        # a replica may only follow a master it already knows about
        wait_until(lambda r=replica, m=master_id: m in r.client().execute_command(
            "CLUSTER", "NODES"), "a replica to see its master")
        with contextlib.closing(replica.client()) as client:
            client.execute_command("CLUSTER", "REPLICATE", master_id)
    wait_until(lambda: healthy(cluster), "cluster_state:ok with a replica per master")


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536 and port_free(port + 10000):
            return port


@contextlib.contextmanager
def falkordb_cluster(node_timeout_ms: int = NODE_TIMEOUT_MS) -> Iterator[Cluster]:
    """Six nodes (3 masters + 3 replicas), formed and healthy; every node stopped on exit."""
    cluster = Cluster(ensure_binaries(), node_timeout_ms=node_timeout_ms)
    root = Path(tempfile.mkdtemp(prefix="zapomni-cluster-"))
    try:
        for i in range(6):
            node = Node(port=cluster_port(), data=root / f"node{i}")
            node.data.mkdir()
            cluster.nodes.append(node)
            cluster.start(node)
        form(cluster)
        yield cluster
    finally:
        for node in cluster.nodes:
            if node.process is not None:
                stop_process(node.process)
        shutil.rmtree(root, ignore_errors=True)
