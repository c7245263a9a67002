"""Child processes that cannot outlive the process that started them, even a SIGKILLed one.

A parent that is killed with SIGKILL (or whose terminal closed while it ignored the hangup) runs
no cleanup at all, so its children, each in a process group of its own, go on under PID 1
forever: a Redis holding a port, processors renewing leases nobody watches. The one mechanism
that needs no cooperation from the dying parent is Linux's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``): the kernel sends the child a signal of our choice the moment its
parent dies. It is set in the child between ``fork`` and ``exec`` (a ``preexec_fn``) and
survives ``exec``, so it works for any program, ``redis-server`` as much as Python children,
without changing them. A pipe the children watch would have needed every child to read it,
which ``redis-server`` does not.

Why SIGKILL is the default death signal: a parent that dies this way had no chance to run its
ordered shutdown (processors first, Redis last), so there is no order left to keep, and the
only promise still worth making is that nothing survives. SIGTERM would race every child's
graceful stop against the others' (a processor draining towards a Redis that is exiting at the
same moment) and trusts each child to honour it. Callers whose children must clean up after
themselves can pass ``death_signal=signal.SIGTERM``.

The caveats, which callers must respect:

- The signal fires when the *thread* that forked the child exits, not the process. Start
  children from a thread that lives as long as they should (the main thread, in the demo).
- The kernel clears the setting when the child ``exec``s a set-user-ID or set-group-ID program
  (or one with file capabilities): such a child is not tied to its parent.
- A parent that dies between ``fork`` and the ``prctl`` call would go unnoticed, so the child
  checks ``getppid()`` right after setting it and exits if it has already been reparented.
- ``preexec_fn`` runs Python in the forked child; CPython documents it as unsafe when other
  threads may hold locks at fork time. The function here makes two plain system calls
  (``prctl`` through a function pointer resolved before the fork, and ``getppid``) and takes
  no C library lock another thread could have held.
- Linux only. Elsewhere (no ``prctl`` in the C library) :func:`start_tied` starts the child
  untied, and :data:`TIES_CHILDREN` says so.

:class:`ChildProcess` is the one supervisor built on it, for every program here that runs
children (the demo, the benches, the private Redis, the tests; the API simulator, a package of
its own, has its own runner): start tied; wait until ready; stop with a signal, a bounded
grace, then SIGKILL; reap; and never leak a process, a pipe, a thread or a file, whichever of
those steps fails.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Protocol, Self, TypeVar

__all__ = [
    "TIES_CHILDREN",
    "ChildExitedError",
    "ChildNotReadyError",
    "ChildProcess",
    "ReadyWaitCancelledError",
    "StopSignal",
    "parent_death_preexec",
    "start_tied",
]

T = TypeVar("T")

_PR_SET_PDEATHSIG: Final = 1


def _find_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL: Final = _find_prctl()

TIES_CHILDREN: Final = _PRCTL is not None
"""Whether children started here die with their parent (Linux)."""


def parent_death_preexec(death_signal: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``death_signal`` when the calling thread
    exits; build it in the parent just before starting the child (it remembers the parent's
    pid to detect the race described in the module docstring)."""
    prctl = _PRCTL
    if prctl is None:
        raise OSError("prctl(PR_SET_PDEATHSIG) is only available on Linux")
    parent = os.getpid()
    signum = ctypes.c_ulong(int(death_signal))
    zero = ctypes.c_ulong(0)
    option = ctypes.c_int(_PR_SET_PDEATHSIG)

    def tie_to_parent() -> None:
        if prctl(option, signum, zero, zero, zero) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the prctl: nobody will signal us
            os._exit(128 + int(death_signal))

    return tie_to_parent


def start_tied(
    args: Sequence[str],
    *,
    death_signal: signal.Signals = signal.SIGKILL,
    **popen_kwargs: Any,
) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(args, **popen_kwargs)`` whose child gets ``death_signal`` when the
    calling thread (see the module docstring) or its process dies, however it dies. Only bytes
    I/O (no ``text=``), and no ``preexec_fn`` of the caller's: the tie is the one it runs."""
    if "preexec_fn" in popen_kwargs:
        raise TypeError("start_tied() sets preexec_fn itself")
    tie = parent_death_preexec(death_signal) if TIES_CHILDREN else None
    # The thread-safety caveat of preexec_fn is the module docstring's; tie_to_parent meets it.
    return subprocess.Popen(list(args), preexec_fn=tie, **popen_kwargs)  # noqa: PLW1509


class StopSignal(Protocol):
    """Anything with ``is_set()``, e.g. a :class:`threading.Event`."""

    def is_set(self) -> bool: ...


class ChildExitedError(RuntimeError):
    """The child ended while :meth:`ChildProcess.wait_ready` waited for it."""

    def __init__(self, child: ChildProcess, returncode: int) -> None:
        super().__init__(f"{child.name} exited ({returncode}) before it was ready")
        self.returncode = returncode


class ChildNotReadyError(RuntimeError):
    """The child was not ready within :meth:`ChildProcess.wait_ready`'s timeout."""


class ReadyWaitCancelledError(RuntimeError):
    """:meth:`ChildProcess.wait_ready`'s ``cancel`` was set (the parent is stopping)."""


@dataclass(eq=False)
class ChildProcess:
    """One child process, from start to reaped; what every runner of children here uses.

    ``args`` may be changed until :meth:`start`, which may be called again once the previous
    run ended (the demo restarts processors). The child's stdin is ``/dev/null``; its stdout
    and stderr go to ``log_path``, appended (a restart continues the same file), or to an
    anonymous temporary file without one; :meth:`log_text` is what the current run wrote.
    With ``on_line``, they go through a pipe instead: a reader thread hands every line to
    ``on_line`` as it arrives (to time log lines, or find a readiness line), then appends
    it to the log.

    ``tied``: started with :func:`start_tied` (``death_signal`` when the starting thread
    dies), so start it from a thread that outlives it. ``own_process_group``: a Ctrl-C in the
    terminal reaches only us, who stop the children in our own order. ``stop_signal``: what
    :meth:`terminate` sends to ask for a clean stop (py-spy saves its profile on SIGINT).

    Invariant: after :meth:`stop`, :meth:`kill` or :meth:`close` the process is reaped, the
    reader thread joined and every pipe and file closed.
    """

    args: Sequence[str]
    _: KW_ONLY
    name: str = ""
    """For messages and the reader thread's name (default: the program's file name)."""
    log_path: Path | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | str | None = None
    on_line: Callable[[bytes], None] | None = None
    tied: bool = True
    death_signal: signal.Signals = signal.SIGKILL
    own_process_group: bool = False
    stop_signal: signal.Signals = signal.SIGTERM
    killed: bool = field(default=False, init=False)
    """The last :meth:`stop` had to SIGKILL it (or :meth:`kill` or :meth:`close` did)."""
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log: IO[bytes] | None = field(default=None, init=False, repr=False)
    _log_start: int = field(default=0, init=False, repr=False)
    _closed_text: str = field(default="", init=False, repr=False)
    _reader: threading.Thread | None = field(default=None, init=False, repr=False)
    _asked_to_stop: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.args = list(self.args)
        self.name = self.name or Path(self.args[0]).name
        if self.env is not None:
            self.env = dict(self.env)

    # --- starting

    def start(self) -> Self:
        """Start the child (again, after a previous run ended)."""
        if self.running:
            raise RuntimeError(f"{self.name} is running already (pid {self.pid})")
        self.close()
        if self.log_path is None:
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        else:
            self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        self._closed_text = ""
        self.killed = self._asked_to_stop = False
        output: int | IO[bytes] = subprocess.PIPE if self.on_line is not None else self._log
        popen: dict[str, Any] = {
            "stdin": subprocess.DEVNULL, "stdout": output, "stderr": subprocess.STDOUT,
            "env": self.env, "cwd": self.cwd,
        }  # fmt: skip
        if self.own_process_group:
            popen["process_group"] = 0
        try:
            if self.tied:
                self._process = start_tied(self.args, death_signal=self.death_signal, **popen)
            else:
                self._process = subprocess.Popen(self.args, **popen)
        except BaseException:
            self.close()
            raise
        if self.on_line is not None:
            self._reader = threading.Thread(
                target=self._read_lines, name=f"{self.name}-output", daemon=True
            )
            self._reader.start()
        return self

    def _read_lines(self) -> None:
        process, log, on_line = self._process, self._log, self.on_line
        assert process is not None and process.stdout is not None
        assert log is not None and on_line is not None
        for line in process.stdout:
            on_line(line)
            log.write(line)
            log.flush()

    # --- what it is doing

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._process.pid

    @property
    def started(self) -> bool:
        return self._process is not None

    def poll(self) -> int | None:
        """Its exit status once it ended (reaping it), else ``None``."""
        return None if self._process is None else self._process.poll()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_text(self) -> str:
        """What the current (or last) run wrote so far."""
        if self._log is None:
            return self._closed_text
        if self.log_path is not None:
            try:
                with self.log_path.open("rb") as log:
                    log.seek(self._log_start)
                    return log.read().decode(errors="replace")
            except FileNotFoundError:
                return ""
        self._log.flush()
        fd = self._log.fileno()
        size = os.fstat(fd).st_size - self._log_start
        return os.pread(fd, max(0, size), self._log_start).decode(errors="replace")

    def last_lines(self, count: int) -> list[str]:
        """The last ``count`` non-blank lines of :meth:`log_text`."""
        return [line.rstrip() for line in self.log_text().splitlines() if line.strip()][-count:]

    def wait_ready(
        self,
        check: Callable[[], T | None],
        timeout: float,
        *,
        what: str = "ready",
        cancel: StopSignal | None = None,
        interval: float = 0.05,
    ) -> T:
        """``check()``'s first result that is not ``None``, polled every ``interval`` s.

        Raises :class:`ChildExitedError` when the child ends first, :class:`ChildNotReadyError`
        after ``timeout`` s and :class:`ReadyWaitCancelledError` once ``cancel`` is set; the
        child keeps running in the last two cases (stopping it is the caller's choice).
        """
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found is not None:
                return found
            status = self.poll()
            if status is not None:
                raise ChildExitedError(self, status)
            if cancel is not None and cancel.is_set():
                raise ReadyWaitCancelledError(f"stopped waiting for {self.name} to be {what}")
            if time.monotonic() > deadline:
                raise ChildNotReadyError(f"{self.name} was not {what} within {timeout:g} s")
            time.sleep(interval)

    # --- stopping

    def send_signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` (unless it ended and was reaped: its pid may be someone else's)."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signum)

    def terminate(self) -> None:
        """Ask for a clean stop (``stop_signal``), once per run, without waiting: a second
        SIGTERM means "hurry" to some programs."""
        if self.running and not self._asked_to_stop:
            self._asked_to_stop = True
            self.send_signal(self.stop_signal)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status once it ends; ``TimeoutError`` if it still runs after ``timeout``."""
        if self._process is None:
            raise RuntimeError(f"{self.name} was never started")
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.name} {self.pid} still runs after {timeout} s") from None

    def stop(self, grace: float, *, hurry: StopSignal | None = None) -> int | None:
        """:meth:`terminate`, wait up to ``grace`` s (less once ``hurry`` is set), SIGKILL if
        it still runs; reap it and close everything. Its exit status (``None`` if it was never
        started); :attr:`killed` says whether it had to be killed."""
        if self._process is None:
            return None
        self.terminate()
        deadline = time.monotonic() + grace
        hurried = hurry.is_set if hurry is not None else lambda: False
        while (remaining := deadline - time.monotonic()) > 0 and not hurried():
            try:  # returns the moment it exits; looks at hurry every 50 ms
                self._process.wait(remaining if hurry is None else min(remaining, 0.05))
                break
            except subprocess.TimeoutExpired:
                continue
        return self.kill()

    def kill(self) -> int | None:
        """SIGKILL if it still runs (kill -9, which also ends a stopped process), reap, close
        everything (:meth:`close`). Its exit status (``None`` if it was never started)."""
        self.close()
        return None if self._process is None else self._process.returncode

    def close(self) -> None:
        """Leave nothing behind: kill it if it still runs, reap it, join the reader, close the
        pipe and the log (keeping an anonymous log's text for :meth:`log_text`)."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            self.killed = True
        if process is not None:
            process.wait()
        if self._reader is not None:
            self._reader.join(10)  # ends with the pipe, unless a grandchild still holds it
            self._reader = None
        if process is not None and process.stdout is not None:
            process.stdout.close()
        if self._log is not None:
            if self.log_path is None:
                self._closed_text = self.log_text()
            self._log.close()
            self._log = None
