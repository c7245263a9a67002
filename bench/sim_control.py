"""The simulated API server child, driven the way the benches need it.

Every end-to-end bench runs its readers against one simulator child: it fills the population,
generates bursts while the watch streams are held (so a reader sees them as fast as the
simulator can write), and ends watches between readers (so only the reader under test watches).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from harness import BenchError
from run_control import wait_for

from apiserver_sim import SimulatorProcess

RESOURCE = "pods"


class Sim:
    """The simulator child plus the control calls this bench needs."""

    def __init__(self, process: SimulatorProcess) -> None:
        self.process = process
        self.url = process.url

    def populate(self, count: int, seed: int) -> None:
        if count > 0:
            self.process.populate(RESOURCE, count, seed=seed)

    def active_watches(self) -> int:
        return int(self.process.stats()["activeWatches"])

    def resource_version(self) -> str:
        return str(self.process.stats()["resourceVersion"])

    def wait_watching(self, alive: Callable[[], None] | None = None, timeout: float = 600) -> None:
        """Until one watch is open (the reader under test; no other watch is ever open)."""
        wait_for(lambda: self.active_watches() >= 1, "the reader's watch", timeout, alive=alive)

    def end_watches(self) -> None:
        """End every watch server-side and wait until the simulator has none open."""
        deadline = time.monotonic() + 30
        while self.active_watches() > 0:
            self.process.drop_watches()
            if time.monotonic() > deadline:
                raise BenchError("the simulator still has open watches")
            time.sleep(0.05)

    def burst(self, count: int, seed: int) -> None:
        """``count`` pod updates generated flat out while every watch stream is held, then
        released at once: readers see a burst as fast as the simulator can write it."""
        with self.burst_held(count, seed):
            pass

    @contextlib.contextmanager
    def burst_held(self, count: int, seed: int) -> Iterator[None]:
        """:meth:`burst`, its body run once the burst is generated and just before it is
        released: where a CPU span starts, so the seconds the simulator takes to generate it,
        with every reader idle, are no part of it."""
        self.process.stall_watches(3600)
        try:
            stats = self.process.churn(
                rate=0, seconds=3600, seed=seed, mix={"update": 1.0}, maxEvents=count
            )
            if stats["events"] != count:
                raise BenchError(f"the simulator generated {stats['events']} of {count} updates")
            yield
        finally:
            self.process.control("reset-faults")  # ends the stall
