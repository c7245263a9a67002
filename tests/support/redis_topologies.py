"""Local Redis topologies of real ``redis-server`` processes on free ports, for the tests and
the benches: a :class:`SentinelGroup` is a primary, its replicas and three sentinels
(``redis-server FILE --sentinel``, the same binary), with the faults a failover test needs.

Every process runs in a directory of its own under the group's, so their logs stay apart and
each sentinel can rewrite its own config file (which Sentinel insists on).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import redis

from informer_bus.local_redis import RedisServer

__all__ = ["SentinelGroup", "SentinelServer", "role_of"]

MASTER_NAME = "mymaster"


def role_of(port: int, host: str = "127.0.0.1") -> str | None:
    """What the node at ``host:port`` says it is (``ROLE``: ``master``, ``slave``, ``sentinel``),
    ``None`` when it does not answer."""
    client = redis.Redis(host=host, port=port, socket_timeout=2)
    try:
        role = client.execute_command("ROLE")
    except redis.RedisError:
        return None
    finally:
        client.close()
    first = role[0] if role else None
    return first.decode() if isinstance(first, bytes) else first


class SentinelServer(RedisServer):
    """A sentinel: ``redis-server sentinel.conf --sentinel`` with ``lines`` in its config file,
    written when it starts (the port is only known then)."""

    def __init__(self, workdir: Path, lines: list[str]) -> None:
        super().__init__(workdir)
        self.lines = lines

    @property
    def config_path(self) -> Path:
        return self.workdir / "sentinel.conf"

    def command(self, binary: str) -> list[str]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    f"dir {self.workdir}",
                    f"logfile {self.log_path}",
                    *self.lines,
                ]
            )
            + "\n"
        )
        return [binary, str(self.config_path), "--sentinel"]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        time.sleep(0.05)


class SentinelGroup:
    """A primary, ``replicas`` replicas and three sentinels monitoring it as ``master``.

    ``down_after_ms``: how long the primary must not answer before a sentinel calls it down;
    ``failover_timeout_ms``: Sentinel's failover-timeout (also how long it waits before trying
    a failed failover again). Both short by default, for tests.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        master: str = MASTER_NAME,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
    ) -> None:
        self.workdir = workdir
        self.master = master
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.data_nodes: list[RedisServer] = []
        self.sentinels: list[SentinelServer] = []
        self._first_primary: RedisServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> SentinelGroup:
        """Start everything and wait until every sentinel sees the primary, its replicas and
        the other sentinels (so a failover can be agreed on at once). Stops what it started
        when something fails."""
        try:
            primary = RedisServer(self.workdir / "node-0")
            primary.start()
            self._first_primary = primary
            self.data_nodes.append(primary)
            for index in range(1, self.replica_count + 1):
                replica = RedisServer(
                    self.workdir / f"node-{index}", "--replicaof", "127.0.0.1", str(primary.port)
                )
                replica.start()
                self.data_nodes.append(replica)
            quorum = self.sentinel_count // 2 + 1
            for index in range(self.sentinel_count):
                sentinel = SentinelServer(
                    self.workdir / f"sentinel-{index}",
                    [
                        f"sentinel monitor {self.master} 127.0.0.1 {primary.port} {quorum}",
                        f"sentinel down-after-milliseconds {self.master} {self.down_after_ms}",
                        f"sentinel failover-timeout {self.master} {self.failover_timeout_ms}",
                        f"sentinel parallel-syncs {self.master} 1",
                    ],
                )
                sentinel.start()
                self.sentinels.append(sentinel)
            _wait(self._settled, timeout, "sentinels discovering each other and the replicas")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process (a SIGSTOPped one is resumed first, so it can exit cleanly)."""
        for server in [*self.sentinels, *self.data_nodes]:
            if server.process is not None and server.process.running:
                server.process.send_signal(signal.SIGCONT)
        for server in [*self.sentinels, *self.data_nodes]:
            server.stop()

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the clients are given ------------------------------------------------------------

    @property
    def sentinel_addresses(self) -> str:
        """``--redis-sentinel``'s value: ``127.0.0.1:P1,127.0.0.1:P2,...``."""
        return ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)

    @property
    def first_primary(self) -> RedisServer:
        """The node that was the primary when the group started."""
        assert self._first_primary is not None
        return self._first_primary

    def node_at(self, port: int) -> RedisServer:
        return next(node for node in self.data_nodes if node.port == port)

    # -- state ---------------------------------------------------------------------------------

    def _ask(self, sentinel: SentinelServer, *command: str) -> object:
        client = redis.Redis(port=sentinel.port, socket_timeout=2, decode_responses=True)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def master_address(self) -> tuple[str, int]:
        """The primary's address, as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            try:
                reply = self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master)
            except redis.RedisError:
                continue
            if isinstance(reply, (list, tuple)) and len(reply) == 2:
                return str(reply[0]), int(reply[1])
        raise RuntimeError(f"no sentinel names a primary for {self.master!r}")

    def _settled(self) -> bool:
        try:
            for sentinel in self.sentinels:
                state = self._master_state(sentinel)
                if int(str(state.get("num-other-sentinels", 0))) < self.sentinel_count - 1:
                    return False
                if int(str(state.get("num-slaves", 0))) < self.replica_count:
                    return False
        except redis.RedisError:
            return False
        return True

    def _master_state(self, sentinel: SentinelServer) -> dict[str, object]:
        reply = self._ask(sentinel, "SENTINEL", "MASTER", self.master)
        if isinstance(reply, dict):  # redis-py parses it
            return reply
        assert isinstance(reply, list)
        return dict(zip(reply[::2], reply[1::2], strict=True))

    # -- faults --------------------------------------------------------------------------------

    def kill_primary(self) -> tuple[str, int]:
        """kill -9 the current primary; returns the address it had."""
        address = self.master_address()
        node = self.node_at(address[1])
        assert node.process is not None
        node.process.kill()
        return address

    def pause_primary(self) -> RedisServer:
        """SIGSTOP the current primary (it keeps its sockets but answers nothing)."""
        node = self.node_at(self.master_address()[1])
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
        return node

    @staticmethod
    def resume(node: RedisServer) -> None:
        """SIGCONT a node :meth:`pause_primary` stopped."""
        assert node.process is not None
        node.process.send_signal(signal.SIGCONT)

    def wait_for_new_primary(self, old: tuple[str, int], timeout: float = 60.0) -> tuple[str, int]:
        """Wait until every sentinel names a primary other than ``old`` and that node says it
        is a master (``ROLE``); returns its address."""

        def promoted() -> bool:
            try:
                addresses = {
                    tuple(self._ask(s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master))  # type: ignore[arg-type]
                    for s in self.sentinels
                    if s.process is not None and s.process.running
                }
            except redis.RedisError:
                return False
            if len(addresses) != 1:
                return False
            host, port = next(iter(addresses))
            if (str(host), int(port)) == old:
                return False
            return role_of(int(port), str(host)) == "master"

        _wait(promoted, timeout, f"a primary other than {old[0]}:{old[1]}")
        return self.master_address()
