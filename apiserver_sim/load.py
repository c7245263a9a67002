"""Load generation: seeded populate and churn against the store, and the ground truth
({key: resourceVersion}) an informer that kept up must end with.

Determinism: with the same seed and the same starting state (and no other writers), populate
and churn perform the same operations on the same keys, so the same ground truth comes out;
with a fixed wall clock (``ClusterState.wall_clock``) the same bytes too.
Pacing only decides *when* an operation happens, never *which*.

Speed: the live watch benchmark is bounded by how fast churn writes, on the same GIL as the
streams. Updates touch metadata (and sometimes ``status.phase``) through
:meth:`ClusterState.update_parts`, which re-encodes only those members, and the operations due
are done in batches under one store lock hold, so watchers wake once per batch.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apiserver_sim.fixtures import (
    make_object,
    namespace_names,
    set_pod_phase,
    wall_timestamp,
)
from apiserver_sim.resources import NAMESPACES, NODES, PODS, ResourceType
from apiserver_sim.state import ClusterState
from apiserver_sim.status import ApiError

__all__ = [
    "CHURN_ANNOTATION",
    "COMMITTED_AT_ANNOTATION",
    "DEFAULT_MIX",
    "ChurnStats",
    "churn",
    "ensure_nodes",
    "populate",
]

DEFAULT_MIX: Mapping[str, float] = {"create": 0.2, "update": 0.6, "delete": 0.2}
_BATCH = 32  # most operations per store lock hold (~1 ms of work)
_POPULATE_CHUNK = 2000  # objects generated, then stored, at a time (bounded memory)


@dataclass(frozen=True)
class ChurnStats:
    """What one churn run did."""

    creates: int
    updates: int
    deletes: int
    seconds: float

    @property
    def events(self) -> int:
        return self.creates + self.updates + self.deletes

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "creates": self.creates,
            "updates": self.updates,
            "deletes": self.deletes,
            "events": self.events,
            "seconds": round(self.seconds, 4),
            "rate": round(self.rate, 1),
        }


def _ensure_namespaces(state: ClusterState, names: list[str]) -> None:
    existing = state.current(NAMESPACES)
    for i, name in enumerate(names):
        if name in existing:
            continue
        obj = make_object(NAMESPACES, random.Random(name), i, "", now=state.wall_clock())
        obj["metadata"]["name"] = name
        state.create(NAMESPACES, obj)


def ensure_nodes(state: ClusterState, names: Iterable[str]) -> int:
    """Create the Nodes named that do not exist yet (``node-0007`` is node number 7): the
    nodes populated and churned pods are scheduled on (``spec.nodeName``) are listed by
    ``kubectl get nodes`` like a real cluster's. Returns how many were created."""
    existing = state.current(NODES)
    created = 0
    for name in sorted(set(names)):
        if name in existing:
            continue
        index = int(name.rsplit("-", 1)[-1]) if name.rsplit("-", 1)[-1].isdigit() else 0
        obj = make_object(NODES, random.Random(name), index, "", now=state.wall_clock())
        obj["metadata"]["name"] = name
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = name
        state.create(NODES, obj)
        created += 1
    return created


def populate(
    state: ClusterState,
    resource: ResourceType,
    count: int,
    *,
    seed: int = 0,
    namespaces: int = 10,
    start_index: int | None = None,
) -> int:
    """Create ``count`` objects of ``resource`` spread round-robin over ``namespaces``.

    Object names carry their index, so repeated calls (``start_index`` defaults to the number
    already present) never collide. Returns how many were created.
    """
    rng = random.Random(f"populate:{resource.qualified}:{seed}")
    ns_names = namespace_names(namespaces) if resource.namespaced else [""]
    if resource.namespaced:
        _ensure_namespaces(state, ns_names)
    first = len(state.current(resource)) if start_index is None else start_index
    now = state.wall_clock()
    created = 0
    for start in range(first, first + count, _POPULATE_CHUNK):
        batch = [
            make_object(resource, rng, i, ns_names[i % len(ns_names)], now=now)
            for i in range(start, min(start + _POPULATE_CHUNK, first + count))
        ]
        if resource is PODS:  # the nodes first, as the pods were scheduled on them
            ensure_nodes(state, (pod["spec"]["nodeName"] for pod in batch))
        created += state.create_many(resource, batch)
    return created


CHURN_ANNOTATION = "sim.informer-bus.io/churn"
"""The step number of the churn run that made the update (0, 1, ...): which update it was."""
COMMITTED_AT_ANNOTATION = "sim.informer-bus.io/committed-at"
"""When a stamped churn update was committed: ``CLOCK_MONOTONIC`` in nanoseconds, read under
the store lock before the revision exists, so no watcher can receive the update before this
instant. CLOCK_MONOTONIC is one clock for every process of a Linux host: a handler on the same
machine subtracts it from its own reading to get a latency that cannot be negative."""
_TIERS = ("frontend", "backend", "cache", "batch")
_PHASES = ("Running", "Pending", "Succeeded", "Failed")


def _touch(metadata: dict[str, Any], step: int, tier: str | None, stamp: bool, when: str) -> None:
    """The metadata part of a churn update: a step annotation, sometimes a new ``tier``
    label, and the first managedFields entry re-stamped (its writer "applied" again).

    ``stamp``: also the commit time (:data:`COMMITTED_AT_ANNOTATION`). The store calls this
    while it holds its lock and before it builds the new revision, so the reading precedes any
    watcher's view of the update by construction."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        metadata["annotations"] = annotations = {}
    annotations[CHURN_ANNOTATION] = str(step)
    if stamp:
        annotations[COMMITTED_AT_ANNOTATION] = str(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    if tier is not None:
        labels = metadata.get("labels")
        if not isinstance(labels, dict):
            metadata["labels"] = labels = {}
        labels["tier"] = tier
    managed = metadata.get("managedFields")
    if isinstance(managed, list) and managed and isinstance(managed[0], dict):
        managed[0]["time"] = when


class _Churner:
    """The operation sequence of one churn run (separate from pacing, which it never sees)."""

    def __init__(
        self,
        state: ClusterState,
        resource: ResourceType,
        seed: int,
        mix: Mapping[str, float] | None,
        namespaces: int,
        *,
        stamp: bool,
    ) -> None:
        weights = dict(DEFAULT_MIX if mix is None else mix)
        for name in weights:
            if name not in DEFAULT_MIX:
                raise ValueError(f"unknown churn operation {name!r} (use create, update, delete)")
        if not any(w > 0 for w in weights.values()):
            raise ValueError("churn mix needs at least one positive weight")
        self.ops = [o for o in weights if weights[o] > 0]
        self.cumulative = list(itertools.accumulate(weights[o] for o in self.ops))
        self.total = self.cumulative[-1]
        self.cumulative[-1] = math.inf  # rounding can never pick past the last op
        self.state = state
        self.resource = resource
        self.rng = random.Random(f"churn:{resource.qualified}:{seed}")
        self.ns_names = namespace_names(namespaces) if resource.namespaced else [""]
        if resource.namespaced:
            _ensure_namespaces(state, self.ns_names)
        self.keys = state.sorted_keys(resource)
        self.nodes = set(state.current(NODES)) if resource is PODS else set()
        self.counts = {"create": 0, "update": 0, "delete": 0}
        self.next_index = 10_000_000 + self.rng.randrange(1_000_000) * 100
        self.step = 0
        self.stamp = stamp

    def _update(self, key: str) -> None:
        """A controller/kubelet-style write: metadata always (see :func:`_touch`), and one
        time in five a new ``status.phase``; the store re-encodes only those members."""
        rng = self.rng
        step, stamp = self.step, self.stamp
        when = wall_timestamp(self.state.wall_clock())
        tier = rng.choice(_TIERS) if rng.random() < 0.1 else None
        phase = rng.choice(_PHASES) if rng.random() < 0.2 else None

        def status(obj: dict[str, Any]) -> None:
            if "phase" in obj:
                set_pod_phase(obj, phase, when)

        self.state.update_parts(
            self.resource, key, lambda meta: _touch(meta, step, tier, stamp, when),
            status if phase is not None else None,
        )  # fmt: skip

    def one(self) -> None:
        rng = self.rng
        keys = self.keys
        op = (
            self.ops[bisect.bisect(self.cumulative, rng.random() * self.total)]
            if keys
            else "create"
        )
        try:
            if op == "create":
                index = self.next_index
                self.next_index += 1
                obj = make_object(
                    self.resource, rng, index, self.ns_names[index % len(self.ns_names)],
                    now=self.state.wall_clock(), fresh=True,
                )  # fmt: skip
                node = obj["spec"]["nodeName"] if self.resource is PODS else None
                if node is not None and node not in self.nodes:
                    ensure_nodes(self.state, (node,))
                    self.nodes.add(node)
                keys.append(self.state.create(self.resource, obj).key)
            elif op == "update":
                self._update(keys[rng.randrange(len(keys))])
            else:
                i = rng.randrange(len(keys))
                key = keys[i]
                keys[i] = keys[-1]
                keys.pop()
                self.state.delete(self.resource, key)
        except ApiError:
            # Someone else removed the key (or created it): resync our view and go on.
            self.keys = self.state.sorted_keys(self.resource)
        self.counts[op] += 1
        self.step += 1


def churn(
    state: ClusterState,
    resource: ResourceType = PODS,
    *,
    rate: float,
    seconds: float,
    seed: int = 0,
    mix: Mapping[str, float] | None = None,
    namespaces: int = 10,
    max_events: int | None = None,
    stop: threading.Event | None = None,
    stamp: bool = False,
) -> ChurnStats:
    """Create/update/delete at ``rate`` events/s for ``seconds`` (``rate`` 0: flat out).

    ``mix`` weights the operations (default 20/60/20); ``max_events`` stops early after that
    many operations. ``stamp`` writes each update's commit time into it
    (:data:`COMMITTED_AT_ANNOTATION`), for latency benches; it is off by default because it
    is the one thing in a churned object that the seed does not determine. Runs in the calling
    thread; the simulator wraps it in a thread.
    """
    churner = _Churner(state, resource, seed, mix, namespaces, stamp=stamp)
    stop = stop or threading.Event()
    limit = math.inf if max_events is None else max_events
    start = time.monotonic()
    while not stop.is_set() and churner.step < limit:
        now = time.monotonic()
        if now - start >= seconds:
            break
        batch = min(_BATCH, limit - churner.step)
        if rate > 0:
            due = start + churner.step / rate
            if due > now + 0.001:
                if stop.wait(min(due - now, seconds - (now - start))):
                    break
                continue
            batch = min(batch, int((now + 0.001 - start) * rate) - churner.step + 1)
        with state.exclusive():  # one lock hold per batch (see ClusterState.exclusive)
            for _ in range(int(batch)):
                churner.one()
    elapsed = time.monotonic() - start
    counts = churner.counts
    return ChurnStats(counts["create"], counts["update"], counts["delete"], elapsed)
