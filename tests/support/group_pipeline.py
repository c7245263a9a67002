"""A reflector process and processor groups as child processes whose handlers record every call,
for the tests of what a group's handlers are told (``tests/pipeline/test_group_*``).

:class:`GroupPipeline` runs one reflector for pods (``python -m reflector_svc``, retention off,
so a new group meets the whole history) on the simulator and a Redis the test gives it, and
starts members of any group with any view (``python -m processor_svc``, fast failover: 2 s
leases, a member gone after 0.6 s). Each member runs
:class:`tests.support.recording_handler.FileRecorder` into ``<workdir>/<group>/<member>.jsonl``,
so :meth:`GroupPipeline.calls` reads one group's calls, every member and restart included.
:meth:`GroupPipeline.wait_settled` waits until there is nothing left to tell: the reflector
published the simulator's state, the group's shards are spread over its live members and
every entry is delivered and acknowledged (a member acknowledges an entry only after its
handlers returned, so by then every call is on disk).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import ResponseError

from apiserver_sim import ApiError, Simulator
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess
from tests.support.handler_calls import Call, read_calls
from tests.support.waiting import wait_until

__all__ = ["SHARDS", "GroupPipeline", "InFlight", "Relabeler", "as_flags"]

SHARDS = 8
LEASE, RENEW, RETRY = 2.0, 1.5, 0.2
MEMBER_TTL = 0.6
HANDLER = "tests.support.recording_handler:FileRecorder"


def as_flags(settings: Mapping[str, object]) -> list[str]:
    """Settings by field name as a service's flags (``shard_count=8`` -> ``--shard-count 8``)."""
    flags: list[str] = []
    for name, value in settings.items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GroupPipeline:
    """The reflector and the processor groups of one test (module docstring); :meth:`close`
    kills every process and prints their logs (pytest shows them when the test fails)."""

    def __init__(self, client: redis.Redis, redis_url: str, sim: Simulator, workdir: Path):
        self.client, self.redis_url, self.sim, self.workdir = client, redis_url, sim, workdir
        self.reflector: ReflectorProcess | None = None
        self.members: dict[str, list[ProcessorProcess]] = {}
        """Per group, every member started, in start order (killed ones included)."""

    def start_reflector(self) -> ReflectorProcess:
        settings = {
            "resource": "pods", "redis_url": self.redis_url, "kube_url": self.sim.url,
            "http_host": "127.0.0.1", "http_port": 0, "shard_count": SHARDS,
            "lease_duration": LEASE, "renew_deadline": RENEW, "retry_period": RETRY,
            "checkpoint_interval": 0.2, "retention_interval": 3600, "identity": "reflector",
        }  # fmt: skip
        self.reflector = ReflectorProcess(as_flags(settings), self.workdir / "reflector.log")
        self.reflector.start()
        wait_until(self.bus().synced, 60, interval=0.1, what="the reflector's first list")
        return self.reflector

    def start_member(self, group: str, member: str, **view: str) -> ProcessorProcess:
        """Start ``member`` of ``group`` with ``view`` (``label_selector="lane=b"``,
        ``project="metadata"``)."""
        records = self.workdir / group
        records.mkdir(exist_ok=True)
        settings = {
            "resource": "pods", "redis_url": self.redis_url, "shard_count": SHARDS,
            "handler": HANDLER, "group": group, "member_id": member, "http_host": "127.0.0.1",
            "http_port": 0, "lease_duration": LEASE, "renew_deadline": RENEW,
            "retry_period": RETRY, "heartbeat_interval": 0.1, "member_ttl": MEMBER_TTL,
            "block_ms": 200, **view,
        }  # fmt: skip
        env = {"IB_RECORD_FILE": str(records / f"{member}.jsonl"), "IB_MEMBER": member}
        process = ProcessorProcess(as_flags(settings), self.workdir / f"{member}.log", env=env)
        self.members.setdefault(group, []).append(process)
        return process.start()

    def live(self, group: str) -> list[ProcessorProcess]:
        return [p for p in self.members.get(group, []) if p.running()]

    def bus(self, group: str = "processors") -> Bus:
        return Bus(self.client, "pods", shard_count=SHARDS, group=group)

    def calls(self, group: str) -> list[Call]:
        """Every call the handlers of ``group`` made, all members and restarts."""
        return read_calls(self.workdir / group)

    # --- settling ------------------------------------------------------------------------------

    def unsettled(self, group: str) -> list[str]:
        """What is still to happen before ``group`` has told its handlers everything."""
        bus, live = self.bus(group), self.live(group)
        holders = bus.shard_holders()
        problems = [
            f"shard {shard}: held by {holder}"
            for shard, holder in holders.items()
            if not any(p.holds(holder) for p in live)
        ]
        owned = [sum(1 for h in holders.values() if p.holds(h)) for p in live]
        if owned and max(owned) - min(owned) > 1:  # a hand-over is still to come
            problems.append(f"unbalanced: {owned} shards")
        for keys in bus.shards:
            info = self.client.xinfo_stream(keys.stream)
            last = _text(info["last-generated-id"])
            groups = {_text(g["name"]): g for g in self.client.xinfo_groups(keys.stream)}
            mine = groups.get(group)
            if mine is None:
                problems.append(f"shard {keys.shard}: no consumer group {group}")
            elif _text(mine["last-delivered-id"]) != last or int(mine["pending"]):
                problems.append(
                    f"shard {keys.shard}: delivered {_text(mine['last-delivered-id'])} of "
                    f"{last}, {mine['pending']} pending"
                )
        problems += [f"{p.member_id}: not ready" for p in live if p.probe("/readyz") != 200]
        return problems

    def published_everything(self) -> bool:
        return self.bus().known_versions() == self.sim.ground_truth("pods")

    def wait_settled(self, groups: Sequence[str], timeout: float = 60.0) -> None:
        """Until the reflector published the simulator's state and every group in ``groups``
        delivered and acknowledged all of it (module docstring)."""

        def settled() -> bool:
            return self.published_everything() and not any(self.unsettled(g) for g in groups)

        def why() -> str:
            left = {g: self.unsettled(g)[:5] for g in groups}
            return f"published {self.published_everything()}, groups {left}"

        wait_until(settled, timeout, interval=0.2, what=why)

    def close(self) -> None:
        started: list[ReflectorProcess | ProcessorProcess] = [
            *([self.reflector] if self.reflector else []),
            *(p for members in self.members.values() for p in members),
        ]
        for process in started:
            process.close()
        for process in started:
            print(f"----- {process.log_path.name} -----\n{process.log()}")


class Relabeler:
    """Moves pods in and out of a label selector (``label=value``) through the simulator's API,
    ``rate`` times a second, in a thread: each time a random live pod gets ``value`` if it did
    not have it, another value if it did."""

    def __init__(self, sim: Simulator, label: str, value: str, *, rate: float, seed: int) -> None:
        self.sim, self.label, self.value, self.rate = sim, label, value, rate
        self.rng = random.Random(seed)
        self.moved_in = self.moved_out = 0
        self.keys: set[str] = set()
        """Every pod moved."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relabeler", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            while not self._stop.wait(1 / self.rate):
                self.one()
        except BaseException as err:  # reported by stop()
            self.error = err

    def one(self) -> None:
        keys = sorted(self.sim.ground_truth("pods"))
        key = self.rng.choice(keys)
        try:
            pod: dict[str, Any] = self.sim.get("pods", key)
            inside = (pod["metadata"].get("labels") or {}).get(self.label) == self.value
            value = "other" if inside else self.value
            self.sim.update("pods", key, {"metadata": {"labels": {self.label: value}}})
        except ApiError:
            return  # the churn deleted it meanwhile
        if inside:
            self.moved_out += 1
        else:
            self.moved_in += 1
        self.keys.add(key)


class InFlight:
    """The keys of the entries a group's owners read and had not acknowledged, sampled every
    ``interval`` seconds in a thread: what a member killed or stopping may or may not have told
    its handlers (at-least-once), so a next owner may tell them a deletion of a key they never
    heard of. A stop leaves its entries pending until the next owner's takeover, at least a
    lease hand-over later, so the samples see every one of them."""

    def __init__(self, pipeline: GroupPipeline, groups: Sequence[str], interval: float = 0.05):
        self.pipeline, self.groups, self.interval = pipeline, groups, interval
        self._ids: dict[str, set[tuple[int, str]]] = {group: set() for group in groups}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="in-flight", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        client, shards = self.pipeline.client, self.pipeline.bus().shards
        try:
            while not self._stop.wait(self.interval):
                for group in self.groups:
                    for keys in shards:
                        try:
                            rows = client.xpending_range(keys.stream, group, "-", "+", 10_000)
                        except ResponseError:
                            continue  # no consumer group yet
                        self._ids[group].update((keys.shard, _text(r["message_id"])) for r in rows)
        except BaseException as err:  # reported by stop()
            self.error = err

    def keys(self, group: str) -> set[str]:
        """The keys of every entry seen in flight for ``group`` (after :meth:`stop`)."""
        ids = self._ids[group]
        entries = self.pipeline.bus().all_entries()
        return {e.key for e in entries if (e.shard, e.stream_id) in ids}
