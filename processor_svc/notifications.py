"""What a shard's reader hands the handlers: one notification per callback, collected per batch.

A notification is a handler call waiting to happen (``apply`` makes it); the reader collects
them while it applies a read batch (:class:`NotificationCollector`, the ``process_deltas``
handler) and hands the whole batch to the dispatcher at once. :class:`KeyNotification`
(``processor_svc.key_events``) is the one that carries no object.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from common.handlers import ResourceEventHandler
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from processor_svc.ack_tracker import AckToken
from processor_svc.async_dispatch import AsyncResourceEventHandler
from processor_svc.key_events import KeyNotification

__all__ = [
    "AddNotification",
    "DeleteNotification",
    "KeyNotification",
    "Notification",
    "NotificationCollector",
    "NotificationSink",
    "UpdateNotification",
]


AnyHandler: TypeAlias = ResourceEventHandler | AsyncResourceEventHandler
"""A handler a notification can be applied to: an async one's call returns its coroutine."""


def _key_of(obj: Obj | DeletedFinalStateUnknown) -> str:
    """The object's cache key for a log line; never raises (it runs while reporting an error)."""
    try:
        return meta_namespace_key(obj)
    except Exception:
        return "<no key>"


@dataclass(slots=True)
class AddNotification:
    """``on_add(obj, is_in_initial_list)``."""

    obj: Obj
    is_in_initial_list: bool

    def apply(self, handler: AnyHandler) -> object:
        return handler.on_add(self.obj, self.is_in_initial_list)

    def object_key(self) -> str:
        return _key_of(self.obj)

    def describe(self) -> str:
        return f"add of {_key_of(self.obj)}"


@dataclass(slots=True)
class UpdateNotification:
    """``on_update(old, new)``; ``old is new`` for a resync."""

    old: Obj
    new: Obj

    def apply(self, handler: AnyHandler) -> object:
        return handler.on_update(self.old, self.new)

    def object_key(self) -> str:
        return _key_of(self.new)

    def describe(self) -> str:
        return f"update of {_key_of(self.new)}"


@dataclass(slots=True)
class DeleteNotification:
    """``on_delete(obj)``: the final state, or a tombstone for an inferred deletion."""

    obj: Obj | DeletedFinalStateUnknown

    def apply(self, handler: AnyHandler) -> object:
        return handler.on_delete(self.obj)

    def object_key(self) -> str:
        return _key_of(self.obj)

    def describe(self) -> str:
        return f"delete of {_key_of(self.obj)}"


Notification: TypeAlias = (
    AddNotification | UpdateNotification | DeleteNotification | KeyNotification
)
"""What :meth:`~processor_svc.dispatch.HandlerDispatcher.deliver` takes."""


class NotificationSink(Protocol):
    """Where collected notifications go (a :class:`~processor_svc.dispatch.HandlerDispatcher`)."""

    def deliver_all(
        self,
        notifications: Sequence[tuple[Notification, AckToken | None]],
        *,
        cancel: threading.Event | None = None,
    ) -> bool: ...


class NotificationCollector:
    """The ``process_deltas`` handler of a shard's reader: collects each callback as a
    notification carrying the current entry's token; :meth:`flush` hands a whole read batch to
    the sink at once (one hand-off per batch, not per notification)."""

    __slots__ = ("_cancel", "_sink", "pending", "token")

    def __init__(self, sink: NotificationSink, cancel: threading.Event) -> None:
        self._sink = sink
        self._cancel = cancel
        self.token: AckToken | None = None
        self.pending: list[tuple[Notification, AckToken | None]] = []

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self.pending.append((AddNotification(obj, is_in_initial_list), self.token))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.pending.append((UpdateNotification(old, new), self.token))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        self.pending.append((DeleteNotification(obj), self.token))

    def flush(self) -> bool:
        """Deliver what was collected; ``False`` when the shard stopped while waiting for room
        (the collected entries' tokens then never complete)."""
        pending, self.pending = self.pending, []
        return self._sink.deliver_all(pending, cancel=self._cancel)
