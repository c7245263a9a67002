"""Children the tests start see SIGINT and SIGHUP as a terminal delivers them, however the
suite itself was launched.

A signal a process ignores stays ignored across ``exec``, and the services keep an inherited
ignore on purpose (a ``nohup``'d service outlives its terminal). So ``nohup make test``, or
``make test &`` from a non-interactive shell (which ignores SIGINT for background jobs), would
hand every child an ignored SIGINT/SIGHUP, and the tests that press Ctrl-C or hang up on a
child would wait for an exit that correctly never comes.

A caught signal is reset to the default on ``exec``, an ignored one is not: replacing the
inherited ignore with a handler that does nothing keeps the test run itself as deaf to the
signal as its launcher asked, while every child starts with the default. Tests that want an
ignored signal in a child (tests/common/test_service_runner.py) still set it in that child.

The pytest-xdist workers are such children, yet they must stay as deaf as the run (a
``nohup``'d suite must survive its terminal's hangup): the first pytest process names what it
was launched deaf to in ``LAUNCHED_DEAF_TO``, and a pytest process that finds it there keeps
those signals caught by a handler that does nothing, like its parent. The services under
test are not: a hangup sent to the whole process group (a closing terminal's) still stops
them, so a suite that must outlive its terminal runs under ``setsid`` as well.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGHUP)
LAUNCHED_DEAF_TO = "TESTS_LAUNCHED_DEAF_TO"


def _still_ignored(signum: int, frame: FrameType | None) -> None:
    """The launcher's ignore, kept for this process only."""


def give_children_the_default_stop_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal only works there; a worker importing elsewhere keeps its state
    deaf_by_launch = set(os.environ.get(LAUNCHED_DEAF_TO, "").split(","))
    deaf = [
        signum
        for signum in STOP_SIGNALS
        if signal.getsignal(signum) == signal.SIG_IGN or signum.name in deaf_by_launch
    ]
    for signum in deaf:
        signal.signal(signum, _still_ignored)
    if deaf:
        os.environ[LAUNCHED_DEAF_TO] = ",".join(signum.name for signum in deaf)
