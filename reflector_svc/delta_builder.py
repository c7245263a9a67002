"""From API objects to publishable deltas: transform, check, envelope, encode.

Everything the reflector publishes passes here, once: a watch event or a listed object is
transformed (:mod:`reflector_svc.transform`), checked (a usable name, the resource's kind),
wrapped in its :class:`~common.wire.DeltaEnvelope` and encoded within the size limit. What is
unusable is counted (``bad_input{reason}``), logged and skipped, never published and never an
error of the ListAndWatch loop: one bad object must not stop a resource.

Per watch event the cache key is computed exactly once, by
:meth:`~common.wire.DeltaEnvelope.of_object`, and read back from the envelope; so is the shard
key (:mod:`common.shard_routing`), here, and carried to the publisher on the
:class:`~reflector_svc.publish_records.PendingDelta`. A resource sharded by its objects' keys
(the default) computes nothing more: its key is its shard key. A ``label:NAME`` shard key that
falls back to the object's own key (the object lacks the label) is counted
(``shard_key_fallbacks{reason}``) and logged at most once a minute, never refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Final

from prometheus_client import Counter

from common.deltas import Delta, DeltaType
from common.object_keys import InvalidKeyError, Obj, meta_namespace_key
from common.rate_limiters import MonotonicClock
from common.selectable_fields import header_fields
from common.shard_routing import ShardKeyChoice
from common.throttled_log import ThrottledLog
from common.wire import DeltaEnvelope, encode_envelope
from reflector_svc.publish_records import PendingDelta
from reflector_svc.transform import Transform
from reflector_svc.watch_events import WatchEvent

__all__ = ["DeltaBuilder"]

log = logging.getLogger(__name__)

_EVENT_TYPES: Final = {
    "ADDED": DeltaType.ADDED,
    "MODIFIED": DeltaType.UPDATED,
    "DELETED": DeltaType.DELETED,
}
_BY_KEY: Final = ShardKeyChoice()
FALLBACK_LOG_INTERVAL: Final = 60.0
"""Seconds between two log lines about objects sharded by a fallback (the counter counts all)."""


class ShardKeyFallback(LookupError):
    """An object lacks what its resource is sharded by and is sharded by its own key (logged
    through :class:`~common.throttled_log.ThrottledLog`, which logs failures as exceptions)."""


@dataclass(frozen=True, slots=True)
class DeltaBuilder:
    """Builds one resource's deltas."""

    resource: str
    kind: str
    """The resource's object kind: a watch event of another kind is bad input (1.9)."""
    transform: Transform | None
    max_object_bytes: int
    """Envelopes larger than this are skipped as ``oversized``."""
    bad_inputs: Counter
    """The ``bad_input`` counter (labels ``resource``, ``reason``)."""
    wall_clock: Callable[[], float] = time.time
    """When a change was observed (the envelope's ``observed_at``)."""
    shard_key: ShardKeyChoice = _BY_KEY
    """What the resource's objects are sharded by."""
    fallbacks: Counter | None = None
    """The ``shard_key_fallbacks`` counter (labels ``resource``, ``reason``)."""
    _fallback_log: ThrottledLog = field(
        default_factory=lambda: ThrottledLog(log, MonotonicClock(), FALLBACK_LOG_INTERVAL)
    )
    _by_key: bool = field(init=False)
    """``shard_key.by_object_key``, read once per event."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_key", self.shard_key.by_object_key)

    def prepared(self, items: Iterable[Obj]) -> Iterator[Obj]:
        """Objects transformed and checked; unusable ones are logged, counted and skipped."""
        for obj in items:
            prepared = self.prepare(obj)
            if prepared is not None:
                yield prepared

    def prepare(self, obj: Obj) -> Obj | None:
        """A listed object transformed, and checked to have a key (the diff keys it again)."""
        obj_or_none = self._transformed(obj)
        if obj_or_none is None:
            return None
        try:
            meta_namespace_key(obj_or_none)
        except InvalidKeyError as exc:
            self.bad_input("no_name", str(exc))
            return None
        return obj_or_none

    def _transformed(self, obj: Obj) -> Obj | None:
        if self.transform is None:
            return obj
        try:
            return self.transform(obj)
        except Exception as exc:  # a user transform that raises must not stop the resource
            self.bad_input("transform_failed", f"{type(exc).__name__}: {exc}")
            return None

    def bad_input(self, reason: str, detail: str) -> None:
        """Count and log an input skipped for ``reason`` (a fixed label: a metric label)."""
        self.bad_inputs.labels(resource=self.resource, reason=reason).inc()
        log.warning("%s: skipped bad input (%s): %s", self.resource, reason, detail)

    def event_delta(self, event: WatchEvent) -> PendingDelta | None:
        """The delta of an ADDED, MODIFIED or DELETED event, or ``None`` when it is unusable
        (counted); the cache key is computed once, by the envelope."""
        delta_type = _EVENT_TYPES.get(event.type)
        if delta_type is None:
            self.bad_input("unknown_event_type", event.type)
            return None
        kind = event.obj.get("kind")
        if kind is not None and kind != self.kind:
            self.bad_input("wrong_kind", f"expected {self.kind}, got {kind}")  # 1.9
            return None
        obj = self._transformed(event.obj)
        if obj is None:
            return None
        try:
            envelope = DeltaEnvelope.of_object(delta_type, obj, observed_at=self.wall_clock())
        except InvalidKeyError as exc:
            self.bad_input("no_name", str(exc))
            return None
        if self._by_key:
            return self._encoded(envelope, None)
        return self._encoded(envelope, self.shard_key_of(obj, envelope.key))

    def pending(
        self, delta: Delta, shard_key: str | EllipsisType | None = ...
    ) -> PendingDelta | None:
        """A relist's delta (tombstones included), encoded; ``None`` when oversized.

        ``shard_key``: the object's, when the caller computed it already (a relist asks
        :meth:`shard_key_of` about an unchanged object to know whether it moved). A tombstone
        without its last object is sharded by its key (it goes where the key is anyway)."""
        envelope = DeltaEnvelope.from_delta(delta, observed_at=self.wall_clock())
        if shard_key is ...:
            obj = envelope.obj
            shard_key = None if obj is None else self.shard_key_of(obj, envelope.key)
        return self._encoded(envelope, shard_key)

    def shard_key_of(self, obj: Obj, key: str) -> str | None:
        """What ``obj`` (cache key ``key``) is sharded by; ``None`` when that is its key (the
        resource is sharded by key). A fallback is counted and logged, never refused."""
        if self._by_key:
            return None
        choice = self.shard_key
        text, fallback = choice.shard_key(obj, key)
        if fallback is not None:
            if self.fallbacks is not None:
                self.fallbacks.labels(resource=self.resource, reason=fallback).inc()
            self._fallback_log.failure(
                f"{self.resource}: sharded by its own key instead of {choice} ({fallback})",
                ShardKeyFallback(key),
                {"resource": self.resource, "reason": fallback},
            )
        return text

    def _encoded(self, envelope: DeltaEnvelope, shard_key: str | None) -> PendingDelta | None:
        # The resource's selectable fields ride in the entry's header, so a processor group
        # with a field selector decides without parsing the object (common.wire).
        obj = envelope.obj
        fields = None if obj is None else header_fields(self.resource, obj)
        try:
            data = encode_envelope(envelope, fields=fields, max_bytes=self.max_object_bytes)
        except ValueError as exc:
            self.bad_input("oversized", str(exc))
            return None
        return PendingDelta(envelope.type, envelope.key, envelope.resource_version, data, shard_key)
