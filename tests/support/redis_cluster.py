"""A local Redis Cluster from private ``redis-server`` processes, with or without replicas.

The pipeline tests on a cluster (tests/pipeline/cluster) use 3 primaries; the HA fault suite
(bench/chaos, ``cluster-replicas``) uses 3 primaries with one replica each, so a primary can be
killed or frozen and a replica promoted. Both need the same things: nodes on free ports (the
cluster bus port too: ``port + 10000`` may be taken or out of range), joined by
``redis-cli --cluster create``, and a view of who serves which slot that is read from the
nodes themselves (``CLUSTER NODES``), since after a failover nothing else knows.

Each node keeps its port across a restart (``restart``): a killed primary restarted with its
``nodes.conf`` rejoins as a replica of the node that replaced it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_until

__all__ = ["CLI_MISSING", "ClusterNode", "LocalRedisCluster", "NodeView", "RedisCliMissingError"]

CLI_MISSING = (
    "redis-cli is not installed: it ships with redis-server (e.g. 'sudo apt-get install "
    "redis-server', which 'make install' runs as root); the cluster tests need it to join nodes"
)


class RedisCliMissingError(RuntimeError):
    """No ``redis-cli`` on the PATH; the message says where it comes from."""


class ClusterNode(RedisServer):
    """A cluster-enabled ``redis-server`` that comes back on its first port when restarted."""

    def __init__(self, workdir: Path, node_timeout_ms: int, *extra_args: str) -> None:
        super().__init__(
            workdir,
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(workdir / "nodes.conf"),
            "--cluster-node-timeout", str(node_timeout_ms),
            "--cluster-port", str(free_port()),
            # A replica may always fail over, however long ago it last heard from its primary:
            # on a loaded machine the default (10 node timeouts) once refused the only replica
            # of a killed primary ("Disconnected from master for longer than allowed") and the
            # cluster stayed down. What it may lack is what asynchronous replication loses.
            "--cluster-replica-validity-factor", "0",
            *extra_args,
        )  # fmt: skip
        self.address = ""
        """``127.0.0.1:PORT`` once started (also while killed: a restart reuses it)."""

    def _pick_port(self) -> int:
        return self.port or free_port()

    def start(self, timeout: float = 10.0) -> None:
        super().start(timeout)
        self.address = f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout,
                           socket_connect_timeout=timeout)  # fmt: skip

    def send(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self) -> None:
        if self.alive():
            self.send(signal.SIGCONT)  # a frozen node must stop too
        super().stop()


@dataclass(frozen=True, slots=True)
class NodeView:
    """One line of ``CLUSTER NODES`` as a node sees the cluster."""

    node_id: str
    address: str
    """``127.0.0.1:PORT`` (without the bus port)."""
    flags: frozenset[str]
    primary_id: str | None
    """The node it replicates (``None``: it is a primary)."""
    slots: tuple[tuple[int, int], ...]

    @property
    def is_primary(self) -> bool:
        return "master" in self.flags

    @property
    def failed(self) -> bool:
        return bool({"fail", "fail?"} & self.flags)

    def serves(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)


def parse_cluster_nodes(text: str) -> list[NodeView]:
    views = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        slots = []
        for item in fields[8:]:
            if item.startswith("["):  # a slot being migrated
                continue
            first, _, last = item.partition("-")
            slots.append((int(first), int(last or first)))
        views.append(
            NodeView(
                node_id=fields[0],
                address=fields[1].split("@")[0],
                flags=frozenset(fields[2].split(",")),
                primary_id=None if fields[3] == "-" else fields[3],
                slots=tuple(slots),
            )
        )
    return views


class LocalRedisCluster:
    """``primaries`` primaries with ``replicas`` replicas each, on free ports under ``root``.

    :meth:`start` waits until every node reports ``cluster_state:ok`` and every replica is
    attached; :meth:`stop` stops every node (a frozen one is continued first).
    """

    def __init__(
        self,
        root: Path,
        *,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.root = root
        self.primaries = primaries
        self.replicas = replicas
        self.nodes = tuple(
            ClusterNode(root / f"node-{index}", node_timeout_ms, *extra_args)
            for index in range(primaries * (1 + replicas))
        )

    @property
    def url(self) -> str:
        """The first node's URL: the services find the others from it."""
        return self.nodes[0].url

    def start(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisCliMissingError(CLI_MISSING)
        try:
            for node in self.nodes:
                node.start()
            addresses = [node.address for node in self.nodes]
            created = subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas",
                 str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{created.stdout}"
                                   f"{created.stderr}")  # fmt: skip
            wait_until(self._formed, 30, interval=0.1,
                       what="cluster_state:ok and every replica attached")  # fmt: skip
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalRedisCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what the nodes say ----------------------------------------------------------------

    def live_nodes(self, exclude: tuple[ClusterNode, ...] = ()) -> Iterator[ClusterNode]:
        return (n for n in self.nodes if n.alive() and n not in exclude)

    @staticmethod
    def _ask(node: ClusterNode, *command: str) -> str:
        client = node.client()
        try:
            reply = client.execute_command(*command)  # type: ignore[no-untyped-call]
        finally:
            client.close()
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def view(self, node: ClusterNode) -> list[NodeView]:
        """The cluster as ``node`` sees it."""
        return parse_cluster_nodes(self._ask(node, "CLUSTER", "NODES"))

    def state_ok(self, node: ClusterNode) -> bool:
        return "cluster_state:ok" in self._ask(node, "CLUSTER", "INFO")

    def _formed(self) -> bool:
        try:
            if not all(self.state_ok(node) for node in self.nodes):
                return False
            views = [self.view(node) for node in self.nodes]
        except redis.RedisError:
            return False
        want = self.primaries * self.replicas
        # Every node knows every replica (a replica attached late is invisible to the others).
        return all(sum(1 for v in view if not v.is_primary) == want for view in views)

    def node_at(self, address: str) -> ClusterNode:
        return next(node for node in self.nodes if node.address == address)

    def primary_for(self, key: str, *, exclude: tuple[ClusterNode, ...] = ()) -> ClusterNode:
        """The primary that serves ``key``'s slot, as the first reachable node sees it."""
        asked = next(self.live_nodes(exclude))
        slot = int(self._ask(asked, "CLUSTER", "KEYSLOT", key))
        view = self.view(asked)
        owner = next(v for v in view if v.is_primary and v.serves(slot) and not v.failed)
        return self.node_at(owner.address)

    def replicas_of(self, primary: ClusterNode) -> list[ClusterNode]:
        """Its replicas, as it sees them."""
        view = self.view(primary)
        me = next(v for v in view if "myself" in v.flags)
        return [self.node_at(v.address) for v in view if v.primary_id == me.node_id]

    def promoted_instead_of(
        self, old: ClusterNode, replicas: list[ClusterNode], *, exclude: tuple[ClusterNode, ...]
    ) -> ClusterNode | None:
        """One of ``replicas`` once every reachable node but ``old`` and those in ``exclude``
        reports ``cluster_state:ok`` and sees that replica as a primary with slots; else
        ``None``."""
        candidates = {r.address for r in replicas}
        seen: set[str] | None = None
        try:
            for node in self.live_nodes((*exclude, old)):
                if not self.state_ok(node):
                    return None
                here = {v.address for v in self.view(node)
                        if v.is_primary and v.slots and v.address in candidates}  # fmt: skip
                seen = here if seen is None else seen & here
        except redis.RedisError:
            return None
        if seen is None or len(seen) != 1:
            return None
        return self.node_at(seen.pop())
