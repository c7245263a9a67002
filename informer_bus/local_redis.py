"""A private ``redis-server`` child process on a free port, for the demo and the tests.

Neither the demo nor the tests may use a Redis that happens to run on the machine
(127.0.0.1:6379 may hold someone's data): they start their own with no persistence, in a
directory of their own, and stop it when done.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import redis

from informer_bus.child_process import ChildExitedError, ChildNotReadyError, ChildProcess

__all__ = [
    "INSTALL_HINT",
    "REDIS_STOP_TIMEOUT",
    "RedisServer",
    "RedisServerMissingError",
    "free_port",
]

REDIS_STOP_TIMEOUT = 10.0
"""Seconds a SIGTERMed redis-server gets to exit before SIGKILL."""

INSTALL_HINT = (
    "redis-server is not installed: install Redis 7 (e.g. 'sudo apt-get install redis-server'; "
    "'make install' does it when run as root)"
)


class RedisServerMissingError(RuntimeError):
    """No ``redis-server`` binary on the PATH; the message says how to get one."""


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A redis-server subprocess; ``url`` is ready once :meth:`start` returns.

    It runs in a process group of its own, so a Ctrl-C in the terminal reaches only its parent,
    which can then stop the clients first and Redis last (instead of Redis vanishing under
    clients that are still shutting down).

    ``die_with_parent``: the server gets SIGKILL when the thread calling :meth:`start` exits
    (:mod:`informer_bus.child_process`), so even a SIGKILLed parent leaves no Redis behind.
    Off by default: a caller must start it from a thread that outlives the server.
    """

    def __init__(self, workdir: Path, *extra_args: str, die_with_parent: bool = False) -> None:
        self.workdir = workdir
        self.extra_args = extra_args
        self.die_with_parent = die_with_parent
        self.port = 0
        self.process: ChildProcess | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / "redis.log"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _pick_port(self) -> int:
        """The port to listen on; tests override it to restart a server on the same port."""
        return free_port()

    def command(self, binary: str) -> list[str]:
        """The command line, run once :attr:`port` is picked; a subclass that needs a config
        file (a sentinel: ``redis-server FILE --sentinel``) puts it first."""
        return [
            binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
            "--logfile", str(self.log_path), *self.extra_args,
        ]  # fmt: skip

    def probe_client(self) -> redis.Redis:
        """The client :meth:`start` PINGs until the server answers; a subclass for a server that
        wants TLS or a password says how to reach it."""
        return redis.Redis.from_url(self.url, socket_timeout=1)

    def start(self, timeout: float = 10.0) -> None:
        """Start and wait until it answers PING; raises :class:`RedisServerMissingError`
        without the binary and ``RuntimeError`` (with its log) when it does not come up."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerMissingError(INSTALL_HINT)
        self.port = self._pick_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = self.command(binary)
        self.process = ChildProcess(
            command, name="redis-server", tied=self.die_with_parent, own_process_group=True
        ).start()
        client = self.probe_client()
        try:
            self.process.wait_ready(
                lambda: self._answers(client), timeout, what="answering PING", interval=0.02
            )
        except (ChildExitedError, ChildNotReadyError):
            path = self.log_path
            log = path.read_text(errors="replace") if path.exists() else ""
            self.stop()
            raise RuntimeError(f"redis-server did not start:\n{log}") from None
        finally:
            client.close()

    @staticmethod
    def _answers(client: redis.Redis) -> bool | None:
        try:
            return bool(client.ping()) or None
        except redis.ConnectionError:
            return None

    def stop(self) -> None:
        """SIGTERM and reap (SIGKILL if it does not exit within :data:`REDIS_STOP_TIMEOUT`)."""
        if self.process is not None:
            self.process.stop(REDIS_STOP_TIMEOUT)
