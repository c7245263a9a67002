""":mod:`informer_bus.child_process`: a tied child dies with its parent, however the parent
dies, and an untied one (the control) does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from informer_bus.child_process import TIES_CHILDREN, parent_death_preexec, start_tied
from tests.app.demo.support import alive, wait_until_gone

pytestmark = pytest.mark.skipif(not TIES_CHILDREN, reason="parent-death signals are Linux's")

# A parent that starts one `sleep` (tied or not), prints its pid, and waits to be killed.
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from informer_bus.child_process import start_tied
    args = ["sleep", "300"]
    child = start_tied(args) if sys.argv[1] == "tied" else subprocess.Popen(args)
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def start_parent(mode: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), line
    return parent, int(line)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_tied_child_dies_with_its_parent(how: signal.Signals) -> None:
    parent, child = start_parent("tied")
    try:
        assert alive(child)
        parent.send_signal(how)
        parent.wait(10)
        wait_until_gone([child], 10)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        assert parent.stdout is not None
        parent.stdout.close()


def test_an_untied_child_outlives_its_parent() -> None:
    """The control: without the tie the same child is orphaned (what the demo did)."""
    parent, child = start_parent("untied")
    try:
        parent.kill()
        parent.wait(10)
        with pytest.raises(AssertionError, match="outlived"):
            wait_until_gone([child], 1)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
        assert parent.stdout is not None
        parent.stdout.close()


def test_a_child_whose_parent_died_before_the_tie_exits_instead_of_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the ``getppid`` check closes: a parent gone between fork and ``prctl`` is
    simulated by a tie built for another parent pid. The child must exit before ``exec``."""
    marker = tmp_path / "ran"
    real_pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: real_pid + 1_000_000)
    tie = parent_death_preexec()
    monkeypatch.undo()
    child = subprocess.Popen(["touch", str(marker)], preexec_fn=tie)  # noqa: PLW1509
    assert child.wait(10) == 128 + signal.SIGKILL
    assert not marker.exists()


def test_the_tie_is_to_the_starting_thread(tmp_path: Path) -> None:
    """The documented caveat, checked: a child started by a thread that then ends is killed,
    which is why the demo starts every child from its main thread."""
    started: list[subprocess.Popen[bytes]] = []
    thread = threading.Thread(target=lambda: started.append(start_tied(["sleep", "300"])))
    thread.start()
    thread.join()
    child = started[0]
    assert child.wait(10) == -signal.SIGKILL
