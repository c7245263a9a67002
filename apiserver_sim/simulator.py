"""The Python API: :class:`Simulator` runs the simulated apiserver in this process, exposes
every fault and load knob as a method, and serves the same knobs under ``/_sim/``.

Example::

    with Simulator(SimulatorSettings(bookmark_interval=0.1)) as sim:
        sim.populate("pods", 100, seed=1)
        client = kubernetes.client.ApiClient(Configuration(host=sim.url))
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Self, TypedDict, Unpack

from apiserver_sim import objects
from apiserver_sim.conflicts import ConflictTable, total_conflicts
from apiserver_sim.faults import FaultState
from apiserver_sim.fixtures import wall_timestamp
from apiserver_sim.load import ChurnStats, churn, populate
from apiserver_sim.resources import (
    CRDS,
    NAMESPACES,
    PODS,
    WIDGETS,
    ResourceType,
    find_resource,
)
from apiserver_sim.revision import StoredObject
from apiserver_sim.server import HttpFront
from apiserver_sim.settings import SimulatorSettings
from apiserver_sim.state import ClusterState
from apiserver_sim.status import ApiError, bad_request

__all__ = ["ChurnHandle", "Simulator"]

_MANAGER = "apiserver-sim"
_CLUSTER_AGE = 90 * 86400.0


def _widget_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{WIDGETS.plural}.{WIDGETS.group}"},
        "spec": {
            "group": WIDGETS.group,
            "names": {
                "kind": WIDGETS.kind,
                "listKind": WIDGETS.list_kind,
                "plural": WIDGETS.plural,
                "singular": WIDGETS.singular,
                "shortNames": list(WIDGETS.short_names),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": WIDGETS.version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
        "status": {"acceptedNames": {"kind": WIDGETS.kind, "plural": WIDGETS.plural}},
    }


class ChurnHandle:
    """A churn running in a background thread; ``stop()`` ends it early, ``wait()`` joins."""

    def __init__(self, thread: threading.Thread, stop: threading.Event) -> None:
        self._thread = thread
        self._stop = stop
        self.stats: ChurnStats | None = None
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> ChurnStats | None:
        self._stop.set()
        return self.wait()

    def wait(self, timeout: float | None = None) -> ChurnStats | None:
        self._thread.join(timeout)
        return self.stats


class ChurnOptions(TypedDict, total=False):
    """The options of :meth:`Simulator.churn` and :meth:`Simulator.start_churn`."""

    seed: int
    """Of the random choices (default 0: a run repeats)."""
    mix: Mapping[str, float] | None
    """Weights of creates, updates and deletes (default ``DEFAULT_MIX``)."""
    resource: str | ResourceType
    """What to churn (default pods)."""
    max_events: int | None
    """Stop after this many events (default: when ``seconds`` are over)."""
    stamp: bool
    """Stamp each object with its commit time (``load.COMMITTED_AT_ANNOTATION``)."""


class Simulator:
    """A simulated Kubernetes API server on ``127.0.0.1`` (port 0 picks a free one).

    State and the resourceVersion counter live in :attr:`state`; ``restart()`` keeps both,
    like an apiserver restarting in front of the same etcd.
    """

    def __init__(
        self,
        settings: SimulatorSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` dates history events for compaction by age (tests pass a fake one);
        ``wall_clock`` is what creationTimestamps and the ages kubectl shows count from."""
        self.settings = settings or SimulatorSettings()
        self.state = ClusterState(
            history_max_events=self.settings.history_max_events,
            history_max_age=self.settings.history_max_age,
            clock=clock,
            wall_clock=wall_clock,
        )
        self.faults = FaultState()
        self.front = HttpFront(self.state, self.faults, self.settings, self._control)
        self._lock = threading.Lock()
        self._churns: list[ChurnHandle] = []
        self._helpers: list[tuple[threading.Thread, threading.Event]] = []
        """Background restarts, each with the event that lets it go (see ``restart`` in
        :meth:`control`)."""
        self._stopping = threading.Event()
        self._started = False
        self._seed_defaults()

    def _seed_defaults(self) -> None:
        """What a cluster has from its first day (a plausible 90 days ago)."""
        when = wall_timestamp(self.state.wall_clock() - _CLUSTER_AGE)
        for name in ("default", "kube-system", "kube-public"):
            obj = objects.prepare_create(
                NAMESPACES, {"metadata": {"name": name}}, "", _MANAGER, when=when
            )
            self.state.create(NAMESPACES, obj)
        crd = objects.prepare_create(CRDS, _widget_crd(), "", _MANAGER, when=when)
        self.state.create(CRDS, crd)

    def _now(self) -> str:
        return wall_timestamp(self.state.wall_clock())

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> Self:
        """Listen and serve in background threads; apply ``populate``/``churn`` settings."""
        if self._started:
            return self
        self.front.open()
        self._started = True
        self._stopping.clear()
        if self.settings.populate:
            self.populate(PODS, self.settings.populate, seed=self.settings.seed)
        if self.settings.churn > 0:
            self.start_churn(
                rate=self.settings.churn,
                seconds=self.settings.churn_seconds,
                seed=self.settings.seed,
                resource=PODS,
            )
        return self

    def stop(self) -> None:
        """Close the listener, end all watches and churns, and join every thread."""
        self._stopping.set()
        with self._lock:
            churns, self._churns = list(self._churns), []
            helpers, self._helpers = list(self._helpers), []
        for handle in churns:
            handle.stop()
        for helper, go in helpers:
            go.set()  # a restart whose reply never went out: it sees _stopping and returns
            helper.join(10)
        self.state.close()
        self.front.close()
        self._started = False

    @property
    def port(self) -> int:
        return self.front.port

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.front.port}"

    @property
    def resource_version(self) -> int:
        return self.state.resource_version

    @property
    def active_watches(self) -> int:
        return self.state.active_watches

    @property
    def watches_served(self) -> int:
        """Watches ever opened, for tests that check how many watches a pipeline costs."""
        return self.state.watches_served

    def conflicts(self) -> ConflictTable:
        """Every 409 answered so far over HTTP, as ``{resource: {verb: {reason: count}}}``
        (:data:`~apiserver_sim.conflicts.ConflictTable`; ``{}``: none). A
        controller test asserts it stayed ``{}``: a client that retries 409s hides them."""
        return self.front.conflicts.snapshot()

    def reset_conflicts(self) -> ConflictTable:
        """Count 409s from zero again; returns what was counted until now."""
        return self.front.conflicts.reset()

    # ------------------------------------------------------------ faults

    def drop_watches(self) -> int:
        """End every open watch cleanly (clients re-watch from their last RV)."""
        return self.state.drop_watches()

    def stall_watches(self, seconds: float) -> None:
        """Keep watch connections open but write nothing for ``seconds``."""
        self.faults.stall_watches(seconds)

    def compact(self, rv: int | None = None) -> int:
        """Compact history now (to ``rv`` or the current RV); older watches/lists get 410."""
        return self.state.compact(rv)

    def inject_malformed_lines(
        self, count: int = 1, kind: str = "truncated", *, after_first_line: bool = False
    ) -> None:
        """Corrupt the next ``count`` watch writes (:meth:`FaultState.inject_malformed_lines`)."""
        self.faults.inject_malformed_lines(count, kind, after_first_line=after_first_line)

    def fail_next(self, count: int, status: int = 500, retry_after: int = 1) -> None:
        """The next ``count`` API requests fail with 429 (Retry-After) or 500."""
        self.faults.fail_next(count, status, retry_after)

    def slow_responses(self, seconds: float) -> None:
        self.faults.slow_responses(seconds)

    def restart(self, downtime: float = 0.0) -> None:
        """Simulate an apiserver restart: drop watches and connections, refuse connections for
        ``downtime`` seconds, then serve again on the same port; objects and the RV counter
        carry on (etcd survived)."""
        self.state.drop_watches()
        port = self.front.port
        self.front.close()
        if downtime > 0:
            time.sleep(downtime)
        self.front.open(port)

    def silent_create(self, resource: str | ResourceType, obj: Mapping[str, Any]) -> StoredObject:
        """Create without a watch event (a change the watchers miss)."""
        res = find_resource(resource)
        namespace = (obj.get("metadata") or {}).get("namespace") or (
            "default" if res.namespaced else ""
        )
        prepared = objects.prepare_create(res, dict(obj), namespace, _MANAGER, when=self._now())
        return self.state.create(res, prepared, silent=True)

    def silent_update(
        self, resource: str | ResourceType, key: str, patch: Mapping[str, Any]
    ) -> StoredObject:
        """Merge-patch ``key`` without a watch event."""
        return self.update(resource, key, patch, silent=True)

    def silent_delete(self, resource: str | ResourceType, key: str) -> StoredObject:
        """Delete ``key`` without a watch event."""
        return self.state.delete(find_resource(resource), key, silent=True)

    def silent_mutation(self, resource: str | ResourceType = PODS, count: int = 1) -> list[str]:
        """Touch ``count`` existing objects (first in key order) without watch events."""
        res = find_resource(resource)
        touched = []
        for key in self.state.sorted_keys(res)[:count]:
            self.silent_update(res, key, {"metadata": {"annotations": {"sim/silent": "1"}}})
            touched.append(key)
        return touched

    # ------------------------------------------------------------ objects and load

    def create(self, resource: str | ResourceType, obj: Mapping[str, Any]) -> StoredObject:
        res = find_resource(resource)
        namespace = (obj.get("metadata") or {}).get("namespace") or (
            "default" if res.namespaced else ""
        )
        prepared = objects.prepare_create(res, dict(obj), namespace, _MANAGER, when=self._now())
        return self.state.create(res, prepared)

    def update(
        self,
        resource: str | ResourceType,
        key: str,
        patch: Mapping[str, Any],
        *,
        silent: bool = False,
    ) -> StoredObject:
        """Apply a JSON merge patch to ``key``."""
        res = find_resource(resource)
        return self.state.update(
            res,
            key,
            lambda old: objects.prepare_update(
                res, old, objects.apply_merge_patch(old, dict(patch)), _MANAGER, when=self._now()
            ),
            silent=silent,
        )

    def delete(self, resource: str | ResourceType, key: str) -> StoredObject:
        return self.state.delete(find_resource(resource), key)

    def get(self, resource: str | ResourceType, key: str) -> dict[str, Any]:
        return self.state.get(find_resource(resource), key).decode()

    def populate(self, resource: str | ResourceType = PODS, count: int = 100, seed: int = 0) -> int:
        """Create ``count`` realistic objects, deterministically from ``seed``."""
        return populate(
            self.state, find_resource(resource), count, seed=seed,
            namespaces=self.settings.namespaces,
        )  # fmt: skip

    def churn(self, rate: float, seconds: float, **options: Unpack[ChurnOptions]) -> ChurnStats:
        """Create/update/delete at ``rate`` events/s for ``seconds`` in this thread
        (``options``: :class:`ChurnOptions`)."""
        return self._churn(find_resource(options.get("resource", PODS)), rate, seconds, options)

    def start_churn(
        self, rate: float, seconds: float, **options: Unpack[ChurnOptions]
    ) -> ChurnHandle:
        """Like :meth:`churn` in a background thread (stopped by :meth:`stop`)."""
        res = find_resource(options.get("resource", PODS))
        stop = threading.Event()
        holder: list[ChurnHandle] = []

        def run() -> None:
            handle = holder[0]
            try:
                handle.stats = self._churn(res, rate, seconds, options, stop)
            except BaseException as exc:  # reported through the handle, never lost
                handle.error = exc

        thread = threading.Thread(target=run, name="apiserver-sim-churn", daemon=True)
        handle = ChurnHandle(thread, stop)
        holder.append(handle)
        with self._lock:
            self._churns = [c for c in self._churns if c.running]
            self._churns.append(handle)
        thread.start()
        return handle

    def _churn(
        self,
        resource: ResourceType,
        rate: float,
        seconds: float,
        options: ChurnOptions,
        stop: threading.Event | None = None,
    ) -> ChurnStats:
        return churn(
            self.state, resource, rate=rate, seconds=seconds, seed=options.get("seed", 0),
            mix=options.get("mix"), namespaces=self.settings.namespaces,
            max_events=options.get("max_events"), stop=stop, stamp=options.get("stamp", False),
        )  # fmt: skip

    def ground_truth(self, resource: str | ResourceType = PODS) -> dict[str, str]:
        """``{key: resourceVersion}`` of every live object of ``resource``."""
        return self.state.ground_truth(find_resource(resource))

    # ------------------------------------------------------------ /_sim/ control

    def _control(
        self, method: str, action: str, body: dict[str, Any], query: dict[str, str]
    ) -> tuple[int, Any]:
        try:
            return self._control_action(method, action, {**query, **body})
        except (KeyError, ValueError, TypeError) as exc:
            raise bad_request(f"/_sim/{action}: {exc}") from None

    def _control_read(self, action: str, args: dict[str, Any]) -> tuple[int, Any] | None:
        """The GET actions (``None``: not one of them)."""
        rv = self.state.resource_version
        if action in ("stats", "faults", ""):
            snap = self.faults.snapshot()
            return 200, {
                "resourceVersion": str(rv),
                "compactedResourceVersion": str(self.state.compacted_rv),
                "historyEvents": self.state.history_size,
                "activeWatches": self.state.active_watches,
                "connections": self.front.connections,
                "conflicts": self.front.conflicts.total(),
                "faults": snap.__dict__,
            }
        if action == "conflicts":
            table = self.conflicts()
            return 200, {"conflicts": table, "total": total_conflicts(table)}
        if action == "ground-truth":
            res = args.get("resource", "pods")
            return 200, {"resourceVersion": str(rv), "objects": self.ground_truth(res)}
        return None

    def _control_action(  # noqa: C901 - a flat table of control actions
        self, method: str, action: str, args: dict[str, Any]
    ) -> tuple[int, Any]:
        if method == "GET":
            answer = self._control_read(action, args)
            if answer is not None:
                return answer
        if method != "POST":
            raise ApiError(405, "MethodNotAllowed", f"use POST for /_sim/{action}")
        if action == "drop-watches":
            return 200, {"dropped": self.drop_watches()}
        if action == "stall-watches":
            self.stall_watches(float(args["seconds"]))
            return 200, {"stalled": float(args["seconds"])}
        if action == "compact":
            target = args.get("resourceVersion")
            return 200, {"compacted": str(self.compact(int(target) if target else None))}
        if action == "silent-mutation":
            return 200, {"touched": self.silent_mutation(args.get("resource", "pods"),
                                                         int(args.get("count", 1)))}  # fmt: skip
        if action == "silent-create":
            return 200, {
                "resourceVersion": str(self.silent_create(args["resource"], args["object"]).rv)
            }
        if action == "silent-update":
            obj = self.silent_update(args["resource"], args["key"], args["patch"])
            return 200, {"resourceVersion": str(obj.rv)}
        if action == "silent-delete":
            return 200, {
                "resourceVersion": str(self.silent_delete(args["resource"], args["key"]).rv)
            }
        if action == "restart":
            downtime = float(args.get("downtime", 0.0))
            # The 202 goes out before the cut: the helper waits for the reply to be sent. It is
            # started here, not from the reply's callback, so that stop() never meets a thread
            # that has not started yet (join() would raise) or that starts after it returned.
            replied = threading.Event()

            def restart_after_reply() -> None:
                replied.wait(10)
                if not self._stopping.is_set():
                    self.restart(downtime)

            helper = threading.Thread(target=restart_after_reply, name="apiserver-sim-restart",
                                      daemon=True)  # fmt: skip
            with self._lock:
                self._helpers.append((helper, replied))
            helper.start()
            self.front.after_response(replied.set)
            return 202, {"restarting": True, "downtime": downtime}
        if action == "malformed":
            self.inject_malformed_lines(
                int(args.get("count", 1)),
                str(args.get("kind", "truncated")),
                after_first_line=bool(args.get("afterFirstLine")),
            )
            return 200, {"pending": self.faults.snapshot().malformed_pending}
        if action == "fail-next":
            self.fail_next(int(args["count"]), int(args.get("status", 500)),
                           int(args.get("retryAfter", 1)))  # fmt: skip
            return 200, {"armed": int(args["count"])}
        if action == "slow":
            self.slow_responses(float(args["seconds"]))
            return 200, {"slow": float(args["seconds"])}
        if action == "reset-conflicts":
            table = self.reset_conflicts()
            return 200, {"conflicts": table, "total": total_conflicts(table)}
        if action == "reset-faults":
            self.faults.reset()
            return 200, {"reset": True}
        if action == "populate":
            created = self.populate(args.get("resource", "pods"), int(args["count"]),
                                    int(args.get("seed", 0)))  # fmt: skip
            return 200, {"created": created, "resourceVersion": str(self.state.resource_version)}
        if action == "churn":
            kwargs = {
                "rate": float(args["rate"]), "seconds": float(args.get("seconds", 10.0)),
                "seed": int(args.get("seed", 0)), "mix": args.get("mix"),
                "resource": args.get("resource", "pods"),
                "max_events": int(args["maxEvents"]) if args.get("maxEvents") else None,
                "stamp": bool(args.get("stamp", False)),
            }  # fmt: skip
            if args.get("wait"):
                return 200, self.churn(**kwargs).as_dict()
            self.start_churn(**kwargs)
            return 202, {"started": True}
        if action == "stop-churn":
            with self._lock:
                churns = list(self._churns)
            stats = [c.stop() for c in churns]
            return 200, {"stopped": [s.as_dict() for s in stats if s is not None]}
        if action == "history":
            self.state.set_history_limits(
                int(args["maxEvents"]) if "maxEvents" in args else None,
                float(args["maxAge"]) if "maxAge" in args else None,
            )
            return 200, {"historyEvents": self.state.history_size}
        raise ApiError(404, "NotFound", f"unknown control action {action!r}")
