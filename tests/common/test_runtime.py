"""common/runtime.py: what the services tune in their own process."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

# Run in a fresh interpreter: how much a trim can return depends on the heap's history (what
# earlier tests left in it) and on the arena of the calling thread, neither of which a test
# inside the runner controls.
_TRIM_PROBE = """
import os

from common.runtime import release_free_heap

def rss():
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no VmRSS in /proc/self/status")

# 64 KiB blocks stay below glibc's mmap threshold, so they live in the heap; a small live
# block after each one pins the heap top, so free() alone cannot shrink it.
big, pins = [], []
for _ in range(1500):
    big.append(bytearray(b"x" * 65536))
    pins.append(bytes(bytearray(b"p" * 600)))
del big
before = rss()
release_free_heap()
print(before, rss(), len(pins))
"""


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's; elsewhere release_free_heap does nothing by design",
)
def test_release_free_heap_returns_holes_between_live_blocks_to_the_system() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", _TRIM_PROBE], capture_output=True, text=True, check=True, cwd=ROOT
    )
    before, after, pins = map(int, probe.stdout.split())
    assert before - after > 50 * 1024 * 1024, (before, after)
    assert pins == 1500
