"""Running a benchmark script as a child, and finding every process it left behind.

Each run gets a random marker in its environment, which every child it starts inherits, so the
processes a run leaves behind can be found by scanning ``/proc``: the benches promise that
Ctrl-C and a normal end stop everything they started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.survivors import assert_no_survivors as assert_no_marked_survivors
from tests.support.survivors import survivors as find_survivors

MARKER_ENV = "BENCH_SMOKE_MARKER"


def start_bench(script: Path, marker: str, *args: str) -> subprocess.Popen[str]:
    """``script`` with ``marker`` in its environment, stdout and stderr piped."""
    env = {**os.environ, MARKER_ENV: marker}
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Its output once it exits; past ``timeout`` it gets Ctrl-C (then SIGKILL) and the test
    fails with the end of its stderr."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)  # a bench stops its children on Ctrl-C
        try:
            _, err = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        pytest.fail(f"the bench did not finish in {timeout} s:\n{err[-3000:]}")


def run_bench(script: Path, *args: str, timeout: float) -> str:
    """Run ``script`` to its end: it exits 0 and leaves nothing running; returns its stdout."""
    marker = uuid.uuid4().hex
    process = start_bench(script, marker, *args)
    out, err = finish(process, timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    assert_no_survivors(marker)
    return out


def survivors(marker: str) -> list[str]:
    """The processes still running with ``marker`` (see :mod:`tests.support.survivors`)."""
    return find_survivors(MARKER_ENV, marker)


def assert_no_survivors(marker: str, grace: float = 10.0) -> None:
    """Every process of the run has exited (within ``grace`` seconds)."""
    assert_no_marked_survivors(MARKER_ENV, marker, grace=grace, what="the bench")


def assert_usage_errors(script: Path, *flag_sets: list[str]) -> None:
    """Each set of flags ends ``script`` with exit status 2 and no traceback."""
    for flags in flag_sets:
        result = subprocess.run(
            [sys.executable, str(script), *flags], capture_output=True, text=True, check=False
        )
        assert result.returncode == 2, (flags, result.stderr)
        assert "Traceback" not in result.stderr
