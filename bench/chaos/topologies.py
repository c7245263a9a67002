"""The Redis a scenario runs on, behind one small protocol (:class:`RedisTopology`).

``single``: one AOF-backed ``redis-server`` pinned to its port, so a restart comes back where
the clients look (every scenario of ``make chaos``). ``cluster-replicas``: a Redis Cluster of 3
primaries with one replica each and a short ``cluster-node-timeout``, so killing or freezing a
primary promotes its replica within a few seconds (``make ha``).

``sentinel``: a primary, two replicas and three sentinels (down-after 1 s), the services
connecting through the sentinels (``--redis-sentinel``), so a killed or frozen primary is
replaced by a promoted replica and every client follows it.

A new topology is one class with these methods and one line in :data:`TOPOLOGIES`; the faults
and checks use nothing else.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import redis

from common.redis_config import connect, redis_client
from common.settings import RedisConnection
from informer_bus import local_redis
from tests.support.redis_cluster import ClusterNode, LocalRedisCluster
from tests.support.redis_topologies import SentinelGroup, role_of
from tests.support.waiting import wait_until

__all__ = ["TOPOLOGIES", "ClusterReplicas", "RedisTopology", "SentinelReplicas", "SingleRedis"]


class RedisTopology(Protocol):
    """What a scenario needs from its Redis, whatever its shape."""

    description: str
    """For the results table (e.g. ``3 primaries + 3 replicas``)."""

    @property
    def url(self) -> str:
        """The URL the services and the checks start from."""
        ...

    def service_flags(self) -> list[str]:
        """Every Redis flag of a reflector or processor: ``--redis-url`` and the rest."""
        ...

    def client(self) -> redis.Redis:
        """A command client for the checks (a cluster client on a cluster); caller closes."""
        ...

    def start(self) -> None:
        """Start every process and wait until Redis serves."""
        ...

    def stop(self) -> None:
        """Stop every process, frozen ones too (SIGCONT first); nothing is left running."""
        ...

    def kill_primary(self, key: str) -> str:
        """kill -9 the primary that serves ``key`` now; returns its name."""
        ...

    def restart_killed(self) -> None:
        """Start the killed primary again where it was (single: with its AOF)."""
        ...

    def pause_primary(self, key: str) -> str:
        """SIGSTOP the primary that serves ``key`` now; returns its name."""
        ...

    def resume_primary(self) -> None:
        """SIGCONT the paused primary."""
        ...

    def wait_promoted(self, timeout: float) -> str:
        """Wait until a replica serves in place of the killed or paused primary (every
        reachable node agrees); returns its name. Raises ``AssertionError`` on timeout."""
        ...

    def demoted(self) -> bool:
        """Whether the paused primary, reachable again, now replicates the one promoted."""
        ...

    def roles(self) -> str:
        """Who is primary and who replica now, one line (for the notes)."""
        ...

    def logs(self) -> dict[str, str]:
        """Log file name -> text, for the report."""
        ...


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


class _PinnedRedis(local_redis.RedisServer):
    """A redis-server that always comes back on the port it was given."""

    def __init__(self, workdir: Path, port: int, *, aof: bool, appendfsync: str) -> None:
        persistence = ("--appendonly", "yes", "--appendfsync", appendfsync) if aof else ()
        super().__init__(workdir, *persistence)
        self._pinned = port

    def _pick_port(self) -> int:
        return self._pinned


class SingleRedis:
    """One redis-server pinned to its port: no replica, so nothing is ever promoted."""

    def __init__(self, workdir: Path, *, aof: bool, appendfsync: str) -> None:
        self.description = "one redis-server, " + (f"AOF {appendfsync}" if aof else "no AOF")
        self.server = _PinnedRedis(
            workdir / "redis", local_redis.free_port(), aof=aof, appendfsync=appendfsync
        )

    @property
    def url(self) -> str:
        return self.server.url

    def service_flags(self) -> list[str]:
        return ["--redis-url", self.url]

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=2)

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        process = self.server.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a hung Redis must stop too
        self.server.stop()

    def kill_primary(self, key: str) -> str:
        process = self.server.process
        assert process is not None
        process.kill()
        process.wait(10)
        return f"redis-server :{self.server.port}"

    def restart_killed(self) -> None:
        self.server.start()

    def pause_primary(self, key: str) -> str:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGSTOP)
        return f"redis-server :{self.server.port}"

    def resume_primary(self) -> None:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGCONT)

    def wait_promoted(self, timeout: float) -> str:
        raise AssertionError("a single redis-server has no replica to promote")

    def demoted(self) -> bool:
        return False

    def roles(self) -> str:
        return f"primary :{self.server.port}"

    def logs(self) -> dict[str, str]:
        return {"redis.log": _read(self.server.log_path)}


class ClusterReplicas:
    """3 primaries with one replica each; a failover takes a few ``node_timeout_ms``.

    No persistence: a replica holds the data, and replication is asynchronous, so a primary
    killed right after acknowledging a write may take it along (no ``WAIT``).
    """

    node_timeout_ms = 1000

    def __init__(self, workdir: Path) -> None:
        self.cluster = LocalRedisCluster(
            workdir / "redis", primaries=3, replicas=1, node_timeout_ms=self.node_timeout_ms
        )
        self.description = f"Redis Cluster, 3 primaries + 3 replicas, node timeout " \
                           f"{self.node_timeout_ms} ms"  # fmt: skip
        self._struck: ClusterNode | None = None
        """The primary killed or paused last."""
        self._replicas: list[ClusterNode] = []
        """Its replicas at that moment (one of them must take over)."""
        self._paused = False

    @property
    def url(self) -> str:
        return self.cluster.url

    def service_flags(self) -> list[str]:
        return ["--redis-url", self.url, "--redis-cluster"]

    def client(self) -> redis.Redis:
        return redis_client(self.url, cluster=True, socket_timeout=2)

    def start(self) -> None:
        self.cluster.start()

    def stop(self) -> None:
        self.cluster.stop()  # continues a frozen node first

    def _strike(self, key: str, how: Callable[[ClusterNode], None]) -> str:
        primary = self.cluster.primary_for(key)
        self._replicas = self.cluster.replicas_of(primary)
        if not self._replicas:
            raise AssertionError(f"{primary.address} has no replica to promote")
        self._struck = primary
        how(primary)
        return f"primary {primary.address} (replica {self._replicas[0].address})"

    def kill_primary(self, key: str) -> str:
        def kill(node: ClusterNode) -> None:
            assert node.process is not None
            node.process.kill()
            node.process.wait(10)

        return self._strike(key, kill)

    def restart_killed(self) -> None:
        assert self._struck is not None
        self._struck.start()

    def pause_primary(self, key: str) -> str:
        self._paused = True
        return self._strike(key, lambda node: node.send(signal.SIGSTOP))

    def resume_primary(self) -> None:
        assert self._struck is not None
        self._struck.send(signal.SIGCONT)
        self._paused = False

    def wait_promoted(self, timeout: float) -> str:
        old = self._struck
        assert old is not None
        started = time.monotonic()
        new = wait_until(
            lambda: self.cluster.promoted_instead_of(old, self._replicas, exclude=()),
            timeout, interval=0.05, what=f"a replica of {old.address} to be promoted",
        )  # fmt: skip
        return f"{new.address} after {time.monotonic() - started:.1f} s"

    def demoted(self) -> bool:
        """Whether the struck primary (reachable again) sees itself as a replica."""
        assert self._struck is not None
        try:
            view = self.cluster.view(self._struck)
        except redis.RedisError:
            return False
        return any("myself" in v.flags and not v.is_primary for v in view)

    def roles(self) -> str:
        for node in self.cluster.live_nodes():
            if self._paused and node is self._struck:
                continue
            try:
                view = self.cluster.view(node)
            except redis.RedisError:
                continue
            ports = {v.node_id: v.address.rsplit(":", 1)[1] for v in view}
            return ", ".join(
                sorted(
                    f"{ports[v.node_id]} {'primary' if v.is_primary else 'replica'}"
                    + (f" of {ports.get(v.primary_id, '?')}" if v.primary_id else "")
                    + (" (failed)" if v.failed else "")
                    for v in view
                )
            )
        return "no node answers"

    def logs(self) -> dict[str, str]:
        return {
            f"redis-{node.address.rsplit(':', 1)[1]}.log": _read(node.log_path)
            for node in self.cluster.nodes
        }


class SentinelReplicas:
    """A primary with two replicas and three sentinels; the services and checks connect
    through the sentinels. No persistence: the replicas hold the data, and without ``WAIT``
    a primary killed right after acknowledging a write may take it along."""

    replicas = 2

    def __init__(self, workdir: Path) -> None:
        self.group = SentinelGroup(workdir / "redis", replicas=self.replicas)
        self.description = f"Sentinel, a primary + {self.replicas} replicas, 3 sentinels, " \
                           f"down-after {self.group.down_after_ms} ms"  # fmt: skip
        self._struck: local_redis.RedisServer | None = None
        self._struck_address: tuple[str, int] | None = None
        self._paused = False

    @property
    def url(self) -> str:
        return "redis://127.0.0.1/0"  # with --redis-sentinel only the scheme and db count

    def _connection(self) -> RedisConnection:
        return RedisConnection(url=self.url, sentinel=self.group.sentinel_addresses)

    def service_flags(self) -> list[str]:
        target = self._connection()
        return ["--redis-url", target.url, "--redis-sentinel", self.group.sentinel_addresses,
                "--redis-sentinel-master", target.sentinel_master]  # fmt: skip

    def client(self) -> redis.Redis:
        return connect(self._connection(), socket_timeout=2, socket_connect_timeout=2)

    def start(self) -> None:
        self.group.start()

    def stop(self) -> None:
        self.group.stop()  # continues a frozen node first

    def _strike(self, how: Callable[[local_redis.RedisServer], None]) -> str:
        address = self.group.master_address()
        node = self.group.node_at(address[1])
        self._struck, self._struck_address = node, address
        how(node)
        return f"primary :{address[1]}"

    def kill_primary(self, key: str) -> str:
        def kill(node: local_redis.RedisServer) -> None:
            assert node.process is not None
            node.process.kill()
            node.process.wait(10)

        return self._strike(kill)

    def restart_killed(self) -> None:
        assert self._struck is not None
        self._struck.start()

    def pause_primary(self, key: str) -> str:
        self._paused = True
        return self._strike(lambda node: self._signal(node, signal.SIGSTOP))

    @staticmethod
    def _signal(node: local_redis.RedisServer, number: signal.Signals) -> None:
        assert node.process is not None
        node.process.send_signal(number)

    def resume_primary(self) -> None:
        assert self._struck is not None
        self._signal(self._struck, signal.SIGCONT)
        self._paused = False

    def wait_promoted(self, timeout: float) -> str:
        assert self._struck_address is not None
        started = time.monotonic()
        host, port = self.group.wait_for_new_primary(self._struck_address, timeout)
        return f"{host}:{port} after {time.monotonic() - started:.1f} s"

    def demoted(self) -> bool:
        """Whether the struck primary (reachable again) now replicates another node."""
        assert self._struck is not None
        return role_of(self._struck.port) == "slave"

    def roles(self) -> str:
        parts = []
        for node in self.group.data_nodes:
            if node.process is None or not node.process.running:
                state = "down"
            elif self._paused and node is self._struck:
                state = "frozen"
            else:
                role = role_of(node.port)
                state = {"master": "primary", "slave": "replica"}.get(role or "", "not answering")
            parts.append(f"{node.port} {state}")
        return ", ".join(parts)

    def logs(self) -> dict[str, str]:
        servers = [*self.group.data_nodes, *self.group.sentinels]
        return {f"{server.workdir.name}.log": _read(server.log_path) for server in servers}


TopologyFactory = Callable[[Path, "TopologyOptions"], RedisTopology]


class TopologyOptions(Protocol):
    """What a topology may read from the scenario (``catalogue.Scenario`` has these)."""

    @property
    def aof(self) -> bool: ...

    @property
    def appendfsync(self) -> str: ...


TOPOLOGIES: dict[str, TopologyFactory] = {
    "single": lambda workdir, s: SingleRedis(workdir, aof=s.aof, appendfsync=s.appendfsync),
    "cluster-replicas": lambda workdir, s: ClusterReplicas(workdir),
    "sentinel": lambda workdir, s: SentinelReplicas(workdir),
}
"""``Scenario.topology`` -> how to build it."""
