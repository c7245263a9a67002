"""A primary with real replicas on loopback, and the faults of a failover: a replica cut off
from its primary (it keeps its data and stays a read-only replica, of a primary that is not
there), a primary that dies (SIGKILL), a promotion (``REPLICAOF NO ONE``, what Sentinel does
to the replica it picks).

The cut is a ``REPLICAOF`` to a port nobody listens on rather than a SIGSTOP of the replica: a
stopped process still has its socket, whose kernel buffer keeps receiving the stream, so it
would catch up on SIGCONT with what the primary sent before dying."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_until

__all__ = ["ReplicaSet"]


@dataclass
class ReplicaSet:
    """``primary`` and ``replicas``, all private redis-servers in ``workdir``."""

    workdir: Path
    count: int = 1
    primary: RedisServer = field(init=False)
    replicas: list[RedisServer] = field(default_factory=list, init=False)

    def start(self) -> ReplicaSet:
        self.primary = RedisServer(self.workdir / "primary")
        self.primary.start()
        for index in range(self.count):
            replica = RedisServer(
                self.workdir / f"replica-{index}",
                "--replicaof", "127.0.0.1", str(self.primary.port),
            )  # fmt: skip
            replica.start()
            self.replicas.append(replica)
        for replica in self.replicas:
            self._wait_for_link(replica)
        return self

    def _wait_for_link(self, replica: RedisServer) -> None:
        client = self.client(replica)
        try:
            wait_until(
                lambda: client.info("replication")["master_link_status"] == "up",
                timeout=30, interval=0.02, what="the replica's link to its primary",
            )  # fmt: skip
        finally:
            client.close()

    @staticmethod
    def client(server: RedisServer) -> redis.Redis:
        return redis.Redis.from_url(server.url, socket_timeout=10)

    def in_sync(self) -> None:
        """Every replica has everything the primary has now (a write confirmed by all)."""
        client = self.client(self.primary)
        try:
            client.set("replica-set:sync", "1")
            assert client.wait(self.count, 30_000) >= self.count
        finally:
            client.close()

    def cut(self, replica: RedisServer) -> None:
        """The replica loses its link: what the primary writes from now on, it lacks (the
        primary counts it gone once this returns)."""
        self._replicate(replica, free_port())
        primary = self.client(self.primary)
        try:
            wait_until(
                lambda: primary.info("replication")["connected_slaves"] < self.count,
                timeout=10, interval=0.02, what="the primary to notice the cut",
            )  # fmt: skip
        finally:
            primary.close()

    def reconnect(self, replica: RedisServer) -> None:
        """The link is back: the replica catches up (a partial resync) before this returns."""
        self._replicate(replica, self.primary.port)
        self.in_sync()

    def _replicate(self, replica: RedisServer, port: int) -> None:
        client = self.client(replica)
        try:
            client.execute_command("REPLICAOF", "127.0.0.1", str(port))
        finally:
            client.close()

    def kill_primary(self) -> None:
        """The primary dies with whatever it had not replicated."""
        assert self.primary.process is not None
        self.primary.process.send_signal(signal.SIGKILL)
        self.primary.process.wait(10)

    def promote(self, replica: RedisServer) -> None:
        client = self.client(replica)
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
            wait_until(
                lambda: client.info("replication")["role"] == "master",
                timeout=10,
                interval=0.02,
                what="the promotion",
            )
        finally:
            client.close()

    def stop(self) -> None:
        """Stop whatever :meth:`start` started (all of it, or what it got to)."""
        for replica in self.replicas:
            replica.stop()
        primary = getattr(self, "primary", None)
        if primary is not None:
            primary.stop()
