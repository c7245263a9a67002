"""What a benchmark reads about a (Linux) process from ``/proc``: its CPU time and its memory.

Peak RSS (``VmHWM``) is a contender's own only because each runs in its own process.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from harness import BenchError


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU a process used so far (Linux ``/proc``): CPU per event is what stays
    comparable between runs on a shared machine, where wall-clock rates do not."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kb(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {field_name} in /proc/{pid}/status")


def peak_rss_mb(pids: Sequence[int]) -> float:
    """The largest peak RSS (``VmHWM``) of ``pids``, in MiB."""
    return round(max(memory_kb(pid, "VmHWM") for pid in pids) / 1024, 1)
