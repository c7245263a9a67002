"""An in-memory, fault-injecting ListerWatcher and DeltaSink (client-go's
``fake_controller_source``), so Reflector logic is tested without a socket.

:class:`FakeSource` keeps objects and an event history at increasing resourceVersions; LISTs
page through the current state (the continue token pins the RV it was taken at), and each
WATCH follows a *plan*: batches of events, faults (any exception, e.g. a 410
:class:`~reflector_svc.api_errors.ResourceExpiredError` or a bad line's
:class:`~reflector_svc.api_errors.MalformedWatchEventError`), then either a close or a hold
until the reflector closes it. Without a plan a watch sends the history after its RV and holds.

:class:`FakeSink` keeps what a shard set keeps (versions, last objects, one checkpoint) with
the publish script's rules (:func:`common.deltas.publish_is_skipped`, which a test holds to
the Lua), and records every delta it published.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from common.deltas import DeltaType, publish_is_skipped
from common.object_keys import Obj, meta_namespace_key
from common.publication import ResourceLayout
from common.versions import compare_resource_versions
from reflector_svc.publish_records import (
    FencedError,
    PendingDelta,
    PublishResult,
    ResumePoint,
    ShardPublishResult,
)
from reflector_svc.watch_events import ListPage, WatchEvent

__all__ = ["CLOSE", "HOLD", "FakeSink", "FakeSource", "FakeWatch", "WatchStep", "pod"]

CLOSE: Final = "close"
"""A plan step: the server ends the watch (as at ``timeoutSeconds``)."""
HOLD: Final = "hold"
"""A plan step: send nothing more until the reflector closes the watch."""

WatchStep = list[WatchEvent] | BaseException | str
"""One step of a watch plan: a batch (one network read), a fault raised, CLOSE or HOLD."""


def pod(name: str, rv: int | str, namespace: str = "ns", **extra: Any) -> Obj:
    """A minimal Pod at resourceVersion ``rv``."""
    meta = {"name": name, "namespace": namespace, "resourceVersion": str(rv), "uid": f"u-{name}"}
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, **extra}


class FakeWatch:
    """One watch: its plan's steps, in order, as :meth:`batches`."""

    more_waiting = False
    """Never: every step is a batch of its own."""

    def __init__(self, steps: Sequence[WatchStep]) -> None:
        self._steps = list(steps)
        self._closed = threading.Event()

    def batches(self) -> Iterator[list[WatchEvent]]:
        for step in self._steps:
            if self._closed.is_set() or step == CLOSE:
                return
            if step == HOLD:
                break
            if isinstance(step, BaseException):
                raise step
            if isinstance(step, list):
                yield step
        self._closed.wait()

    def close(self) -> None:
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __enter__(self) -> FakeWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class FakeSource:
    """Objects, their history, and scripted faults, behind the ListerWatcher protocol.

    Thread-safe enough for one reflector thread and one test thread. ``lists`` and
    ``watches`` record every call's arguments; ``list_faults`` are raised by the next LIST
    calls (one each), ``watch_plans`` followed by the next watches (one each).
    """

    def __init__(self, objects: Iterable[Obj] = (), *, rv: int = 1) -> None:
        self.rv = rv
        self.objects: dict[str, Obj] = {}
        self.history: list[tuple[int, WatchEvent]] = []
        self.lists: list[dict[str, Any]] = []
        self.watches: list[dict[str, Any]] = []
        self.open_watches: list[FakeWatch] = []
        self.list_faults: collections.deque[BaseException] = collections.deque()
        self.watch_plans: collections.deque[list[WatchStep]] = collections.deque()
        self._lock = threading.Lock()
        for obj in objects:
            self.objects[meta_namespace_key(obj)] = obj

    # --- changing the state -----------------------------------------------------------------

    def apply(self, event_type: str, name: str, namespace: str = "ns") -> WatchEvent:
        """ADDED, MODIFIED or DELETED ``namespace/name`` at the next RV; returns its event."""
        with self._lock:
            self.rv += 1
            key = f"{namespace}/{name}"
            obj = pod(name, self.rv, namespace)
            if event_type == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            event = WatchEvent(event_type, obj)
            self.history.append((self.rv, event))
            return event

    def bookmark(self, rv: int | None = None) -> WatchEvent:
        """A BOOKMARK at ``rv`` (default: the current RV)."""
        return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(rv or self.rv)}})

    # --- the ListerWatcher protocol ---------------------------------------------------------

    def list_page(
        self, *, resource_version: str | None, limit: int, continue_token: str | None, **_: object
    ) -> ListPage:
        self.lists.append(
            {"resource_version": resource_version, "limit": limit, "continue": continue_token}
        )
        if self.list_faults:
            raise self.list_faults.popleft()
        with self._lock:
            start, at = (0, self.rv)
            if continue_token:
                text_at, text_start = continue_token.split(":")
                start, at = int(text_start), int(text_at)
            keys = sorted(self.objects)
            end = len(keys) if limit <= 0 else start + limit
            items = [dict(self.objects[key]) for key in keys[start:end]]
            token = f"{at}:{end}" if end < len(keys) else None
            return ListPage(items, str(at), token, None)

    def watch(
        self, *, resource_version: str | None, send_initial_events: bool, **_: object
    ) -> FakeWatch:
        self.watches.append(
            {"resource_version": resource_version, "send_initial_events": send_initial_events}
        )
        if self.watch_plans:
            stream = FakeWatch(self.watch_plans.popleft())
        else:
            after = int(resource_version or 0)
            with self._lock:
                events = [event for rv, event in self.history if rv > after]
            stream = FakeWatch([events] if events else [])
        self.open_watches.append(stream)
        return stream


@dataclass
class FakeSink:
    """What the shards would hold, in one place, behind the DeltaSink protocol.

    ``publish_faults`` are raised by the next publishes (one each, nothing written).
    """

    versions: dict[str, str] = field(default_factory=dict)
    objects: dict[str, bytes] = field(default_factory=dict)
    checkpoint: str | None = None
    relisting: bool = False
    fence_epoch: int = 0
    synced_rv: str | None = None
    published: list[PendingDelta] = field(default_factory=list)
    publish_faults: collections.deque[BaseException] = field(default_factory=collections.deque)
    layout: ResourceLayout | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fence(self, epoch: int) -> None:
        self._check(epoch)

    def resume_point(self) -> ResumePoint:
        return ResumePoint(self.checkpoint, self.relisting or self.checkpoint is None)

    def publish(
        self, epoch: int, deltas: Sequence[PendingDelta], *, checkpoint_rv: str | None
    ) -> PublishResult:
        with self._lock:
            self._check(epoch)
            if self.publish_faults:
                raise self.publish_faults.popleft()
            replay_below = self.checkpoint if checkpoint_rv is not None else None
            stream_ids: list[str | None] = []
            by_type: collections.Counter[DeltaType] = collections.Counter()
            for delta in deltas:
                if self._skipped(delta, replay_below):
                    stream_ids.append(None)
                    continue
                self.published.append(delta)
                stream_ids.append(str(len(self.published)))
                by_type[delta.type] += 1
                if delta.type is DeltaType.DELETED:
                    self.versions.pop(delta.key, None)
                    self.objects.pop(delta.key, None)
                else:
                    self.versions[delta.key] = delta.resource_version
                    self.objects[delta.key] = delta.envelope
            if checkpoint_rv is not None:
                self._advance(checkpoint_rv)
            return PublishResult({0: ShardPublishResult(0, tuple(stream_ids))}, dict(by_type))

    def advance_checkpoints(self, epoch: int, rv: str) -> None:
        with self._lock:
            self._check(epoch)
            self._advance(rv)

    def known_versions(self) -> dict[str, str]:
        with self._lock:
            return dict(self.versions)

    def last_objects(self, keys: Iterable[str]) -> dict[str, bytes]:
        with self._lock:
            return {key: self.objects[key] for key in keys if key in self.objects}

    def begin_relist(self, epoch: int) -> None:
        self._check(epoch)
        self.relisting = True

    tracks_placement = False  # one shard: nothing is ever elsewhere

    def misplaced(self, key: str, shard_key: str | None) -> bool:
        return False

    def recorded_layout(self) -> ResourceLayout | None:
        return self.layout

    def record_layout(self, layout: ResourceLayout) -> None:
        self.layout = layout

    def finish_relist(self, epoch: int, list_rv: str) -> None:
        self._check(epoch)
        self.checkpoint = self.synced_rv = list_rv
        self.relisting = False

    # --- what a test asks -------------------------------------------------------------------

    def history(self) -> list[tuple[str, str, str]]:
        """``(type, key, rv)`` of every published delta, in order."""
        return [(d.type.value, d.key, d.resource_version) for d in self.published]

    def _check(self, epoch: int) -> None:
        if epoch < self.fence_epoch:
            raise FencedError(0, epoch, self.fence_epoch)
        self.fence_epoch = epoch

    def _advance(self, rv: str) -> None:
        if self.checkpoint is None or compare_resource_versions(rv, self.checkpoint) == 1:
            self.checkpoint = rv

    def _skipped(self, delta: PendingDelta, replay_below: str | None) -> bool:
        known = self.versions.get(delta.key)
        return publish_is_skipped(
            delta.type, delta.resource_version, known, replay_below=replay_below
        )
