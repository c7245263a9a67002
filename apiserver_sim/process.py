"""Run the simulator as a child process (``python -m apiserver_sim``).

Benches use it so the reader under test does not share a GIL with the server; tests use it
to cover the real command. Faults and load go through the ``/_sim/`` control endpoints.

The child cannot outlive this process, however it ends: on Linux the kernel sends it SIGKILL
when the thread that started it exits (``prctl(PR_SET_PDEATHSIG)``, set between fork and
exec), so a bench killed with ``kill -9`` leaves no simulator holding a port. Start it from a
thread that lives as long as it should (the main thread, usually).
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, Self

import orjson

from apiserver_sim.command import READY_PREFIX
from apiserver_sim.settings import SimulatorSettings

__all__ = ["SimulatorProcess", "SimulatorProcessError"]

_PR_SET_PDEATHSIG = 1
_KEPT_LINES = 200


class SimulatorProcessError(RuntimeError):
    """The child failed to start or a control call failed."""


def _killed_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` asking the kernel to SIGKILL the child when its parent thread dies
    (``None`` off Linux). It makes two plain system calls, which is what may run between fork
    and exec in a process with threads; a parent that died before the first one is caught by
    the second."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    args = (ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL)) + (
        ctypes.c_ulong(0),
    ) * 3

    def tie() -> None:
        prctl(*args)
        if os.getppid() != parent:
            os._exit(1)

    return tie


class SimulatorProcess:
    """A simulator in a subprocess; ``start()`` returns once ``/healthz`` answers."""

    def __init__(
        self,
        settings: SimulatorSettings | None = None,
        *,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.settings = settings or SimulatorSettings()
        self.extra_args = list(extra_args)
        self.env = dict(os.environ if env is None else env)
        self.startup_timeout = startup_timeout
        self.url = ""
        self._child: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        """The child's last lines of output (stdout and stderr), for error messages."""
        self._ready = threading.Event()

    def command(self) -> list[str]:
        return [sys.executable, "-m", "apiserver_sim", *self.settings.command_line(),
                *self.extra_args]  # fmt: skip

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> Self:
        tie = _killed_with_parent()
        self._child = subprocess.Popen(
            self.command(), env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, preexec_fn=tie,  # noqa: PLW1509 - fork-safe (above)
        )  # fmt: skip
        assert self._child.stdout is not None
        self._reader = threading.Thread(
            target=self._read, args=(self._child.stdout,), name="apiserver-sim-output",
            daemon=True,
        )  # fmt: skip
        self._reader.start()
        try:
            self._wait(self._ready.is_set, "reporting readiness")
            self._wait(self._healthy, "answering /healthz")
        except BaseException:  # a failed start or Ctrl-C while starting: leave nothing running
            self.stop(timeout=0)
            raise
        return self

    def _read(self, output: IO[bytes]) -> None:
        for raw in output:
            line = raw.decode(errors="replace").rstrip()
            self._lines.append(line)
            if not self._ready.is_set() and line.startswith(READY_PREFIX):
                self.url = line[len(READY_PREFIX) :]
                self._ready.set()

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        assert self._child is not None
        deadline = time.monotonic() + self.startup_timeout
        while not check():
            status = self._child.poll()
            if status is not None:
                self._join_reader()
                raise SimulatorProcessError(
                    f"apiserver-sim exited ({status}) before {what}: {self.output()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise SimulatorProcessError(
                    f"apiserver-sim was not {what} within {self.startup_timeout:g} s: "
                    f"{self.output()[-2000:]}"
                )
            time.sleep(0.05)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def output(self) -> str:
        """The child's last lines of output."""
        return "\n".join(self._lines)

    @property
    def pid(self) -> int:
        assert self._child is not None, "not started"
        return self._child.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait up to ``timeout`` s, SIGKILL if it still runs; the exit status."""
        child, self._child = self._child, None
        if child is None:
            return 0
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        self._join_reader()
        if child.stdout is not None:
            child.stdout.close()
        return child.returncode

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(10)
            self._reader = None

    # ------------------------------------------------------------ control endpoints

    def control(self, action: str, method: str = "POST", **body: Any) -> Any:
        data = orjson.dumps(body) if method == "POST" else None
        query = ""
        if method == "GET" and body:
            query = "?" + "&".join(f"{k}={v}" for k, v in body.items())
        request = urllib.request.Request(
            f"{self.url}/_sim/{action}{query}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=600) as resp:
                return orjson.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise SimulatorProcessError(f"/_sim/{action}: {exc.code} {exc.read()!r}") from None

    def drop_watches(self) -> Any:
        return self.control("drop-watches")

    def stall_watches(self, seconds: float) -> Any:
        return self.control("stall-watches", seconds=seconds)

    def compact(self) -> Any:
        return self.control("compact")

    def restart(self, downtime: float = 0.0) -> Any:
        return self.control("restart", downtime=downtime)

    def fail_next(self, count: int, status: int = 500) -> Any:
        return self.control("fail-next", count=count, status=status)

    def slow_responses(self, seconds: float) -> Any:
        return self.control("slow", seconds=seconds)

    def inject_malformed_lines(
        self, count: int = 1, kind: str = "truncated", *, after_first_line: bool = False
    ) -> Any:
        return self.control("malformed", count=count, kind=kind, afterFirstLine=after_first_line)

    def populate(self, resource: str = "pods", count: int = 100, seed: int = 0) -> Any:
        return self.control("populate", resource=resource, count=count, seed=seed)

    def churn(
        self, rate: float, seconds: float, seed: int = 0, wait: bool = True, **kw: Any
    ) -> Any:
        return self.control("churn", rate=rate, seconds=seconds, seed=seed, wait=wait, **kw)

    def ground_truth(self, resource: str = "pods") -> dict[str, str]:
        doc = self.control("ground-truth", method="GET", resource=resource)
        result: dict[str, str] = doc["objects"]
        return result

    def stats(self) -> Any:
        return self.control("stats", method="GET")

    def conflicts(self) -> dict[str, dict[str, dict[str, int]]]:
        """The child's 409 counts (:meth:`Simulator.conflicts`, same shape)."""
        table: dict[str, dict[str, dict[str, int]]] = self.control("conflicts", method="GET")[
            "conflicts"
        ]
        return table

    def reset_conflicts(self) -> dict[str, dict[str, dict[str, int]]]:
        """Count the child's 409s from zero again; returns what was counted until now."""
        table: dict[str, dict[str, dict[str, int]]] = self.control("reset-conflicts")["conflicts"]
        return table
