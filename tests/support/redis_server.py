"""A private redis-server per test session, on a free port.

Tests never use a Redis that happens to run on the machine (127.0.0.1:6379 may exist and must
not be disturbed): they start their own with no persistence, in a temporary directory.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A redis-server subprocess; ``url`` is ready once :meth:`start` returns."""

    def __init__(self, workdir: Path, *extra_args: str) -> None:
        self.workdir = workdir
        self.extra_args = extra_args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed; `make test` installs it as root")
        self.port = free_port()
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
            "--logfile", str(self.workdir / "redis.log"), *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        log = (self.workdir / "redis.log").read_text(errors="replace")
                        raise RuntimeError(f"redis-server did not start:\n{log}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
