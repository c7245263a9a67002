"""Running the demo as a real child process and finding what it left running."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from informer_bus.child_process import ChildProcess
from tests.support.paths import ROOT
from tests.support.survivors import assert_no_survivors
from tests.support.survivors import survivors as find_survivors

DEMO = [str(Path(sys.executable).with_name("informer-bus")), "demo"]
PROGRAM = "informer-bus demo"
MARKER_ENV = "DEMO_TEST_MARKER"
"""Every process a demo started inherits this variable: /proc finds them all."""


def pids(output: str) -> dict[str, int]:
    """The ``pids: name=pid ...`` line the demo prints once everything started."""
    match = re.search(r"^pids: (.*?) \(", output, re.MULTILINE)
    assert match, output
    return {name: int(pid) for name, pid in (pair.split("=") for pair in match.group(1).split())}


def alive(pid: int) -> bool:
    """Whether ``pid`` still exists as a process that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until_gone(pids: Iterable[int], timeout: float) -> None:
    """Every process of ``pids`` exits (or is a zombie) within ``timeout`` seconds."""
    wanted = list(pids)
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in wanted if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"processes outlived their parent: {left}"


def survivors(marker: str) -> list[str]:
    """The live processes a demo run left behind (see :mod:`tests.support.survivors`)."""
    return find_survivors(MARKER_ENV, marker)


def assert_nothing_left(marker: str, timeout: float = 15.0) -> None:
    """No process carrying ``marker`` survives ``timeout`` seconds."""
    assert_no_survivors(MARKER_ENV, marker, grace=timeout, what="the demo")


def demo_env(marker: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tests' environment without INFORMER_BUS_*/IB_* settings, plus ``marker``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFORMER_BUS_", "IB_"))}
    return {**clean, "REDIS_URL": "", MARKER_ENV: marker, **(extra or {})}


def start_demo(out: Path, marker: str, *args: str) -> ChildProcess:
    """The demo as a child, its output (stdout and stderr) in ``out``."""
    return ChildProcess(
        [*DEMO, *args], name="demo", log_path=out, cwd=ROOT, env=demo_env(marker)
    ).start()  # fmt: skip


def wait_for_output(out: Path, process: ChildProcess, text: str, timeout: float) -> str:
    """The demo's output once it contains ``text`` (fails early if the demo exits)."""
    deadline = time.monotonic() + timeout
    while True:
        output = out.read_text(errors="replace")
        if text in output:
            return output
        assert process.poll() is None, f"the demo exited ({process.poll()}):\n{output}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{output}"
        time.sleep(0.1)


def stop(process: ChildProcess) -> None:
    """Whatever a test did, the demo does not outlive it."""
    process.close()
