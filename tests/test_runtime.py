"""common/runtime.py: what the services tune in their own process."""

from __future__ import annotations

import os
import platform

import pytest

from common.runtime import release_free_heap


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's; elsewhere release_free_heap does nothing by design",
)
def test_release_free_heap_returns_holes_between_live_blocks_to_the_system() -> None:
    # 64 KiB blocks stay below glibc's mmap threshold, so they live in the heap; a small live
    # block after each one pins the heap top, so free() alone cannot shrink it.
    big, pins = [], []
    for _ in range(1500):
        big.append(bytearray(b"x" * 65536))
        pins.append(bytes(bytearray(b"p" * 600)))
    del big
    before = _rss_bytes()
    release_free_heap()
    after = _rss_bytes()
    assert before - after > 50 * 1024 * 1024, (before, after)
    assert len(pins) == 1500
