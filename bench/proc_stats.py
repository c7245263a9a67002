"""What a benchmark reads about a (Linux) process from ``/proc``: its CPU time, its memory and
its threads.

Peak RSS (``VmHWM``) is a contender's own only because each runs in its own process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
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


def thread_ids(pid: int) -> frozenset[int]:
    """The process' threads now (``/proc/<pid>/task``: one entry per thread, the main one
    included); raises ``OSError`` once it has exited."""
    return frozenset(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))


def peak_rss_mb(pids: Sequence[int]) -> float:
    """The largest peak RSS (``VmHWM``) of ``pids``, in MiB."""
    return round(max(memory_kb(pid, "VmHWM") for pid in pids) / 1024, 1)


class CpuSpan:
    """The CPU named groups of processes spend over one workload's span, per event.

    The yardstick of issue 16: wall-clock rates on a shared 2-core machine move 2-3x between
    runs, the CPU a process spends on an event does not. Started at the span's first moment
    and read at its last, so start-up, imports and idle waiting outside it never count.
    """

    def __init__(self, pids: Mapping[str, Sequence[int]]) -> None:
        self.pids = {name: list(ids) for name, ids in pids.items()}
        self.before = self._read()

    def _read(self) -> dict[str, float]:
        """Each process read once: a group (``processors``) and its members (``processor-0``)
        read at different instants could differ by a clock tick, and their sum would not add up."""
        seconds = {pid: process_cpu_seconds(pid) for ids in self.pids.values() for pid in ids}
        return {name: sum(seconds[pid] for pid in ids) for name, ids in self.pids.items()}

    def per_event_us(self, events: int) -> dict[str, float]:
        """µs of CPU per event of each group since the span began (read now)."""
        after = self._read()
        return {
            name: round((after[name] - self.before[name]) / max(events, 1) * 1e6, 1)
            for name in self.pids
        }
