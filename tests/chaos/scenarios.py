"""Redis faults under churn, against the whole pipeline as real processes (issue 7, point 1).

A scenario runs the API server simulator (in this process: it is the ground truth) with steady
churn, a private AOF-backed ``redis-server`` on a fixed port, a reflector and two processors as
child processes (the processors record every handler call with
:class:`tests.chaos.recorder.PatientRecorder`). Mid-churn it injects one Redis fault:

``restart``
    SIGKILL redis-server, start it again on the same port and directory ``downtime`` seconds
    later: the AOF (``appendfsync everysec``) brings the data back, possibly without the last
    writes before the kill.
``outage``
    the same with a long ``downtime``: Redis is unreachable (connections refused) meanwhile.
``hang``
    SIGSTOP redis-server for ``downtime`` seconds, then SIGCONT: connections are accepted by
    the kernel but nothing answers, the way a stuck or partitioned Redis looks.

The churn stops when the fault ends, so the ground truth stands still from then on and "time
to recover" has one meaning: fault end until the processors' stores (replayed from their
recorded calls) equal the simulator's objects again, with the reflector leading and synced and
every shard owned. A second short churn then proves the pipeline flows live again, and the
checks of :mod:`tests.support.bus` and :mod:`tests.processor_chaos.conftest` run on everything
that was published and handled. :func:`run` returns a :class:`Result`; its ``problems`` are
empty when every promise held.
"""

from __future__ import annotations

import re
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import redis

from informer_bus import local_redis
from informer_bus.apiserver_sim import Simulator, SimulatorSettings
from tests.processor_chaos.conftest import (
    Call,
    assignment_problems,
    deletion_problems,
    final_stores,
    handler_order_problems,
    ownership_problems,
    processor_settings,
    read_calls,
    store_differences,
    stream_problems,
)
from tests.reflector_ha.conftest import reflector_flags
from tests.support.bus import (
    Bus,
    ProcessorProcess,
    ReflectorProcess,
    duplicate_problems,
    order_problems,
    wait_until,
)

__all__ = ["FULL", "SHORT", "Result", "Scenario", "Timings", "run"]

SHARDS = 8
HANDLER = "tests.chaos.recorder:PatientRecorder"
PROCESSORS = ("p1", "p2")


@dataclass(frozen=True, slots=True)
class Timings:
    """Leader and shard leases, heartbeats and the reflector's longest backoff."""

    lease: float
    renew: float
    retry: float
    heartbeat: float
    member_ttl: float
    backoff_max: float


DEFAULT_TIMINGS = Timings(
    lease=15.0, renew=10.0, retry=2.0, heartbeat=1.0, member_ttl=5.0, backoff_max=30.0
)
"""The services' defaults: what a deployment runs with."""

FAST_TIMINGS = Timings(
    lease=2.0, renew=1.5, retry=0.2, heartbeat=0.1, member_ttl=0.6, backoff_max=3.0
)
"""Short leases, so a few seconds of downtime outlive every lease (a new leader and a takeover
of every shard after the fault), and a short backoff."""


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    fault: str
    """``restart``, ``outage`` or ``hang`` (module docstring)."""
    downtime: float
    timings: Timings = FAST_TIMINGS
    pods: int = 300
    churn_rate: float = 100.0
    warmup: float = 2.0
    """Seconds of churn before the fault."""
    aftermath: float = 1.5
    """Seconds of churn after the recovery."""
    recovery_timeout: float = 60.0
    seed: int = 7
    aof: bool = True
    """``False``: Redis without persistence, restarted empty (a documented limit)."""
    known_limit: bool = False
    """Broken promises are expected and documented (docs/reliability.md), not a failure."""


SHORT = (
    Scenario("redis restart (AOF, kill -9, 2 s down)", "restart", 2.0, DEFAULT_TIMINGS),
    Scenario("redis unreachable 7 s, fast leases", "outage", 7.0),
)
"""What ``make test`` runs (tests/chaos/test_redis_faults.py)."""

FULL = (
    Scenario("redis restart (AOF, kill -9, 3 s down)", "restart", 3.0, DEFAULT_TIMINGS, 1000),
    Scenario("redis restart (AOF, kill -9, 3 s down), fast leases", "restart", 3.0, pods=1000),
    Scenario("redis unreachable 30 s", "outage", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis hung (SIGSTOP) 30 s", "hang", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis restart WITHOUT persistence (known limit)", "restart", 3.0,
             DEFAULT_TIMINGS, 1000, recovery_timeout=30.0, aof=False, known_limit=True),
)  # fmt: skip
"""What ``make chaos`` runs (``python -m tests.chaos``)."""


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
    problems: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)


class _PinnedRedis(local_redis.RedisServer):
    """A redis-server that always comes back on the port it was given."""

    def __init__(self, workdir: Path, port: int, *, aof: bool) -> None:
        persistence = ("--appendonly", "yes", "--appendfsync", "everysec") if aof else ()
        super().__init__(workdir, *persistence)
        self._pinned = port

    def _pick_port(self) -> int:
        return self._pinned


class _Pipeline:
    """The running pieces of one scenario and how to read their state."""

    def __init__(self, stack: ExitStack, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        self.port = local_redis.free_port()
        self.redis = self._start_redis()
        stack.callback(self._stop_redis)
        self.client = redis.Redis.from_url(self.redis.url, socket_timeout=2)
        stack.callback(self.client.close)
        self.bus = Bus(self.client, "pods", shard_count=SHARDS)
        self.sim = stack.enter_context(
            Simulator(SimulatorSettings(bookmark_interval=0.1, too_large_wait=0.2))
        )
        self.reflector = ReflectorProcess(self._reflector_args(), workdir / "reflector.log")
        stack.callback(self.reflector.close)
        self.processors = [self._processor(member) for member in PROCESSORS]
        for process in self.processors:
            stack.callback(process.close)

    # --- components ----------------------------------------------------------------------

    def _start_redis(self) -> _PinnedRedis:
        server = _PinnedRedis(self.workdir / "redis", self.port, aof=self.scenario.aof)
        server.start()
        return server

    def _stop_redis(self) -> None:
        if self.redis.process is not None and self.redis.process.poll() is None:
            self.redis.process.send_signal(signal.SIGCONT)  # a hung Redis must stop too
        self.redis.stop()

    def _reflector_args(self) -> list[str]:
        t = self.scenario.timings
        return reflector_flags(
            self.redis.url, self.sim.url, shard_count=SHARDS, lease_duration=t.lease,
            renew_deadline=t.renew, retry_period=t.retry, backoff_max=t.backoff_max,
            identity="reflector",
        )  # fmt: skip

    def _processor(self, member: str) -> ProcessorProcess:
        t = self.scenario.timings
        settings = processor_settings(
            self.redis.url, member, handler=HANDLER, lease_duration=t.lease,
            renew_deadline=t.renew, retry_period=t.retry, heartbeat_interval=t.heartbeat,
            member_ttl=t.member_ttl,
        )  # fmt: skip
        args: list[str] = []
        for name, value in settings.items():
            args += ["--" + name.replace("_", "-"), value]
        env = {"IB_RECORD_FILE": str(self.workdir / f"{member}.jsonl"), "IB_MEMBER": member}
        return ProcessorProcess(args, self.workdir / f"{member}.log", env=env)

    def start(self) -> None:
        self.sim.populate("pods", self.scenario.pods, seed=self.scenario.seed)
        self.reflector.start()
        wait_until(self.bus.synced, 60, interval=0.1, message="the reflector to sync")
        for process in self.processors:
            process.start()
        # Balanced before the churn: the fault, not the second processor's arrival, is what
        # moves shards afterwards.
        wait_until(
            lambda: self.recovered() and not assignment_problems(self.bus, self.processors),
            60, interval=0.2, message=self.why_not_recovered,
        )  # fmt: skip

    # --- the fault -----------------------------------------------------------------------

    def break_redis(self) -> None:
        assert self.redis.process is not None
        if self.scenario.fault == "hang":
            self.redis.process.send_signal(signal.SIGSTOP)
        else:
            self.redis.process.kill()
            self.redis.process.wait(10)

    def mend_redis(self) -> None:
        assert self.redis.process is not None
        if self.scenario.fault == "hang":
            self.redis.process.send_signal(signal.SIGCONT)
        else:
            self.redis = self._start_redis()

    # --- state ---------------------------------------------------------------------------

    def calls(self) -> list[Call]:
        return read_calls(self.workdir)

    def stores(self) -> dict[str, str]:
        return final_stores(self.calls(), self.bus.shard_epochs())

    def _recovery_gaps(self) -> list[str]:
        """What still stands between now and "recovered" (empty: recovered)."""
        gaps: list[str] = []
        if not self.reflector.holds(self.bus.holder()):
            gaps.append(f"the reflector does not lead (holder {self.bus.holder()})")
        if not self.bus.synced():
            gaps.append("the shards are not synced")
        holders = self.bus.shard_holders()
        unowned = [s for s, h in holders.items() if not any(p.holds(h) for p in self.processors)]
        if unowned:
            gaps.append(f"shards {unowned} not owned by a processor")
        if not gaps:
            wrong = store_differences(self.stores(), self.sim.ground_truth("pods"))
            if wrong:
                gaps.append(f"stores differ from the ground truth: {wrong[:5]}")
        return gaps

    def recovered(self) -> bool:
        try:
            return not self._recovery_gaps()
        except redis.RedisError:
            return False

    def why_not_recovered(self) -> str:
        try:
            return "; ".join(self._recovery_gaps())
        except redis.RedisError as error:
            return f"Redis: {error!r}"

    def components(self) -> list[ProcessorProcess | ReflectorProcess]:
        return [self.reflector, *self.processors]


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
        pipeline = _Pipeline(stack, scenario, workdir)
        result = Result(scenario)
        try:
            _exercise(pipeline, result)
        finally:
            result.logs = {p.log_path.name: p.log() for p in pipeline.components()}
            result.logs["redis.log"] = _read(workdir / "redis" / "redis.log")
        return result


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _exercise(pipeline: _Pipeline, result: Result) -> None:
    scenario = pipeline.scenario
    pipeline.start()
    before_fault = pipeline.bus.positions()
    pids = {p.log_path.name: p.pid for p in pipeline.components()}
    calls_before = len(pipeline.calls())

    churn = pipeline.sim.start_churn(rate=scenario.churn_rate, seconds=3600, seed=scenario.seed)
    try:
        time.sleep(scenario.warmup)
        pipeline.break_redis()
        time.sleep(scenario.downtime)
        pipeline.mend_redis()
    finally:
        churn.stop()
    mended = time.monotonic()
    if churn.error is not None:
        result.problems.append(f"the churn failed: {churn.error!r}")

    try:
        wait_until(
            pipeline.recovered, scenario.recovery_timeout, interval=0.1,
            message=pipeline.why_not_recovered,
        )  # fmt: skip
        result.recovery = time.monotonic() - mended
    except AssertionError as error:
        result.problems.append(str(error))

    # Live again: a little more churn must flow through to the stores.
    if result.recovery is not None:
        pipeline.sim.start_churn(rate=scenario.churn_rate, seconds=scenario.aftermath,
                                 seed=scenario.seed + 1).wait(scenario.aftermath + 30)  # fmt: skip
        try:
            wait_until(pipeline.recovered, 30, interval=0.1, message=pipeline.why_not_recovered)
        except AssertionError as error:
            result.problems.append(f"after the recovery: {error}")

    _check(pipeline, result, before_fault, calls_before)
    # Still the same processes: nothing exited or was restarted.
    for process in pipeline.components():
        name = process.log_path.name
        if not process.running() or process.pid != pids[name]:
            assert process.process is not None
            result.problems.append(f"{name}: exited with status {process.process.poll()}")


def _check(
    pipeline: _Pipeline, result: Result, before_fault: dict[int, str], calls_before: int
) -> None:
    """The four promises, and the table's numbers."""
    bus = pipeline.bus
    entries = bus.all_entries()
    by_key = bus.by_key(entries)
    calls = pipeline.calls()
    truth = pipeline.sim.ground_truth("pods")
    published = bus.all_entries(after=before_fault)
    result.deltas = len(published)
    result.deletions = sum(1 for entry in published if entry.is_deletion)
    duplicates = duplicate_problems(by_key)
    result.duplicated = len(duplicates)
    result.redeliveries = sum(1 for c in calls[calls_before:] if c.kind == "add" and c.initial)

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
        "ownership": ownership_problems(calls, {}),
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
    rows = [header] + [
        (
            r.scenario.name,
            str(r.deltas),
            str(r.lost),
            str(r.duplicated),
            "never" if r.recovery is None else f"{r.recovery:.1f} s",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)
