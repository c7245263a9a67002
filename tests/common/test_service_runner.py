"""common.service_runner as a real service process sees it: which signals stop it cleanly.

The service here is the smallest one the runner can run, one that starts and stops at once, so
what is tested is the runner alone (the reflector's and the processor's SIGTERM/SIGHUP behaviour
is tested in tests/reflector/ha and tests/processor/ha).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.support.cli import ROOT

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
