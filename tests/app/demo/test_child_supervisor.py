""":class:`informer_bus.child_process.ChildProcess`: the one supervisor of child processes
(demo, benches, simulator process, private Redis, tests) starts, waits, stops within its grace,
and leaves no process, pipe, thread or file behind."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from informer_bus.child_process import (
    ChildExitedError,
    ChildNotReadyError,
    ChildProcess,
    ReadyWaitCancelledError,
)

PY = sys.executable
IGNORES_TERM = [
    PY, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True);"
    " time.sleep(60)",
]  # fmt: skip
EXITS_ON_TERM = [PY, "-c", "import time; print('up', flush=True); time.sleep(60)"]


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_child_that_ignores_sigterm_is_killed_after_its_grace(tmp_path: Path) -> None:
    child = ChildProcess(IGNORES_TERM, log_path=tmp_path / "log").start()
    child.wait_ready(lambda: "up" in child.log_text() or None, 10)
    started = time.monotonic()
    status = child.stop(0.5)
    assert 0.4 < time.monotonic() - started < 5
    assert status == -signal.SIGKILL and child.killed
    assert not child.running


def test_a_clean_stop_is_not_a_kill(tmp_path: Path) -> None:
    child = ChildProcess(EXITS_ON_TERM, log_path=tmp_path / "log").start()
    child.wait_ready(lambda: "up" in child.log_text() or None, 10)
    assert child.stop(10) == -signal.SIGTERM
    assert not child.killed


def test_hurry_cuts_the_grace_short(tmp_path: Path) -> None:
    child = ChildProcess(IGNORES_TERM, log_path=tmp_path / "log").start()
    child.wait_ready(lambda: "up" in child.log_text() or None, 10)
    hurry = threading.Event()
    hurry.set()
    started = time.monotonic()
    child.stop(60, hurry=hurry)
    assert time.monotonic() - started < 5 and child.killed


def test_lines_reach_on_line_as_they_arrive_and_the_log(tmp_path: Path) -> None:
    lines: list[bytes] = []
    code = "import sys; print('one', flush=True); print('two', file=sys.stderr, flush=True)"
    child = ChildProcess([PY, "-c", code], log_path=tmp_path / "log", on_line=lines.append)
    child.start()
    assert child.wait(10) == 0
    child.close()
    assert sorted(lines) == [b"one\n", b"two\n"]
    assert sorted((tmp_path / "log").read_text().splitlines()) == ["one", "two"]


def test_a_restart_appends_and_log_text_is_the_current_run(tmp_path: Path) -> None:
    log = tmp_path / "log"
    child = ChildProcess([PY, "-c", "print('first')"], log_path=log).start()
    child.wait(10)
    child.args = [PY, "-c", "print('second')"]
    child.start().wait(10)
    assert child.log_text() == "second\n"
    assert log.read_text() == "first\nsecond\n"
    child.close()


def test_an_anonymous_log_is_kept_after_close() -> None:
    child = ChildProcess([PY, "-c", "print('said')"]).start()
    child.wait(10)
    child.close()
    assert child.log_text() == "said\n"


def test_wait_ready_says_why_it_gave_up(tmp_path: Path) -> None:
    crash = ChildProcess([PY, "-c", "raise SystemExit(3)"], log_path=tmp_path / "a").start()
    with pytest.raises(ChildExitedError) as exited:
        crash.wait_ready(lambda: None, 10)
    assert exited.value.returncode == 3
    crash.close()
    slow = ChildProcess(EXITS_ON_TERM, log_path=tmp_path / "b").start()
    try:
        with pytest.raises(ChildNotReadyError):
            slow.wait_ready(lambda: None, 0.2)
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(ReadyWaitCancelledError):
            slow.wait_ready(lambda: None, 10, cancel=cancel)
        assert slow.running, "giving up waiting does not stop the child"
    finally:
        slow.close()


def test_close_leaves_no_process_pipe_thread_or_file(tmp_path: Path) -> None:
    before, threads = _open_fds(), threading.active_count()
    child = ChildProcess(EXITS_ON_TERM, log_path=tmp_path / "log", on_line=lambda _: None)
    child.start()
    child.wait_ready(lambda: "up" in child.log_text() or None, 10)
    pid = child.pid
    child.close()
    assert child.poll() == -signal.SIGKILL
    assert not Path(f"/proc/{pid}").exists(), "reaped"
    assert _open_fds() <= before
    assert threading.active_count() == threads


def test_terminate_is_sent_once(tmp_path: Path) -> None:
    """A second SIGTERM means "hurry" to some programs: stop() after terminate() sends none."""
    counts = tmp_path / "terms"
    code = (
        "import signal, sys, time\n"
        f"def on_term(*_):\n    open({str(counts)!r}, 'a').write('t')\n"
        "signal.signal(signal.SIGTERM, on_term)\nprint('up', flush=True)\n"
        "time.sleep(1.5)\n"
    )
    child = ChildProcess([PY, "-c", code], log_path=tmp_path / "log").start()
    child.wait_ready(lambda: "up" in child.log_text() or None, 10)
    child.terminate()
    child.terminate()
    assert child.stop(10) == 0
    assert counts.read_text() == "t"
