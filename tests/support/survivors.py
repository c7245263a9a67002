"""Finding the processes a run left behind, by a marker in their environment.

A test gives the program it starts a random marker in one environment variable; every process
that program starts inherits it, so whatever outlives the run can be found by scanning
``/proc``, however deep it was started. Not redis-server: it writes its process title over the
memory ``/proc/<pid>/environ`` shows, so tests that start one follow its pid as well.
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["assert_no_survivors", "survivors"]


def survivors(variable: str, marker: str) -> list[str]:
    """Command lines of the live processes whose environment has ``variable=marker``."""
    found = []
    needle = f"{variable}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone meanwhile, a zombie, or not ours to read
            continue
    return found


def assert_no_survivors(variable: str, marker: str, *, grace: float, what: str) -> None:
    """Every process carrying the marker has exited within ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while (left := survivors(variable, marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes outlived {what}: {left}"
