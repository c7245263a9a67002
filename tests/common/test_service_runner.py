"""common.service_runner as a real service process sees it: which signals stop it cleanly,
and what a second signal, or a stop that outlives its bound, does (common.signalled_stop).

The services here are the smallest ones the runner can run: one that starts and stops at once,
and one whose stop is slow, so what is tested is the runner alone (the reflector's and the
processor's SIGTERM/SIGHUP behaviour is tested in tests/reflector/ha and tests/processor/ha).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from tests.support.paths import ROOT

_READY = "serving"
_SERVICE = f"""
from common.service_runner import run_until_signalled

class Idle:
    def start(self): pass
    def stop(self): print("stopped", flush=True)

raise SystemExit(run_until_signalled(Idle(), program="idle", on_started=lambda: print(
    "{_READY}", flush=True)))
"""


def _ignore_hangups() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before it execs


@pytest.fixture
def start_service() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*, nohup: bool = False) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVICE], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_ignore_hangups if nohup else None,  # noqa: PLW1509 - no threads here
        )  # fmt: skip
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == _READY + "\n", line + process.stderr.read()
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_stops_the_service_cleanly(
    start_service: Callable[..., subprocess.Popen[str]], how: signal.Signals
) -> None:
    process = start_service()
    process.send_signal(how)
    stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert stdout == "stopped\n"


def test_a_hangup_ignored_by_whoever_started_it_stays_ignored(
    start_service: Callable[..., subprocess.Popen[str]],
) -> None:
    process = start_service(nohup=True)
    process.send_signal(signal.SIGHUP)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=2)  # still serving: a nohup'd service outlives its terminal
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr


_LAUNCHER = """
import os, signal, subprocess, sys
from tests.support import inherited_signals
if sys.argv[1] == "fixed":
    inherited_signals.give_children_the_default_stop_signals()
os.kill(os.getpid(), signal.SIGINT)  # the launcher's ignore still holds here
os.kill(os.getpid(), signal.SIGHUP)
probe = (
    "import signal as s; "
    "print(s.getsignal(s.SIGINT) is s.default_int_handler, s.getsignal(s.SIGHUP) is s.SIG_DFL)"
)
print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout, end="")
worker = (  # a pytest-xdist worker imports tests/conftest.py too
    "import signal as s; from tests.support import inherited_signals as i; "
    "i.give_children_the_default_stop_signals(); "
    "print(s.getsignal(s.SIGINT) is i._still_ignored, s.getsignal(s.SIGHUP) is i._still_ignored)"
)
print(subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True).stdout, end="")
"""


def _ignore_stop_signals() -> None:
    """What ``nohup`` does, and a non-interactive shell for ``make test &``."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("mode", "child_sees_defaults", "worker_stays_deaf"),
    [("fixed", "True True", "True True"), ("as-launched", "False False", "True True")],
)
def test_a_suite_launched_deaf_to_ctrl_c_and_hangups_gives_its_children_the_defaults(
    mode: str, child_sees_defaults: str, worker_stays_deaf: str
) -> None:
    """tests/conftest.py's call: without it, ``nohup make test`` hands every service under test
    an ignored SIGINT and SIGHUP, which the services rightly keep, and each test that presses
    Ctrl-C on one waits for an exit that never comes. A test worker, which calls it too, stays
    as deaf as the run, though with the fix it was not born with the ignore."""
    launched = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, mode], capture_output=True, text=True, cwd=ROOT,
        preexec_fn=_ignore_stop_signals, timeout=30, check=False,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.splitlines() == [child_sees_defaults, worker_stays_deaf]


# A service whose stop joins a non-daemon thread that takes ``sys.argv[1]`` seconds to end:
# the shape of a processor's stop (ownership.stop -> thread.join) in a few lines.
_SLOW_STOP = """
import sys, threading, time
from common.service_runner import run_until_signalled

class SlowToStop:
    def __init__(self, seconds):
        self.seconds = seconds
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="slow-worker")

    def run(self):
        self.stopping.wait()
        time.sleep(self.seconds)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join()

    @property
    def stop_timeout(self):
        return float(sys.argv[2])

    def unfinished_stop(self):
        return "the slow worker" if self.thread.is_alive() else ""

sys.exit(run_until_signalled(
    SlowToStop(float(sys.argv[1])), program="slow", on_started=lambda: print("up", flush=True)
))
"""


def _start_slow_to_stop(stop_seconds: float, bound: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_STOP, str(stop_seconds), str(bound)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline() == "up\n", process.communicate(timeout=10)
    return process


def _await_stopping(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "stopping (up to" in line, line
    return line


@pytest.mark.parametrize(
    ("first", "second", "status"),
    [
        (signal.SIGINT, signal.SIGINT, 130),
        (signal.SIGTERM, signal.SIGTERM, 143),
        (signal.SIGTERM, signal.SIGINT, 130),
        (signal.SIGHUP, signal.SIGTERM, 143),
    ],
    ids=["ctrl-c-twice", "term-twice", "term-then-ctrl-c", "hup-then-term"],
)
def test_a_second_signal_during_a_slow_stop_ends_the_process_at_once(
    first: signal.Signals, second: signal.Signals, status: int
) -> None:
    """Issue 34: the first signal's stop joins a thread for 60 s; the second must end the
    process (it used to raise KeyboardInterrupt inside the join, after which the interpreter
    waited for that thread, and a SIGTERM was not even caught twice)."""
    process = _start_slow_to_stop(stop_seconds=60, bound=120)
    try:
        process.send_signal(first)
        stopping = _await_stopping(process)
        assert f"{first.name}: stopping (up to 120 s" in stopping
        time.sleep(0.6)  # past SAME_REQUEST: a second request, not the first delivered twice
        process.send_signal(second)
        _, stderr = process.communicate(timeout=15)  # not the 60 s the stop would take
    finally:
        process.kill()
        process.wait()
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr
    assert (
        f"slow: second signal ({second.name}) while stopping: exiting with status {status}, "
        "abandoning the slow worker"
    ) in stderr


def test_the_same_signal_delivered_twice_at_once_is_one_request() -> None:
    """``timeout -s INT`` and ``kill -INT -PGID`` signal the process and its group: one stop."""
    process = _start_slow_to_stop(stop_seconds=1, bound=30)
    try:
        process.send_signal(signal.SIGINT)
        _await_stopping(process)  # the handler ran: a copy now is not coalesced by the kernel
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert "while stopping" not in stderr


def test_a_stop_that_outlives_its_bound_ends_the_process() -> None:
    process = _start_slow_to_stop(stop_seconds=60, bound=1)
    try:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1, stderr
    assert "slow: did not stop within 1 s: exiting with status 1, abandoning the slow worker" in (
        stderr
    )
