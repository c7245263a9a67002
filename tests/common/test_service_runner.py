"""common.service_runner as a real service process sees it: which signals stop it cleanly.

The simulator's command is the smallest service on the shared runner (the reflector's and the
processor's SIGTERM/SIGHUP behaviour is tested in tests/reflector/ha and tests/processor/ha).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from informer_bus.apiserver_sim.command import READY_PREFIX


def _ignore_hangups() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before it execs


@pytest.fixture
def start_service() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*, nohup: bool = False) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "informer_bus.cli", "apiserver-sim", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_ignore_hangups if nohup else None,  # noqa: PLW1509 - no threads here
        )  # fmt: skip
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(READY_PREFIX), line + process.stderr.read()
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
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr


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
