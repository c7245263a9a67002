"""Turning log events into watch lines for one watcher: resource/namespace/selector filtering,
selector transitions (an object that stops matching is DELETED for this watcher, one that
starts matching is ADDED, as the apiserver's watch cache does) and BOOKMARK lines.

Lines are assembled from pre-serialised object bytes: ``{"type":T,"object":<raw>}\\n``.
"""

from __future__ import annotations

from collections.abc import Callable

from apiserver_sim.resources import ResourceType
from apiserver_sim.revision import Event, StoredObject, encode_object
from apiserver_sim.selectors import FieldSelector, LabelSelector
from apiserver_sim.status import ApiError

__all__ = ["INITIAL_EVENTS_END", "WatchEncoder", "error_line"]

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_PREFIX = {t: b'{"type":"' + t.encode() + b'","object":' for t in ("ADDED", "MODIFIED", "DELETED")}
_SUFFIX = b"}\n"


def error_line(error: ApiError) -> bytes:
    """A watch ERROR event carrying a Status (how a 410 reaches an open watch)."""
    return b'{"type":"ERROR","object":' + error.body() + _SUFFIX


class WatchEncoder:
    """Filters and encodes events for one watch request."""

    def __init__(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        transform: Callable[[bytes], bytes] | None = None,
    ) -> None:
        """``transform``: what an object's bytes become in an event (``kubectl get -w`` asks
        for each as a one-row Table)."""
        self.resource = resource
        self._transform = transform
        self.namespace = namespace or None
        self.labels = labels
        self.fields = fields
        self._filtered = not (labels.empty and fields.empty)
        self._bookmark_head = (
            b'{"type":"BOOKMARK","object":{"kind":"'
            + resource.kind.encode()
            + b'","apiVersion":"'
            + resource.api_version.encode()
            + b'","metadata":{"resourceVersion":"'
        )

    def initial(self, objs: list[StoredObject], out: list[bytes]) -> int:
        """Synthetic ADDED lines for the current state; returns the bytes appended."""
        size = 0
        prefix = _PREFIX["ADDED"]
        for obj in objs:
            raw = obj.raw if self._transform is None else self._transform(obj.raw)
            out.append(prefix)
            out.append(raw)
            out.append(_SUFFIX)
            size += len(raw) + 40
        return size

    def encode(self, events: list[Event], out: list[bytes]) -> int:
        """Append this watcher's lines for ``events``; returns how many events it sent."""
        sent = 0
        resource = self.resource
        namespace = self.namespace
        filtered = self._filtered
        for ev in events:
            if ev.silent or ev.resource is not resource:
                continue
            if namespace is not None and ev.namespace != namespace:
                continue
            type_ = ev.type
            raw = ev.raw
            if filtered:
                now_matches = ev.matches(self.labels, self.fields)
                if type_ == "MODIFIED":
                    prev = ev.prev  # read once: compaction clears it concurrently
                    before = prev is not None and prev.matches(self.labels, self.fields)
                    if now_matches and not before:
                        type_ = "ADDED"
                    elif prev is not None and before and not now_matches:
                        type_ = "DELETED"
                        raw = self._previous_at(prev, ev.rv)
                    elif not now_matches:
                        continue
                elif not now_matches:
                    continue
            out.append(_PREFIX[type_])
            out.append(raw if self._transform is None else self._transform(raw))
            out.append(_SUFFIX)
            sent += 1
        return sent

    @staticmethod
    def _previous_at(prev: StoredObject, rv: int) -> bytes:
        """The last state this watcher matched, stamped with the event's revision."""
        obj = prev.decode()
        obj["metadata"]["resourceVersion"] = str(rv)
        return encode_object(obj)[0]

    def bookmark(self, rv: int, initial_events_end: bool = False) -> bytes:
        """A BOOKMARK line: only ``kind``, ``apiVersion`` and ``metadata.resourceVersion``
        (plus the initial-events-end annotation that completes a watch-list)."""
        line = self._bookmark_head + str(rv).encode() + b'"'
        if initial_events_end:
            line += b',"annotations":{"' + INITIAL_EVENTS_END.encode() + b'":"true"}'
        return line + b"}}}\n"
