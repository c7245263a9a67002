"""A child process of the demo: one ``informer-bus`` subcommand, its log, and its end as
the demo reports it (who, how, where the log is, its last lines)."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from informer_bus.child_process import (
    ChildExitedError,
    ChildNotReadyError,
    ChildProcess,
    ReadyWaitCancelledError,
    StopSignal,
)
from informer_bus.demo.settings import PROGRAM

__all__ = [
    "Child",
    "DemoError",
    "Processor",
    "StopRequestedError",
    "child_env",
    "death_report",
    "describe_exit",
]

_LAST_LINES: Final = 5


class DemoError(Exception):
    """The demo cannot go on; ``status`` is the exit status (2: the user's to fix)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def describe_exit(returncode: int) -> str:
    """How a child ended, as a person would say it (``killed by SIGKILL``)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


def death_report(
    name: str, pid: int, status: int, log_path: Path, tail: Sequence[str], *, verb: str = "died"
) -> list[str]:
    """The one report of a child's end: who, how, where the log is, and the log's last lines,
    labelled as such (they may or may not say why)."""
    lines = [f"{name} (pid {pid}) {verb}: {describe_exit(status)}; its log: {log_path}"]
    if tail:
        lines.append(f"last lines of {log_path.name}:")
        lines += [f"    {line}" for line in tail]
    return lines


class Child:
    """One ``informer-bus`` subcommand (or, with ``module``, another ``python -m`` program) as a
    child process, its output in ``log_path`` (which a restart appends to).

    Started tied to the demo, in a process group of its own (the package docstring says why),
    by a :class:`~informer_bus.child_process.ChildProcess` per run.
    """

    def __init__(
        self, name: str, args: Sequence[str], log_path: Path, *, module: str = "informer_bus.cli"
    ) -> None:
        self.name = name
        self.args = [sys.executable, "-m", module, *args]
        self.log_path = log_path
        self.process: ChildProcess | None = None
        self.url = ""
        self.starts = 0
        self.reported = False
        """Its end was already told to the user: nothing more to say about it."""

    def start(self, env: dict[str, str]) -> None:
        """Start (or start again); from the main thread only (the parent-death signal fires
        when the starting thread ends)."""
        self.close_log()
        if self.starts:
            with self.log_path.open("ab") as log:
                log.write(f"--- {PROGRAM}: restart {self.starts} ---\n".encode())
        self.url = ""
        self.reported = False
        self.process = ChildProcess(
            self.args, name=self.name, log_path=self.log_path, env=env, own_process_group=True
        ).start()
        self.starts += 1

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def exit_status(self) -> int | None:
        return None if self.process is None else self.process.poll()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def log_text(self) -> str:
        """What the current run (since the last start) wrote."""
        return "" if self.process is None else self.process.log_text()

    def last_lines(self, count: int = _LAST_LINES) -> list[str]:
        return [] if self.process is None else self.process.last_lines(count)

    def find(self, pattern: re.Pattern[str]) -> str | None:
        match = pattern.search(self.log_text())
        return match.group(1) if match else None

    def death(self, verb: str = "died") -> list[str]:
        """:func:`death_report` of its end, once."""
        status = self.exit_status()
        assert status is not None
        self.reported = True
        return death_report(
            self.name, self.pid, status, self.log_path, self.last_lines(), verb=verb
        )

    def wait_for(self, pattern: re.Pattern[str], stop: StopSignal, timeout: float) -> str:
        """The first group of ``pattern`` once it shows up in the log; ``stop``: the demo is
        asked to stop (:class:`StopRequestedError`)."""
        assert self.process is not None, "not started"
        try:
            return self.process.wait_ready(lambda: self.find(pattern), timeout, cancel=stop)
        except ChildExitedError as exc:
            if exc.returncode == 2 and (mistake := self._usage_error()) is not None:
                self.reported = True  # a mistake it explained itself, in one line: pass it on
                raise DemoError(f"{self.name} refused to start ({mistake}; its log: "
                                f"{self.log_path})", 2) from None  # fmt: skip
            raise DemoError("\n".join(self.death("died while starting"))) from None
        except ReadyWaitCancelledError:
            raise StopRequestedError from None
        except ChildNotReadyError:
            raise DemoError(f"{self.name} did not start within {timeout:.0f} s "
                            f"(see {self.log_path})") from None  # fmt: skip

    def _usage_error(self) -> str | None:
        """The one ``<program>: error: ...`` line a command prints before exiting 2."""
        tail = self.last_lines(1)
        return tail[0] if tail and ": error: " in tail[0] else None

    def terminate(self) -> None:
        if self.process is not None:
            self.process.terminate()

    def wait(self, timeout: float, hurry: StopSignal) -> str | None:
        """Wait for it to exit after :meth:`terminate`; kill it after ``timeout`` s (or when
        ``hurry`` is set). Returns a problem to report, ``None`` after a clean exit or when
        its end was already reported."""
        if self.process is None:
            return None
        status = self.process.stop(timeout, hurry=hurry)
        assert status is not None
        problem = None
        if self.process.killed:
            problem = f"{self.name} had to be killed (pid {self.pid})"
        if self.reported:
            return None
        self.reported = True
        if problem is None and status != 0:
            problem = (f"{self.name} (pid {self.pid}) {describe_exit(status)} while stopping; "
                       f"its log: {self.log_path}")  # fmt: skip
        return problem

    def close_log(self) -> None:
        """Reap the run that ended and close its log (it is not running: the demo calls this
        after the child died)."""
        if self.process is not None:
            self.process.close()


class Processor(Child):
    """A processor child and what the demo's supervision knows about it."""

    def __init__(self, number: int, args: Sequence[str], log_path: Path) -> None:
        super().__init__(f"processor-{number}", args, log_path)
        self.member_id = f"demo-processor-{number}"
        self.ready = False
        self.synced_since_start = False
        self.failed_starts = 0
        """Deaths in a row before its caches synced."""
        self.given_up = False
        self.died_at: float | None = None
        self.shards: tuple[int, ...] = ()
        """Shards its current process holds (last refresh)."""
        self.orphaned: tuple[int, ...] = ()
        """Shards it held when it died, until the others took them over."""
        self.taken_over_at: float | None = None
        """When the others took its shards over (the restart waits a little, to show it)."""
        self.held_before_death: tuple[int, ...] = ()
        """Shards it held when it last died (the rebalance after its restart is compared)."""
        self.back_pending = False
        """Restarted and synced, the rebalance that follows not reported yet."""

    def holds(self, owner: str | None) -> bool:
        """Whether the shard lease holder ``owner`` (``member/pid/random``) is its current
        process (a dead one's lease keeps the old pid until it expires)."""
        return (
            owner is not None and self.running and owner.startswith(f"{self.member_id}/{self.pid}/")
        )

    def summary(self) -> str:
        """Its state in a few words, for the view."""
        if self.given_up:
            state = "given up"
        elif not self.running:
            state = "down"
        elif not self.ready:
            state = f"starting, {len(self.shards)} shards" if self.shards else "starting"
        else:
            state = f"{len(self.shards)} shards"
        return f"{self.name}: {state}" + (f" (restarts {self.restarts})" if self.restarts else "")


class StopRequestedError(Exception):
    """Ctrl-C/SIGTERM/SIGHUP arrived while starting up."""


def child_env() -> dict[str, str]:
    """The demo's environment without ``INFORMER_BUS_*``: the demo's flags say everything,
    and a variable meant for a real deployment (a Redis URL, a prefix) must not leak in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}
