"""Faults under churn, against the whole pipeline as real processes (issue 7, point 1).

A scenario runs the API server simulator (in this process: it is the ground truth) with steady
churn, a private Redis (:mod:`bench.chaos.topologies`: an AOF-backed ``redis-server`` on a
fixed port, or a cluster with replicas), one or two reflectors and two
processors as child processes (the processors record every handler call with
:class:`bench.chaos.recorder.OutageRecorder`). Mid-churn it injects one fault (``fault``):

Redis
    ``restart``: SIGKILL redis-server, start it again on the same port and directory
    ``downtime`` seconds later: the AOF (``appendfsync everysec``) brings the data back,
    possibly without the last writes before the kill. ``outage``: the same with a long
    ``downtime`` (connections refused meanwhile). ``hang``: SIGSTOP redis-server for
    ``downtime`` seconds, then SIGCONT: connections are accepted but nothing answers.
Reflectors (two of them: a leader and a standby)
    ``reflector-kill-list``: kill -9 the leader in the middle of its initial list (a slow,
    paginated list of many pods). ``reflector-kill-burst``: kill -9 the leader during the churn.
    ``reflector-pause``: SIGSTOP the leader for ``downtime`` seconds, past its lease, then
    SIGCONT: the standby leads by then, and not one write of the old leader may be accepted.
Redis failover (topology ``cluster-replicas``: 3 primaries with one replica each, ``make ha``)
    ``primary-kill``: kill -9 the primary serving shard 0; its replica must be promoted.
    ``primary-pause``: SIGSTOP the reflector leader, then that primary, until the replica was
    promoted and the standby leads; SIGCONT both. The old primary accepts writes until it learns
    it was replaced (split brain); what it accepted must be harmless (discarded by its resync)
    and the old leader must step down.
Processors
    ``processor-kills``: kill -9 a processor three times, ``downtime`` seconds apart, starting a
    replacement (a new member) each time.
API server (the simulator's fault knobs)
    ``api-drop``: drop every watch every half second for ``downtime`` seconds.
    ``api-stall``: watches stay open and silent for ``downtime`` seconds; the reflector's
    inactivity watchdog (shortened for the run) must fire. ``api-compact``: the API server is
    down for ``downtime`` seconds (connections refused); meanwhile pods are deleted without
    watch events and the history is compacted, so the reflector comes back to a 410, relists,
    and the deletions it never saw reach ``on_delete`` as tombstones
    (``DeletedFinalStateUnknown``). ``api-errors``: a burst of 429 (Retry-After) answers, then
    one of 500s. ``api-restart``: the API server restarts (``Simulator.restart``: watches and
    connections cut, connections refused for ``downtime`` seconds; the objects and the
    resourceVersion counter survive, as they do in etcd).

The churn stops when the fault ends, so the ground truth stands still from then on and "time
to recover" has one meaning: fault end until the processors' stores (replayed from their
recorded calls) equal the simulator's objects again, with a reflector leading and synced and
every shard owned by a live processor. A second short churn then proves the pipeline flows live
again, and the checks of :mod:`tests.support.bus` and :mod:`tests.support.processor_ha` run
on everything that was published and handled. Each fault also checks that it really bit (the
watchdog fired, tombstones were delivered, the paused leader's writes were refused, ...).
:func:`run` returns a :class:`Result`; its ``problems`` are empty when every promise held.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.catalogue import Scenario
from bench.chaos.faults import FAULTS
from bench.chaos.processes import REDIS_ERRORS, ChaosPipeline
from bench.markdown_table import markdown_rows
from tests.support.bus import (
    duplicate_problems,
    order_problems,
)
from tests.support.processor_ha import (
    Call,
    deletion_problems,
    final_stores,
    handler_order_problems,
    ownership_problems,
    store_differences,
    stream_problems,
)
from tests.support.waiting import wait_until

__all__ = ["Result", "run", "table"]


@dataclass(slots=True)
class Result:
    scenario: Scenario
    deltas: int = 0
    """Entries published on the shard streams from the start of the churn to the end."""
    lost: int = 0
    """Objects whose final state did not reach the stores or the streams, plus deletions that
    never reached ``on_delete``."""
    deletions: int = 0
    """Deletions among those deltas."""
    duplicated: int = 0
    """Deltas published twice for one object at one resourceVersion (an unchanged object)."""
    recovery: float | None = None
    """Seconds from the fault's end until the stores equal the ground truth (``None``: never)."""
    redeliveries: int = 0
    """Initial-list adds after the fault (takeovers re-deliver each shard: at-least-once)."""
    retries_logged: dict[str, int] = field(default_factory=dict)
    """Per component, log lines about failed Redis calls: retries with backoff, not a spin."""
    notes: list[str] = field(default_factory=list)
    """What the fault did (the watchdog fired N times, N tombstones delivered, ...)."""
    problems: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)


_REDIS_FAILURE = re.compile(r"Redis|redis|ConnectionError|TimeoutError|Connection refused")


def unannounced_deletions(calls: Sequence[Call], truth: Mapping[str, str]) -> list[str]:
    """Objects gone from the simulator whose last handler call (by any processor, in time
    order) was not ``on_delete``: a handler still believes they exist."""
    last: dict[str, Call] = {}
    for call in sorted(calls, key=lambda c: c.t):
        last[call.key] = call
    return [
        f"{key}: deleted in the simulator, last handler call {call}"
        for key, call in sorted(last.items())
        if key not in truth and call.kind != "delete"
    ]


def _retry_lines(log: str) -> int:
    return sum(1 for line in log.splitlines() if _REDIS_FAILURE.search(line))


def run(scenario: Scenario, workdir: Path | None = None) -> Result:
    """Run one scenario end to end; every process it started is stopped when it returns."""
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="ib-chaos-"))
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        pipeline = ChaosPipeline(stack, scenario, workdir)
        result = Result(scenario)
        try:
            _exercise(pipeline, result)
        finally:
            result.logs = {p.log_path.name: p.log() for p in pipeline.components()}
            result.logs.update(pipeline.redis.logs())
        return result


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _exercise(pipeline: ChaosPipeline, result: Result) -> None:
    scenario = pipeline.scenario
    fault = FAULTS[scenario.fault](pipeline)
    pipeline.start(settle=fault.settle_first)
    before_fault = pipeline.bus.positions()
    pids = {p.log_path.name: p.pid for p in pipeline.components()}
    initial_adds_before = _initial_adds(pipeline.calls())

    churn = pipeline.sim.start_churn(rate=scenario.churn_rate, seconds=3600, seed=scenario.seed)
    try:
        fault.wait_for_the_moment()
        fault.apply()
    finally:
        churn.stop()
        pipeline.sim.slow_responses(0)
    mended = time.monotonic()
    if churn.error is not None:
        result.problems.append(f"the churn failed: {churn.error!r}")

    try:
        wait_until(
            pipeline.recovered, scenario.recovery_timeout, interval=0.1,
            what=pipeline.why_not_recovered,
        )  # fmt: skip
        result.recovery = time.monotonic() - mended
    except AssertionError as error:
        result.problems.append(str(error))

    # Live again: a little more churn must flow through to the stores.
    if result.recovery is not None:
        pipeline.sim.start_churn(rate=scenario.churn_rate, seconds=scenario.aftermath,
                                 seed=scenario.seed + 1).wait(scenario.aftermath + 30)  # fmt: skip
        try:
            wait_until(pipeline.recovered, 30, interval=0.1, what=pipeline.why_not_recovered)
        except AssertionError as error:
            result.problems.append(f"after the recovery: {error}")

    for attempt in range(3):  # the checks read Redis before they record anything
        try:
            _check(pipeline, result, before_fault, initial_adds_before)
            break
        except REDIS_ERRORS:
            if attempt == 2:
                raise
            pipeline.reconnect()  # the checks' client, not a service, lost its way
    result.problems += [f"fault: {problem}" for problem in fault.verify()]
    result.notes += fault.notes
    # Still the same processes: nothing exited or was restarted but what the fault killed.
    for process in pipeline.components():
        name = process.log_path.name
        if name in pipeline.killed:
            continue
        if not process.running() or process.pid != pids.get(name, process.pid):
            assert process.process is not None
            result.problems.append(f"{name}: exited with status {process.process.poll()}")


def _initial_adds(calls: Sequence[Call]) -> int:
    return sum(1 for call in calls if call.kind == "add" and call.initial)


def _check(
    pipeline: ChaosPipeline, result: Result, before_fault: dict[int, str], initial_adds_before: int
) -> None:
    """The four promises, and the table's numbers."""
    bus = pipeline.bus
    entries = bus.all_entries()
    by_key = bus.by_key(entries)
    calls = pipeline.calls()
    truth = pipeline.sim.ground_truth("pods")
    published = bus.all_entries(after=before_fault)
    killed = {
        str(p.member_id): pipeline.killed[p.log_path.name]
        for p in pipeline.processors
        if p.log_path.name in pipeline.killed
    }
    result.deltas = len(published)
    result.deletions = sum(1 for entry in published if entry.is_deletion)
    duplicates = duplicate_problems(by_key)
    result.duplicated = len(duplicates)
    # (Counted, not sliced: the calls are one file per processor, each growing on its own.)
    result.redeliveries = _initial_adds(calls) - initial_adds_before

    # (1) the final stores equal the ground truth, and so does what the streams say last.
    wrong_stores = store_differences(final_stores(calls, bus.shard_epochs()), truth)
    wrong_streams = [
        f"{key}: last published {entries_[-1].type}@{entries_[-1].rv}, simulator {truth.get(key)}"
        for key, entries_ in by_key.items()
        if (truth.get(key) is None) != entries_[-1].is_deletion
        or (key in truth and entries_[-1].rv != truth[key])
    ] + [f"{key}: live but never published" for key in truth.keys() - by_key.keys()]
    # (2) every deletion reaches on_delete: each on the streams, and each object the handlers
    # were told about that the simulator no longer has (whatever the streams say).
    deletions = deletion_problems(calls, entries) + unannounced_deletions(calls, truth)
    result.lost = len(wrong_stores) + len(wrong_streams) + len(deletions)
    # (3) nothing published for an unchanged object; (4) per-object order, on the streams and
    # in the handler calls (which also follow the streams delta for delta per owner).
    problems = {
        "stores": wrong_stores,
        "streams": wrong_streams,
        "deletions": deletions,
        "duplicates": duplicates,
        "stream order": order_problems(by_key),
        "handler order": handler_order_problems(calls),
        "handler vs stream": stream_problems(calls, entries),
        "ownership": ownership_problems(
            calls, killed, renew_deadline=pipeline.scenario.timings.renew
        ),
    }
    for what, found in problems.items():
        result.problems += [f"{what}: {problem}" for problem in found[:10]]

    for process in pipeline.components():
        log = process.log()
        result.retries_logged[process.log_path.name] = _retry_lines(log)
        if "Traceback" in log:
            result.problems.append(f"{process.log_path.name}: logged a traceback")


def table(results: Sequence[Result]) -> str:
    """The issue's table: scenario, deltas, lost, duplicated, time to recover."""
    header = ("scenario", "deltas", "lost", "duplicated", "time to recover")
    rows = [
        (
            r.scenario.name,
            str(r.deltas),
            str(r.lost),
            str(r.duplicated),
            "never" if r.recovery is None else f"{r.recovery:.1f} s",
        )
        for r in results
    ]
    return "\n".join(markdown_rows(header, rows))
