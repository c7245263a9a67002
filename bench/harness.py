"""A service (reflector or processor) as a child process of a benchmark.

Both benchmarks run ``python -m <service> --log-json`` children and time them by the moments
certain log lines arrive; this is the one place that spawns them (an
:class:`informer_bus.child_process.ChildProcess` each), hands their log lines over as they
arrive, and stops them (SIGTERM, SIGKILL if they hang). Subclasses only say which lines matter.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

import orjson

from apiserver_sim import SimulatorProcess, SimulatorSettings
from informer_bus.child_process import ChildProcess
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def start_simulator_and_redis(
    stack: contextlib.ExitStack, settings: SimulatorSettings, workdir: Path
) -> tuple[SimulatorProcess, RedisServer]:
    """The simulator (without the caller's ``INFORMER_BUS_*`` settings leaking into it) and a
    private redis-server, both stopped when ``stack`` closes: what every end-to-end bench runs
    its contenders against."""
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}
    process = SimulatorProcess(settings, env=clean_env, startup_timeout=120)
    stack.callback(process.stop)
    process.start()
    server = RedisServer(workdir / "redis")
    stack.callback(server.stop)
    server.start()
    return process, server


class BenchError(RuntimeError):
    """Something other than speed went wrong (a reader lost events, a child died)."""


class ServiceChild:
    """``python -m <module> --log-json --<flag> <value>...``; JSON log lines go to
    :meth:`on_message` with the time they arrived (``clock``), and to ``log_path``."""

    label = "service"

    def __init__(
        self,
        module: str,
        flags: Mapping[str, object],
        log_path: Path,
        *,
        extra_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        stop_timeout: float = 20.0,
    ) -> None:
        self.args = [sys.executable, "-m", module, "--log-json"]
        for name, value in flags.items():
            self.args += [f"--{name}", str(value)]
        self.log_path = log_path
        self.clock = clock
        self.extra_env = dict(extra_env or {})
        self.stop_timeout = stop_timeout
        self.process: ChildProcess | None = None
        self.spawned = 0.0
        self.cwd = ROOT
        """Where the child runs: ``python -m`` imports the service from here (another checkout's
        root runs that checkout's code, for a same-run comparison)."""

    def on_message(self, message: str, arrived: float) -> None:
        """A log line's message arrived (on the log reader thread)."""

    def start(self) -> Self:
        # Settings come from the flags alone, never from the benchmark's own environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}
        env.update(self.extra_env)
        self.spawned = self.clock()
        self.process = ChildProcess(
            self.args, name=self.label, log_path=self.log_path, env=env, cwd=self.cwd,
            on_line=self._on_line,
        ).start()  # fmt: skip
        return self

    def _on_line(self, raw: bytes) -> None:
        arrived = self.clock()
        try:
            message = str(orjson.loads(raw).get("message", ""))
        except (orjson.JSONDecodeError, AttributeError):
            return
        self.on_message(message, arrived)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def check_alive(self) -> None:
        if self.process is None or not self.process.running:
            raise BenchError(f"the {self.label} exited; its log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Ask for a clean stop (SIGTERM) without waiting."""
        if self.process is not None:
            self.process.terminate()

    def stop(self) -> None:
        """SIGTERM (a clean stop), SIGKILL if it hangs; reap it and its log reader."""
        if self.process is not None:
            self.process.stop(self.stop_timeout)
            self.process = None
