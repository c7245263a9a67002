"""Where a burst's CPU goes, per process: py-spy for the Python ones, ``INFO commandstats`` for
redis-server (issue 16, "Profile each process (py-spy) and cut").

A sampled profile says which functions a process spends its time in; CPU per event says how
much time there is. The benches report the second always and, when asked (``--py-spy DIR``),
the first for the same span, so a cut can be aimed and then checked in the same run.
"""

from __future__ import annotations

import collections
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis

from informer_bus.child_process import ChildProcess

OWN_CODE = ("reflector_svc/", "processor_svc/", "common/")
"""Path fragments of informer-bus' own modules: their inclusive time is listed apart."""


class PySpy:
    """``py-spy record`` attached to named processes over one span, one raw (collapsed stack)
    profile per process in ``out_dir``; does nothing when ``out_dir`` is None."""

    def __init__(self, out_dir: Path | None) -> None:
        self.out_dir = out_dir
        self.recorders: list[ChildProcess] = []
        self.files: dict[str, Path] = {}

    def start(self, pids: Mapping[str, int], span: str) -> None:
        if self.out_dir is None:
            return
        binary = Path(sys.executable).with_name("py-spy")
        for name, pid in pids.items():
            out = self.out_dir / f"{span}-{name}.txt"
            self.files[f"{span}, {name}"] = out
            # --nonblocking: the profiled process is never paused, so its CPU per event (read
            # over the same span) stays its own; --threads keeps shard threads apart.
            command = [str(binary), "record", "--pid", str(pid), "--format", "raw", "--rate",
                       "250", "--threads", "--nonblocking", "--output", str(out)]  # fmt: skip
            # SIGINT: py-spy writes its profile and exits.
            self.recorders.append(ChildProcess(command, stop_signal=signal.SIGINT).start())

    def stop(self) -> None:
        for recorder in self.recorders:
            recorder.stop(30)
        self.recorders = []

    def print_summaries(self, top: int = 15) -> None:
        for title, path in self.files.items():
            if path.exists():
                print_profile(title, path, top)


def print_profile(title: str, path: Path, top: int = 15) -> None:
    """Self time per function and the inclusive time of informer-bus' own functions, from
    py-spy's raw output, on stderr (the table on stdout stays the report)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        # The first frame is the thread; line numbers would split one function into many.
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")[1:]]
        if not frames:
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            if any(part in frame for part in OWN_CODE):
                inclusive[frame] += int(count)
    out = sys.stderr
    print(f"\npy-spy, {title}: {total} samples ({path}); C code (orjson, hiredis, the cyclic GC, "
          "socket calls) counts as the Python function that called it", file=out)  # fmt: skip
    print("  self time:", file=out)
    for frame, samples in own.most_common(top):
        print(f"  {100 * samples / max(total, 1):5.1f}%  {frame}", file=out)
    print("  inclusive, informer-bus functions:", file=out)
    for frame, samples in inclusive.most_common(top):
        print(f"  {100 * samples / max(total, 1):5.1f}%  {frame}", file=out)


class RedisCommandCosts:
    """What redis-server spent per event on each command over a span, from ``INFO
    commandstats`` read before and after (calls and µs are redis-server's own accounting:
    the time it spent executing, without reading requests or writing replies)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.before = self._read()

    def _read(self) -> dict[str, tuple[int, int]]:
        client = redis.Redis.from_url(self.url, socket_timeout=60)
        try:
            stats: dict[str, Any] = client.info("commandstats")
        finally:
            client.close()
        return {
            name.removeprefix("cmdstat_"): (int(value["calls"]), int(value["usec"]))
            for name, value in stats.items()
        }

    def per_event(self, events: int) -> dict[str, dict[str, float]]:
        """Per command: calls and µs per event over the span, busiest first."""
        after = self._read()
        costs = {}
        for name, (calls, usec) in after.items():
            calls_before, usec_before = self.before.get(name, (0, 0))
            if calls > calls_before:
                costs[name] = {
                    "calls_per_event": round((calls - calls_before) / events, 3),
                    "us_per_event": round((usec - usec_before) / events, 2),
                }
        return dict(sorted(costs.items(), key=lambda item: -item[1]["us_per_event"]))


def print_command_costs(title: str, costs: Mapping[str, Mapping[str, float]]) -> None:
    print(f"\nredis-server, {title}: per event, by command (INFO commandstats)", file=sys.stderr)
    for name, cost in list(costs.items())[:12]:
        print(f"  {name:24} {cost['calls_per_event']:8.3f} calls {cost['us_per_event']:8.2f} µs",
              file=sys.stderr)  # fmt: skip
