"""The faults a scenario injects, one class each: when it strikes, how, and what proves it
really bit (a fault that did not bite proves nothing). :data:`FAULTS` maps the names the
catalogue uses to them.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from apiserver_sim.status import ApiError
from bench.chaos.catalogue import REDIS_FAULTS
from bench.chaos.processes import ChaosPipeline
from tests.support.bus import (
    ReflectorProcess,
)
from tests.support.waiting import wait_until

PUBLISHED = "informer_bus_reflector_deltas_published_total"
SKIPPED = "informer_bus_reflector_deltas_skipped_total"


def metric_total(process: ReflectorProcess, name: str, **labels: str) -> float:
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


class Fault:
    """One kind of fault: when it strikes, how, and what proves it really happened.

    :meth:`apply` runs the whole fault (injection, ``downtime``, repair) while the churn runs;
    the churn stops when it returns. :meth:`verify` runs once the pipeline recovered and
    returns problems (a fault that did not bite proves nothing); it may add notes.
    """

    settle_first = True
    """Whether the pipeline is synced and balanced before the churn (see
    ``ChaosPipeline.start``)."""

    def __init__(self, pipeline: ChaosPipeline) -> None:
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


class _RedisFault(Fault):
    """``restart``, ``outage``, ``hang``: the one primary of a ``single`` topology (the key
    names no shard there)."""

    def apply(self) -> None:
        redis = self.pipeline.redis
        if self.scenario.fault == "hang":
            redis.pause_primary("")
        else:
            redis.kill_primary("")
        time.sleep(self.scenario.downtime)
        if self.scenario.fault == "hang":
            redis.resume_primary()
        else:
            redis.restart_killed()


class _ReflectorKillDuringList(Fault):
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
            lists = metric_total(leader, "informer_bus_reflector_lists_total")
            self.notes.append(f"killed after {self.published_at_kill} of {self.scenario.pods} "
                              f"initial adds; the standby listed {lists:.0f} time(s)")  # fmt: skip
        return problems


class _ReflectorKillDuringBurst(Fault):
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
            lists = metric_total(leader, "informer_bus_reflector_lists_total")
            self.notes.append(f"the standby took over and listed {lists:.0f} time(s)")
        return []


class _ReflectorPause(Fault):
    """SIGSTOP the leader past its lease; after SIGCONT none of its writes may be accepted.

    The first leader has been the only writer since the start, so the stream entries that exist
    once it is frozen (and Redis ran what had reached its socket) are exactly the deltas it got
    accepted; its own published counter must still say so after it woke up and stepped down.
    """

    def apply(self) -> None:
        bus = self.pipeline.bus
        old = self.old = self._leader()
        self.old_epoch = bus.epoch()
        self.skipped_before = metric_total(old, SKIPPED)
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
            wait_until(lambda: metric_total(old, "informer_bus_reflector_leader") == 0, 15,
                       what="the old leader's leader gauge to drop")  # fmt: skip
        except AssertionError as error:
            problems.append(str(error))
        accepted = metric_total(old, PUBLISHED)
        skipped = metric_total(old, SKIPPED)
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


class _ProcessorKills(Fault):
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


class _ApiDrop(Fault):
    def apply(self) -> None:
        leader = self._leader()
        self.restarts_before = metric_total(leader, "informer_bus_reflector_watch_restarts_total")
        self.dropped = 0
        deadline = time.monotonic() + self.scenario.downtime
        while time.monotonic() < deadline:
            self.dropped += self.pipeline.sim.drop_watches()
            time.sleep(0.5)
        self.leader = leader

    def verify(self) -> list[str]:
        if self.dropped == 0:
            return ["no watch was open to drop"]
        restarts = metric_total(self.leader, "informer_bus_reflector_watch_restarts_total")
        lists = metric_total(self.leader, "informer_bus_reflector_lists_total")
        self.notes.append(f"{self.dropped} watches dropped, {restarts - self.restarts_before:.0f} "
                          f"re-watches, {lists:.0f} list(s) in all")  # fmt: skip
        return []


class _ApiStall(Fault):
    WATCHDOG = "informer_bus_reflector_errors_total"

    def apply(self) -> None:
        self.leader = self._leader()
        self.fired_before = metric_total(self.leader, self.WATCHDOG, kind="WatchInactiveError")
        self.pipeline.sim.stall_watches(self.scenario.downtime)
        time.sleep(self.scenario.downtime)

    def verify(self) -> list[str]:
        fired = metric_total(self.leader, self.WATCHDOG, kind="WatchInactiveError")
        fired -= self.fired_before
        self.notes.append(f"the watchdog fired {fired:.0f} time(s)")
        return [] if fired >= 1 else ["the reflector's inactivity watchdog never fired"]


class _ApiCompact(Fault):
    """The API server goes away; pods are deleted silently and history is compacted meanwhile.

    The silently deleted pods exist only in the reflector's known state when it comes back: the
    410 makes it relist, its diff publishes a tombstone for each, and each must reach
    ``on_delete`` as a ``DeletedFinalStateUnknown`` (the recorder's ``tombstone`` flag).
    """

    silent_deletions = 20

    def apply(self) -> None:
        sim = self.pipeline.sim
        self.leader = self._leader()
        self.expired_before = metric_total(self.leader, "informer_bus_reflector_expired_total")
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
        expired = metric_total(self.leader, "informer_bus_reflector_expired_total")
        expired -= self.expired_before
        self.notes.append(f"{len(self.victims)} silent deletions; {len(tombstoned)} objects "
                          f"reached on_delete as tombstones; {expired:.0f} 410(s)")  # fmt: skip
        problems = [f"{key}: deleted silently, no tombstone reached on_delete" for key in missed]
        if not self.victims:
            problems.append("no pod was deleted silently")
        if expired < 1:
            problems.append("the reflector never got a 410")
        return problems


class _ApiErrors(Fault):
    """Three 429s (Retry-After 1 s), then three 500s; a dropped watch makes the reflector ask."""

    burst = 3
    ERRORS = "informer_bus_reflector_errors_total"

    def apply(self) -> None:
        sim = self.pipeline.sim
        self.leader = self._leader()
        self.errors_before = metric_total(self.leader, self.ERRORS)
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
        errors = metric_total(self.leader, self.ERRORS) - self.errors_before
        throttled = metric_total(self.leader, self.ERRORS, kind="throttled")
        self.notes.append(f"{errors:.0f} failed API calls counted ({throttled:.0f} throttled)")
        problems = list(self.unserved)
        if throttled < 1 or errors < 2 * self.burst:
            problems.append(f"the reflector counted {errors:.0f} failures ({throttled:.0f} 429s)")
        return problems


class _ApiRestart(Fault):
    def apply(self) -> None:
        self.leader = self._leader()
        self.restarts_before = metric_total(
            self.leader, "informer_bus_reflector_watch_restarts_total"
        )
        self.pipeline.sim.restart(self.scenario.downtime)

    def verify(self) -> list[str]:
        restarts = metric_total(self.leader, "informer_bus_reflector_watch_restarts_total")
        restarts -= self.restarts_before
        self.notes.append(f"{restarts:.0f} re-watches after the restart")
        return [] if restarts >= 1 else ["the reflector never re-watched"]


class _PrimaryKill(Fault):
    """kill -9 the primary serving shard 0 under churn; one of its replicas must take over.

    Replication is asynchronous: what the killed primary acknowledged but had not yet sent to
    its replica is gone, and the checks say so (lost, duplicated) rather than the fault.
    """

    def apply(self) -> None:
        redis = self.pipeline.redis
        self.problems: list[str] = []
        self.roles_before = redis.roles()
        struck = time.monotonic()
        self.notes.append(f"killed {redis.kill_primary(self.pipeline.bus.shards[0].stream)}")
        try:
            self.notes.append(f"promoted {redis.wait_promoted(self.scenario.recovery_timeout)}")
        except AssertionError as error:
            self.problems.append(str(error))
        if self.scenario.rejoin:
            redis.restart_killed()
            self.notes.append(f"the killed primary rejoined {time.monotonic() - struck:.1f} s "
                              "after the kill")  # fmt: skip
        time.sleep(max(0.0, self.scenario.downtime - (time.monotonic() - struck)))

    def verify(self) -> list[str]:
        roles = self.pipeline.redis.roles()
        self.notes.append(f"roles before: {self.roles_before}; after: {roles}")
        if roles == self.roles_before:
            self.problems.append("the roles did not change: no replica was promoted")
        return self.problems


class _PrimaryPause(_ReflectorPause):
    """SIGSTOP the reflector leader, then the primary serving shard 0, past the failover and
    the leader's lease; SIGCONT both (primary first). Split brain: until the cluster demotes
    it, the old primary still takes writes with the fences it had, and the old leader may be
    the one sending them. What it accepts is discarded when it resyncs as a replica, so it must
    be harmless: the checks (stores, streams, what handlers saw against the streams) find any
    write that survived or reached a handler.
    """

    def apply(self) -> None:
        pipeline, redis, bus = self.pipeline, self.pipeline.redis, self.pipeline.bus
        self.problems: list[str] = []
        old = self.old = self._leader()
        self.old_epoch = bus.epoch()
        self.skipped_before = metric_total(old, SKIPPED)
        old.send(signal.SIGSTOP)
        paused = time.monotonic()
        try:
            # Read before the primary stops answering: what the old leader got accepted.
            self.written_by_old = bus.settle(quiet=0.2)
            self.counted_in_time = bus.epoch() == self.old_epoch
            self.log_at_pause = len(old.log())
            self.roles_before = redis.roles()
            self.notes.append(f"paused {redis.pause_primary(pipeline.bus.shards[0].stream)}")
            try:
                try:
                    promoted = redis.wait_promoted(self.scenario.recovery_timeout)
                    self.notes.append(f"promoted {promoted}")
                except AssertionError as error:
                    self.problems.append(str(error))
                self.new, _ = self._takeover(old, paused)
                time.sleep(max(0.0, self.scenario.downtime - (time.monotonic() - paused)))
            finally:
                redis.resume_primary()
        finally:
            old.send(signal.SIGCONT)

    def verify(self) -> list[str]:
        redis = self.pipeline.redis
        problems = self.problems + super().verify()
        # super() refuses every write the old leader got accepted after its pause; on a
        # cluster a stale primary may accept some: reported, and judged by the checks.
        problems = [p for p in problems if "writes accepted after its pause" not in p]
        try:
            wait_until(redis.demoted, 30, interval=0.1, what="the old primary to be demoted")
        except AssertionError as error:
            problems.append(str(error))
        self.notes.append(f"roles before: {self.roles_before}; after: {redis.roles()}")
        return problems


FAULTS: dict[str, type[Fault]] = {
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
    "primary-kill": _PrimaryKill,
    "primary-pause": _PrimaryPause,
}
