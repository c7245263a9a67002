"""Faults under churn, against the whole pipeline as real processes (issue 7, point 1).

A scenario runs the API server simulator (in this process: it is the ground truth) with steady
churn, a private AOF-backed ``redis-server`` on a fixed port, one or two reflectors and two
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
again, and the checks of :mod:`tests.support.bus` and :mod:`tests.processor.ha.conftest` run
on everything that was published and handled. Each fault also checks that it really bit (the
watchdog fired, tombstones were delivered, the paused leader's writes were refused, ...).
:func:`run` returns a :class:`Result`; its ``problems`` are empty when every promise held.
"""

from __future__ import annotations

import re
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import redis
from prometheus_client.parser import text_string_to_metric_families

from informer_bus import local_redis
from informer_bus.apiserver_sim import Simulator, SimulatorSettings
from informer_bus.apiserver_sim.status import ApiError
from tests.processor.ha.conftest import (
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
from tests.reflector.ha.conftest import reflector_flags
from tests.support.bus import (
    Bus,
    ProcessorProcess,
    ReflectorProcess,
    duplicate_problems,
    order_problems,
)
from tests.support.waiting import wait_until

__all__ = ["FULL", "REDIS_FAULTS", "SHORT", "Result", "Scenario", "Timings", "run", "table"]

SHARDS = 8
HANDLER = "bench.chaos.recorder:OutageRecorder"
PROCESSORS = ("p1", "p2")
REFLECTORS = ("reflector", "reflector-b")
REDIS_FAULTS = frozenset({"restart", "outage", "hang"})

PUBLISHED = "informer_bus_reflector_deltas_published_total"
SKIPPED = "informer_bus_reflector_deltas_skipped_total"


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
    """One of the faults of the module docstring."""
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
    reflectors: int = 1
    """How many reflector replicas run (the second one is a standby)."""
    reflector_flags: tuple[tuple[str, object], ...] = ()
    """Extra reflector settings by field name, e.g. ``(("inactivity_timeout", 1.0),)``."""
    slow_list: float = 0.0
    """Seconds the simulator waits before answering each request until the fault ends: a list
    of many small pages then takes seconds."""


_PAGED = (("page_size", 100), ("batch_max", 100))

SHORT = (
    Scenario("redis restart (AOF, kill -9, 2 s down)", "restart", 2.0, DEFAULT_TIMINGS),
    Scenario("redis unreachable 7 s, fast leases", "outage", 7.0),
    Scenario("reflector leader SIGSTOP past its lease, then SIGCONT", "reflector-pause", 4.0,
             warmup=1.0, reflectors=2),
    Scenario("api down 2 s, silent deletions + compaction (410)", "api-compact", 2.0,
             warmup=1.0),
    Scenario("processor kill -9 x3 under churn (replaced)", "processor-kills", 1.5,
             warmup=1.0),
)  # fmt: skip
"""What ``make test`` runs (tests/pipeline/test_chaos_redis_faults.py,
test_chaos_process_and_api_faults.py)."""

FULL = (
    Scenario("redis restart (AOF, kill -9, 3 s down)", "restart", 3.0, DEFAULT_TIMINGS, 1000),
    Scenario("redis restart (AOF, kill -9, 3 s down), fast leases", "restart", 3.0, pods=1000),
    Scenario("redis unreachable 30 s", "outage", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis hung (SIGSTOP) 30 s", "hang", 30.0, DEFAULT_TIMINGS, 1000,
             recovery_timeout=120.0),
    Scenario("redis restart WITHOUT persistence (known limit)", "restart", 3.0,
             DEFAULT_TIMINGS, 1000, recovery_timeout=30.0, aof=False, known_limit=True),
    Scenario("reflector leader kill -9 during the initial list (standby)",
             "reflector-kill-list", 1.0, pods=5000, reflectors=2, reflector_flags=_PAGED,
             slow_list=0.05),
    Scenario("reflector leader kill -9 during a burst (standby)", "reflector-kill-burst", 3.0,
             pods=1000, churn_rate=400.0, reflectors=2),
    Scenario("reflector leader SIGSTOP past its lease, then SIGCONT", "reflector-pause", 5.0,
             pods=1000, reflectors=2),
    Scenario("processor kill -9 x3 under churn (replaced)", "processor-kills", 3.0, pods=1000),
    Scenario("api watches dropped every 0.5 s for 5 s", "api-drop", 5.0, pods=1000),
    Scenario("api watches stalled 5 s (watchdog 1 s)", "api-stall", 5.0, pods=1000,
             reflector_flags=(("inactivity_timeout", 1.0),)),
    Scenario("api down 3 s, silent deletions + compaction (410)", "api-compact", 3.0,
             pods=1000),
    Scenario("api 429 burst, then 500 burst", "api-errors", 30.0, pods=1000),
    Scenario("api server restart (3 s refused, state kept)", "api-restart", 3.0, pods=1000),
)  # fmt: skip
"""What ``make chaos`` runs (``python -m bench.chaos``)."""


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
        self.stack = stack
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
        self.reflectors = [self._reflector(name) for name in REFLECTORS[: scenario.reflectors]]
        self.processors: list[ProcessorProcess] = []
        """Every processor started (killed ones included), in start order."""
        for member in PROCESSORS:
            self.add_processor(member, start=False)
        self.killed: dict[str, float] = {}
        """Component (log file name) -> ``time.time()`` of its kill -9 by the fault."""

    # --- components ----------------------------------------------------------------------

    def _start_redis(self) -> _PinnedRedis:
        server = _PinnedRedis(self.workdir / "redis", self.port, aof=self.scenario.aof)
        server.start()
        return server

    def _stop_redis(self) -> None:
        if self.redis.process is not None and self.redis.process.poll() is None:
            self.redis.process.send_signal(signal.SIGCONT)  # a hung Redis must stop too
        self.redis.stop()

    def _reflector(self, identity: str) -> ReflectorProcess:
        t = self.scenario.timings
        flags = reflector_flags(
            self.redis.url, self.sim.url, shard_count=SHARDS, lease_duration=t.lease,
            renew_deadline=t.renew, retry_period=t.retry, backoff_max=t.backoff_max,
            identity=identity, **dict(self.scenario.reflector_flags),
        )  # fmt: skip
        process = ReflectorProcess(flags, self.workdir / f"{identity}.log")
        self.stack.callback(process.close)
        return process

    def add_processor(self, member: str, *, start: bool = True) -> ProcessorProcess:
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
        process = ProcessorProcess(args, self.workdir / f"{member}.log", env=env)
        self.stack.callback(process.close)
        self.processors.append(process)
        return process.start() if start else process

    def start(self, *, settle: bool = True) -> None:
        """Populate, start the first reflector and, once it leads, the standby and the
        processors. ``settle``: first wait until the reflector synced and the processors hold
        balanced, converged stores (``False``: the fault strikes the initial list)."""
        self.sim.populate("pods", self.scenario.pods, seed=self.scenario.seed)
        if self.scenario.slow_list:
            self.sim.slow_responses(self.scenario.slow_list)
        first = self.reflectors[0].start()
        wait_until(lambda: first.holds(self.bus.holder()), 60, interval=0.05,
                   what="the first reflector to lead")  # fmt: skip
        if settle:
            wait_until(self.bus.synced, 60, interval=0.1, what="the reflector to sync")
        for standby in self.reflectors[1:]:
            standby.start()
        for process in self.processors:
            process.start()
        if not settle:
            return
        # Balanced before the churn: the fault, not the second processor's arrival, is what
        # moves shards afterwards.
        wait_until(
            lambda: self.recovered() and not assignment_problems(self.bus, self.live_processors()),
            60, interval=0.2, what=self.why_not_recovered,
        )  # fmt: skip

    def leader(self) -> ReflectorProcess | None:
        holder = self.bus.holder()
        return next((r for r in self.reflectors if r.running() and r.holds(holder)), None)

    def live_processors(self) -> list[ProcessorProcess]:
        return [p for p in self.processors if p.log_path.name not in self.killed]

    def kill(self, process: ProcessorProcess | ReflectorProcess) -> None:
        process.kill()
        self.killed[process.log_path.name] = time.time()

    def components(self) -> list[ProcessorProcess | ReflectorProcess]:
        return [*self.reflectors, *self.processors]

    # --- state ---------------------------------------------------------------------------

    def calls(self) -> list[Call]:
        return read_calls(self.workdir)

    def stores(self) -> dict[str, str]:
        return final_stores(self.calls(), self.bus.shard_epochs())

    def _recovery_gaps(self) -> list[str]:
        """What still stands between now and "recovered" (empty: recovered)."""
        gaps: list[str] = []
        if self.leader() is None:
            gaps.append(f"no running reflector leads (holder {self.bus.holder()})")
        if not self.bus.synced():
            gaps.append("the shards are not synced")
        holders = self.bus.shard_holders()
        live = self.live_processors()
        unowned = [s for s, h in holders.items() if not any(p.holds(h) for p in live)]
        if unowned:
            gaps.append(f"shards {unowned} not owned by a live processor")
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


def _metric_total(process: ReflectorProcess, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` for pods whose labels include ``labels`` (all
    reasons or kinds at once); 0 when absent."""
    with urllib.request.urlopen(process.url() + "/metrics", timeout=5) as response:
        text = response.read().decode()
    wanted = {"resource": "pods", **labels}
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and wanted.items() <= sample.labels.items()
    )


# --- faults ----------------------------------------------------------------------------------


class _Fault:
    """One kind of fault: when it strikes, how, and what proves it really happened.

    :meth:`apply` runs the whole fault (injection, ``downtime``, repair) while the churn runs;
    the churn stops when it returns. :meth:`verify` runs once the pipeline recovered and
    returns problems (a fault that did not bite proves nothing); it may add notes.
    """

    settle_first = True
    """Whether the pipeline is synced and balanced before the churn (see ``_Pipeline.start``)."""

    def __init__(self, pipeline: _Pipeline) -> None:
        self.pipeline = pipeline
        self.scenario = pipeline.scenario
        self.notes: list[str] = []

    def wait_for_the_moment(self) -> None:
        time.sleep(self.scenario.warmup)

    def apply(self) -> None:
        raise NotImplementedError

    def verify(self) -> list[str]:
        return []

    def _leader(self) -> ReflectorProcess:
        return wait_until(self.pipeline.leader, 30, interval=0.05, what="a leading reflector")

    def _takeover(self, old: ReflectorProcess, since: float) -> tuple[ReflectorProcess, float]:
        """Wait until another reflector leads; returns it and the seconds since ``since``."""

        def standby_leads() -> ReflectorProcess | None:
            leader = self.pipeline.leader()
            return None if leader is old else leader

        new = wait_until(standby_leads, self.scenario.timings.lease + 10, interval=0.02,
                         what="the standby to lead")  # fmt: skip
        seconds = time.monotonic() - since
        self.notes.append(f"the standby led {seconds:.1f} s after the fault struck")
        return new, seconds


class _RedisFault(_Fault):
    """``restart``, ``outage``, ``hang``."""

    def apply(self) -> None:
        pipeline = self.pipeline
        process = pipeline.redis.process
        assert process is not None
        if self.scenario.fault == "hang":
            process.send_signal(signal.SIGSTOP)
        else:
            process.kill()
            process.wait(10)
        time.sleep(self.scenario.downtime)
        if self.scenario.fault == "hang":
            process.send_signal(signal.SIGCONT)
        else:
            pipeline.redis = pipeline._start_redis()


class _ReflectorKillDuringList(_Fault):
    """kill -9 the leader once a third of its (slow, paginated) initial list is published."""

    settle_first = False

    def wait_for_the_moment(self) -> None:
        bus = self.pipeline.bus
        wait_until(lambda: bus.length() >= self.scenario.pods // 3, 120, interval=0.01,
                   what="a third of the initial list on the streams")  # fmt: skip

    def apply(self) -> None:
        pipeline = self.pipeline
        leader = self._leader()
        killed = time.monotonic()
        pipeline.kill(leader)
        self.published_at_kill = pipeline.bus.settle(quiet=0.2)
        self.synced_at_kill = pipeline.bus.synced()
        time.sleep(max(0.0, self.scenario.downtime - (time.monotonic() - killed)))
        pipeline.sim.slow_responses(0)
        self._takeover(leader, killed)

    def verify(self) -> list[str]:
        problems = []
        if self.synced_at_kill or not 0 < self.published_at_kill < self.scenario.pods:
            problems.append(
                f"the kill did not land in the initial list ({self.published_at_kill} of "
                f"{self.scenario.pods} published, synced {self.synced_at_kill})"
            )
        leader = self.pipeline.leader()
        if leader is not None:
            lists = _metric_total(leader, "informer_bus_reflector_lists_total")
            self.notes.append(f"killed after {self.published_at_kill} of {self.scenario.pods} "
                              f"initial adds; the standby listed {lists:.0f} time(s)")  # fmt: skip
        return problems


class _ReflectorKillDuringBurst(_Fault):
    def apply(self) -> None:
        pipeline = self.pipeline
        leader = self._leader()
        killed = time.monotonic()
        pipeline.kill(leader)
        self._takeover(leader, killed)
        time.sleep(max(0.0, self.scenario.downtime - (time.monotonic() - killed)))

    def verify(self) -> list[str]:
        leader = self.pipeline.leader()
        if leader is not None:
            lists = _metric_total(leader, "informer_bus_reflector_lists_total")
            self.notes.append(f"the standby took over and listed {lists:.0f} time(s)")
        return []


class _ReflectorPause(_Fault):
    """SIGSTOP the leader past its lease; after SIGCONT none of its writes may be accepted.

    The first leader has been the only writer since the start, so the stream entries that exist
    once it is frozen (and Redis ran what had reached its socket) are exactly the deltas it got
    accepted; its own published counter must still say so after it woke up and stepped down.
    """

    def apply(self) -> None:
        bus = self.pipeline.bus
        old = self.old = self._leader()
        self.old_epoch = bus.epoch()
        self.skipped_before = _metric_total(old, SKIPPED)
        old.send(signal.SIGSTOP)
        paused = time.monotonic()
        self.written_by_old = bus.settle(quiet=0.2)
        self.counted_in_time = bus.epoch() == self.old_epoch
        self.log_at_pause = len(old.log())
        try:
            self.new, _ = self._takeover(old, paused)
            time.sleep(max(0.0, self.scenario.downtime - (time.monotonic() - paused)))
        finally:
            old.send(signal.SIGCONT)

    def verify(self) -> list[str]:
        old, bus = self.old, self.pipeline.bus
        problems = []
        if not self.counted_in_time:
            problems.append("the standby took over before the old leader's writes were counted")
        try:
            wait_until(lambda: _metric_total(old, "informer_bus_reflector_leader") == 0, 15,
                       what="the old leader's leader gauge to drop")  # fmt: skip
        except AssertionError as error:
            problems.append(str(error))
        accepted = _metric_total(old, PUBLISHED)
        skipped = _metric_total(old, SKIPPED)
        if accepted != self.written_by_old or skipped != self.skipped_before:
            problems.append(
                f"the old leader got writes accepted after its pause: published {accepted:.0f} "
                f"(it had {self.written_by_old} on the streams when frozen), skipped "
                f"{skipped:.0f} (was {self.skipped_before:.0f})"
            )
        epoch = bus.epoch()
        if epoch <= self.old_epoch or bus.fences() != [epoch] * len(bus.shards):
            problems.append(f"fences {bus.fences()}, epochs {self.old_epoch} -> {epoch}")
        if self.pipeline.leader() is not self.new:
            problems.append("the standby that took over does not lead any more")
        stepped_down = "stopping leading" in old.log()[self.log_at_pause :]
        self.notes.append(
            f"epoch {self.old_epoch} -> {epoch}; the old leader had {self.written_by_old} deltas "
            f"accepted before the pause, {accepted - self.written_by_old:.0f} after; stepped "
            f"down: {stepped_down}"
        )
        return problems


class _ProcessorKills(_Fault):
    """Three kill -9s, ``downtime`` apart; each victim is replaced by a new member."""

    kills = 3

    def apply(self) -> None:
        pipeline = self.pipeline
        for number in range(self.kills):
            victim = pipeline.live_processors()[0]  # the oldest: it owns shards by now
            pipeline.kill(victim)
            pipeline.add_processor(f"p{len(pipeline.processors) + 1}")
            if number < self.kills - 1:
                time.sleep(self.scenario.downtime)

    def verify(self) -> list[str]:
        calls = self.pipeline.calls()
        handled = {
            p.member_id: sum(1 for c in calls if c.member == p.member_id)
            for p in self.pipeline.processors
        }
        self.notes.append(f"handler calls per member: {handled}")
        return []


class _ApiDrop(_Fault):
    def apply(self) -> None:
        leader = self._leader()
        self.restarts_before = _metric_total(leader, "informer_bus_reflector_watch_restarts_total")
        self.dropped = 0
        deadline = time.monotonic() + self.scenario.downtime
        while time.monotonic() < deadline:
            self.dropped += self.pipeline.sim.drop_watches()
            time.sleep(0.5)
        self.leader = leader

    def verify(self) -> list[str]:
        if self.dropped == 0:
            return ["no watch was open to drop"]
        restarts = _metric_total(self.leader, "informer_bus_reflector_watch_restarts_total")
        lists = _metric_total(self.leader, "informer_bus_reflector_lists_total")
        self.notes.append(f"{self.dropped} watches dropped, {restarts - self.restarts_before:.0f} "
                          f"re-watches, {lists:.0f} list(s) in all")  # fmt: skip
        return []


class _ApiStall(_Fault):
    WATCHDOG = "informer_bus_reflector_errors_total"

    def apply(self) -> None:
        self.leader = self._leader()
        self.fired_before = _metric_total(self.leader, self.WATCHDOG, kind="WatchInactiveError")
        self.pipeline.sim.stall_watches(self.scenario.downtime)
        time.sleep(self.scenario.downtime)

    def verify(self) -> list[str]:
        fired = _metric_total(self.leader, self.WATCHDOG, kind="WatchInactiveError")
        fired -= self.fired_before
        self.notes.append(f"the watchdog fired {fired:.0f} time(s)")
        return [] if fired >= 1 else ["the reflector's inactivity watchdog never fired"]


class _ApiCompact(_Fault):
    """The API server goes away; pods are deleted silently and history is compacted meanwhile.

    The silently deleted pods exist only in the reflector's known state when it comes back: the
    410 makes it relist, its diff publishes a tombstone for each, and each must reach
    ``on_delete`` as a ``DeletedFinalStateUnknown`` (the recorder's ``tombstone`` flag).
    """

    silent_deletions = 20

    def apply(self) -> None:
        sim = self.pipeline.sim
        self.leader = self._leader()
        self.expired_before = _metric_total(self.leader, "informer_bus_reflector_expired_total")
        restart = threading.Thread(target=sim.restart, args=(self.scenario.downtime,),
                                   name="chaos-api-restart")  # fmt: skip
        restart.start()
        try:
            time.sleep(min(0.3, self.scenario.downtime / 4))  # the front is closed by now
            # Only pods the reflector has published: one it never saw needs no tombstone.
            known = self.pipeline.bus.known_versions()
            candidates = sorted(key for key in sim.ground_truth("pods") if key in known)
            self.victims = []
            for key in candidates[: self.silent_deletions]:
                try:
                    sim.silent_delete("pods", key)
                    self.victims.append(key)
                except ApiError:
                    pass  # the churn deleted it first
            sim.compact()
        finally:
            restart.join(self.scenario.downtime + 30)

    def verify(self) -> list[str]:
        calls = self.pipeline.calls()
        tombstoned = {c.key for c in calls if c.kind == "delete" and c.tombstone}
        missed = [key for key in self.victims if key not in tombstoned]
        expired = _metric_total(self.leader, "informer_bus_reflector_expired_total")
        expired -= self.expired_before
        self.notes.append(f"{len(self.victims)} silent deletions; {len(tombstoned)} objects "
                          f"reached on_delete as tombstones; {expired:.0f} 410(s)")  # fmt: skip
        problems = [f"{key}: deleted silently, no tombstone reached on_delete" for key in missed]
        if not self.victims:
            problems.append("no pod was deleted silently")
        if expired < 1:
            problems.append("the reflector never got a 410")
        return problems


class _ApiErrors(_Fault):
    """Three 429s (Retry-After 1 s), then three 500s; a dropped watch makes the reflector ask."""

    burst = 3
    ERRORS = "informer_bus_reflector_errors_total"

    def apply(self) -> None:
        sim = self.pipeline.sim
        self.leader = self._leader()
        self.errors_before = _metric_total(self.leader, self.ERRORS)
        self.unserved: list[str] = []
        for status in (429, 500):
            sim.fail_next(self.burst, status, retry_after=1)
            sim.drop_watches()
            try:
                wait_until(lambda: sim.faults.snapshot().fail_remaining == 0,
                           self.scenario.downtime, interval=0.05,
                           what=f"the {status} burst to be served")  # fmt: skip
            except AssertionError as error:
                self.unserved.append(str(error))
                sim.fail_next(0)

    def verify(self) -> list[str]:
        errors = _metric_total(self.leader, self.ERRORS) - self.errors_before
        throttled = _metric_total(self.leader, self.ERRORS, kind="throttled")
        self.notes.append(f"{errors:.0f} failed API calls counted ({throttled:.0f} throttled)")
        problems = list(self.unserved)
        if throttled < 1 or errors < 2 * self.burst:
            problems.append(f"the reflector counted {errors:.0f} failures ({throttled:.0f} 429s)")
        return problems


class _ApiRestart(_Fault):
    def apply(self) -> None:
        self.leader = self._leader()
        self.restarts_before = _metric_total(
            self.leader, "informer_bus_reflector_watch_restarts_total"
        )
        self.pipeline.sim.restart(self.scenario.downtime)

    def verify(self) -> list[str]:
        restarts = _metric_total(self.leader, "informer_bus_reflector_watch_restarts_total")
        restarts -= self.restarts_before
        self.notes.append(f"{restarts:.0f} re-watches after the restart")
        return [] if restarts >= 1 else ["the reflector never re-watched"]


_FAULTS: dict[str, type[_Fault]] = {
    **dict.fromkeys(REDIS_FAULTS, _RedisFault),
    "reflector-kill-list": _ReflectorKillDuringList,
    "reflector-kill-burst": _ReflectorKillDuringBurst,
    "reflector-pause": _ReflectorPause,
    "processor-kills": _ProcessorKills,
    "api-drop": _ApiDrop,
    "api-stall": _ApiStall,
    "api-compact": _ApiCompact,
    "api-errors": _ApiErrors,
    "api-restart": _ApiRestart,
}


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
    fault = _FAULTS[scenario.fault](pipeline)
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

    _check(pipeline, result, before_fault, initial_adds_before)
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
    pipeline: _Pipeline, result: Result, before_fault: dict[int, str], initial_adds_before: int
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
