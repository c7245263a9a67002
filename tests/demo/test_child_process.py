""":mod:`informer_bus.child_process`: a tied child dies with its parent, however the parent
dies, and an untied one (the control) does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from informer_bus.child_process import TIES_CHILDREN
from tests.demo.support import alive, wait_until_gone

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
