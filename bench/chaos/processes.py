"""The pipeline a scenario runs, as real processes: the simulator (in this process: it is the
ground truth), a private Redis of the scenario's topology (:mod:`bench.chaos.topologies`: one
redis-server pinned to its port, or a cluster with replicas), one or two reflectors and two
processors, and how to read their state.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import redis
from redis.exceptions import RedisClusterException

from apiserver_sim import Simulator, SimulatorSettings
from bench.chaos.catalogue import Scenario
from bench.chaos.topologies import TOPOLOGIES, RedisTopology
from tests.support.bus import (
    Bus,
    ProcessorProcess,
    ReflectorProcess,
)
from tests.support.processor_ha import (
    Call,
    assignment_problems,
    final_stores,
    processor_settings,
    read_calls,
    store_differences,
)
from tests.support.reflector_ha import reflector_flags
from tests.support.waiting import wait_until

SHARDS = 8
HANDLER = "bench.chaos.recorder:OutageRecorder"
PROCESSORS = ("p1", "p2")
REFLECTORS = ("reflector", "reflector-b")


REDIS_ERRORS = (redis.RedisError, RedisClusterException)
"""What a check may get while Redis fails over (redis-py's cluster errors are not all
``RedisError``s)."""


def _without_redis_url(args: list[str]) -> list[str]:
    """``args`` without ``--redis-url VALUE``: the topology's own flags replace it."""
    at = args.index("--redis-url")
    return args[:at] + args[at + 2 :]


class ChaosPipeline:
    """The running pieces of one scenario and how to read their state."""

    def __init__(self, stack: ExitStack, scenario: Scenario, workdir: Path) -> None:
        self.stack = stack
        self.scenario = scenario
        self.workdir = workdir
        self.redis: RedisTopology = TOPOLOGIES[scenario.topology](workdir, scenario)
        stack.callback(self.redis.stop)
        self.redis.start()
        self.client = self.redis.client()
        stack.callback(self._close_client)  # the current one: _reconnect replaces it
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

    def _reflector(self, identity: str) -> ReflectorProcess:
        t = self.scenario.timings
        flags = reflector_flags(
            self.redis.url, self.sim.url, shard_count=SHARDS, lease_duration=t.lease,
            renew_deadline=t.renew, retry_period=t.retry, backoff_max=t.backoff_max,
            identity=identity, **dict(self.scenario.reflector_flags),
        )  # fmt: skip
        flags = _without_redis_url(flags) + self._redis_flags()
        process = ReflectorProcess(flags, self.workdir / f"{identity}.log")
        self.stack.callback(process.close)
        return process

    def _redis_flags(self) -> list[str]:
        """Where Redis is (the topology's flags) and how many replicas confirm a write."""
        waits = self.scenario.wait_replicas
        return self.redis.service_flags() + (["--redis-wait-replicas", str(waits)] if waits else [])

    def add_processor(self, member: str, *, start: bool = True) -> ProcessorProcess:
        t = self.scenario.timings
        settings = processor_settings(
            self.redis.url, member, handler=HANDLER, lease_duration=t.lease,
            renew_deadline=t.renew, retry_period=t.retry, heartbeat_interval=t.heartbeat,
            member_ttl=t.member_ttl,
        )  # fmt: skip
        del settings["redis_url"]
        args = self._redis_flags()
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
        """The running reflector that holds the leader lease; ``None`` also while the checks'
        client cannot read it (a primary frozen or failing over: the next call reconnects)."""
        try:
            holder = self.bus.holder()
        except REDIS_ERRORS:
            self.reconnect()
            return None
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

    def _close_client(self) -> None:
        self.client.close()

    def reconnect(self) -> None:
        """A new command client for the checks. redis-py's cluster client was once seen still
        routing to a killed primary a minute after its replica took over (a slot map read
        mid-failover); the checks must measure the services, not that."""
        self.client.close()
        self.client = self.bus.client = self.redis.client()

    def recovered(self) -> bool:
        try:
            return not self._recovery_gaps()
        except REDIS_ERRORS:
            self.reconnect()
            return False

    def why_not_recovered(self) -> str:
        try:
            return "; ".join(self._recovery_gaps())
        except REDIS_ERRORS as error:
            return f"Redis: {error!r}"
