"""The workloads the end-to-end bench drives through a group of processors: a watch burst
(with each component's CPU per update) and a steady stamped churn (with every update's latency
from the simulator's commit to the handler call).
"""

from __future__ import annotations

import concurrent.futures
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench_handlers import Update
from harness import BenchError
from pipeline_report import STEADY, Row, processors_label
from proc_stats import CpuSpan
from processor_group import Group
from run_control import timeout_for, wait_for
from sim_control import Sim

from apiserver_sim.load import COMMITTED_AT_ANNOTATION

CHILD_CHECK_INTERVAL = 0.2
"""Seconds between checks that the children still run while the steady churn does."""

COALESCING_QUIET_SECONDS = 1.0
"""How long a coalescing contender's handler must stay quiet, once the newest update reached
it, before its workload counts as done: ten of kopf's batch windows (0.1 s), each object's
worker waiting out its own."""


def coalesced_to(group: Group, last_step: int, what: str) -> None:
    """Until a handler that may coalesce an object's close updates (kopf) saw update
    ``last_step`` and then nothing more for :data:`COALESCING_QUIET_SECONDS`.

    The newest update is not the last call: another object's worker may still be waiting out
    its batch window. Stopping at the newest one left such a call to land after the next
    workload's :meth:`Group.mark`, and a burst of 200 counted 201 calls."""
    seen, quiet_since = -1, time.monotonic()

    def settled() -> bool:
        nonlocal seen, quiet_since
        count, now = group.updates_seen(), time.monotonic()
        if count != seen:
            seen, quiet_since = count, now
            return False
        return now - quiet_since >= COALESCING_QUIET_SECONDS and any(
            update.step == last_step for update in group.updates()
        )

    wait_for(settled, what, timeout_for(last_step + 1), alive=group.check_alive)


def burst(
    sim: Sim, group: Group, count: int, seed: int, others: Mapping[str, int]
) -> tuple[float, dict[str, float]]:
    """Seconds from the first burst update a handler saw to the last (for a handler that only
    counts, from the burst's release to its last call), and the CPU each component spent per
    update from the release on (µs: the processors' together and each processor's, as
    ``processor-<i>``, and each of ``others``: name -> process id)."""
    pids = {name: [pid] for name, pid in others.items()}
    pids["processors"] = [child.pid for child in group.children]
    pids |= {f"processor-{i}": [child.pid] for i, child in enumerate(group.children)}
    group.mark()
    with sim.burst_held(count, seed):
        span = CpuSpan(pids)
        released = time.monotonic()
    wait_for(
        lambda: group.updates_seen() >= count,
        "the burst through the pipeline",
        timeout_for(count),
        alive=group.check_alive,
    )
    cpu = span.per_event_us(count)
    per_event = {f"{name}_cpu_us_per_event": us for name, us in cpu.items()}
    return burst_seconds(group, count, released), per_event


def burst_seconds(group: Group, count: int, released: float) -> float:
    """How long a burst of ``count`` took the handlers, once they saw all of it; a handler
    that saw more than the burst fails the run."""
    if not group.records_updates:
        seen = group.updates_seen()
        if seen != count:
            raise BenchError(f"handlers counted {seen} updates for a burst of {count}")
        return max(1e-6, group.last_update() - released)
    times = [update.handled for update in group.updates()]
    if len(times) != count:
        raise BenchError(f"handlers saw {len(times)} updates for a burst of {count}")
    return max(1e-6, max(times) - min(times))


def latencies_ms(updates: Sequence[Update]) -> list[float]:
    """Handler time minus commit stamp of every update, in ms, sorted.

    Both readings are CLOCK_MONOTONIC and the stamp is taken before the update can reach any
    watcher, so a negative latency is a broken clock, not a fast pipeline: refuse it (and an
    update without a stamp) rather than print a figure that cannot be true."""
    unstamped = sum(1 for update in updates if update.committed_ns < 0)
    if unstamped:
        raise BenchError(
            f"{unstamped} of {len(updates)} updates reached the handler without the "
            f"simulator's {COMMITTED_AT_ANNOTATION} stamp: their latency is unknown"
        )
    latencies = sorted(update.handled_ns - update.committed_ns for update in updates)
    if latencies and latencies[0] < 0:
        negative = sum(1 for latency in latencies if latency < 0)
        raise BenchError(
            f"{negative} of {len(updates)} updates were handled before the simulator "
            f"committed them (by up to {-latencies[0] / 1e6:.3f} ms): the handler's clock and "
            "the simulator's are not the same CLOCK_MONOTONIC; no latency is reported"
        )
    return [latency / 1e6 for latency in latencies]


def _churn_stamped(
    sim: Sim, group: Group, rate: float, seconds: float, seed: int
) -> tuple[int, float]:
    """Run a stamped update-only churn to its end, checking the children meanwhile; how many
    updates the simulator made and at what rate (its own account)."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="steady-churn")
    try:
        churning = pool.submit(
            sim.process.churn, rate=rate, seconds=seconds, seed=seed, wait=True,
            mix={"update": 1.0}, stamp=True,
        )  # fmt: skip
        while True:
            try:
                stats = churning.result(timeout=CHILD_CHECK_INTERVAL)
                break
            except concurrent.futures.TimeoutError:
                group.check_alive()  # the churn ends on its own within ``seconds``
    finally:
        # Not waiting: if a child died (or Ctrl-C), the bench stops the simulator next, which
        # ends the request this thread is blocked in.
        pool.shutdown(wait=False)
    created = int(stats["events"])
    if int(stats["updates"]) != created:
        raise BenchError(f"the steady churn made {stats['updates']} updates of {created} events")
    return created, float(stats["rate"])


def steady(
    sim: Sim, group: Group, rate: float, seconds: float, seed: int, *, coalescing: bool = False
) -> tuple[Row, dict[str, Any]]:
    """Churn at ``rate`` updates/s for ``seconds``; the latency of every update, from the
    simulator's commit stamp to the handler call.

    ``coalescing``: the handlers may see only the newest of an object's close updates (kopf,
    for bench/compare.py): wait for the last update, and report how many were ``handled``."""
    if not group.records_updates:
        raise BenchError("a steady churn's latency needs a handler that records every update")
    group.mark()
    created, churn_rate = _churn_stamped(sim, group, rate, seconds, seed)
    what = "the steady churn's last updates"
    if coalescing:
        coalesced_to(group, created - 1, what)
    else:
        wait_for(lambda: group.updates_seen() >= created, what, timeout_for(created),
                 alive=group.check_alive)  # fmt: skip
    records = group.updates()
    if created == 0 or not records or (len(records) != created and not coalescing):
        raise BenchError(f"handlers saw {len(records)} updates of {created} churned")
    latencies = latencies_ms(records)
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    first = min(update.handled for update in records)
    last = max(update.handled for update in records)
    latency = {
        "p50_ms": round(cuts[49], 2),
        "p99_ms": round(cuts[98], 2),
        "max_ms": round(latencies[-1], 2),
        "min_ms": round(latencies[0], 3),
        "rate_asked": rate,
        # The simulator's own pace: below rate_asked when the machine was too busy for the
        # churn to keep to its schedule (the latencies do not depend on it).
        "rate_churned": round(churn_rate, 1),
    }
    if coalescing:
        latency["handled"] = len(records)
    row = Row(
        STEADY,
        processors_label(len(group.children)),
        created,
        max(1e-6, last - first),
        extra=latency,
    )
    return row, latency
