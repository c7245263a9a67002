"""Run the simulator as a child process (``python -m informer_bus.cli apiserver-sim``).

Benches use it so the reader under test does not share a GIL with the server; tests use it
to cover the real command. Faults and load go through the ``/_sim/`` control endpoints.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Self

import orjson

from apiserver_sim.command import READY_PREFIX, flag_name
from apiserver_sim.settings import SimulatorSettings
from informer_bus.child_process import ChildExitedError, ChildNotReadyError, ChildProcess
from informer_bus.lifecycle import StartStop

__all__ = ["SimulatorProcess", "SimulatorProcessError"]


class SimulatorProcessError(RuntimeError):
    """The child failed to start or a control call failed."""


class SimulatorProcess(StartStop):
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
        self.process: ChildProcess | None = None
        """The child, its output (the readiness line, its log) collected."""
        self._ready_url: str | None = None

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "informer_bus.cli", "apiserver-sim"]
        defaults = SimulatorSettings()
        for f in dataclasses.fields(SimulatorSettings):
            value = getattr(self.settings, f.name)
            if value == getattr(defaults, f.name) and f.name != "port":
                continue
            if isinstance(value, bool):
                args.append(flag_name(f.name) if value else "--no-" + flag_name(f.name)[2:])
            elif isinstance(value, float) and math.isinf(value):
                args += [flag_name(f.name), "inf"]
            else:
                args += [flag_name(f.name), str(value)]
        return args + self.extra_args

    def start(self) -> Self:
        process = ChildProcess(
            self.command(), name="apiserver-sim", env=self.env, on_line=self._on_line
        )
        self.process = process.start()
        try:
            self.url = process.wait_ready(
                lambda: self._ready_url, self.startup_timeout, what="reporting readiness"
            )
            process.wait_ready(self._healthy, self.startup_timeout, what="answering /healthz")
        except (ChildExitedError, ChildNotReadyError) as exc:
            process.kill()
            log = process.log_text()[-2000:]
            raise SimulatorProcessError(f"apiserver-sim: {exc}: {log}") from None
        except BaseException:  # Ctrl-C while starting: leave nothing running
            process.kill()
            raise
        return self

    def _on_line(self, line: bytes) -> None:
        text = line.decode(errors="replace").strip()
        if self._ready_url is None and text.startswith(READY_PREFIX):
            self._ready_url = text[len(READY_PREFIX) :]

    def _healthy(self) -> bool | None:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as resp:
                return resp.status == 200 or None
        except OSError:
            return None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait, SIGKILL if it hangs; returns the exit status."""
        process, self.process = self.process, None
        if process is None:
            return 0
        status = process.stop(timeout)
        return 0 if status is None else status

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
