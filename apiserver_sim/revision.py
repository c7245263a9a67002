"""One revision of one object as the simulated etcd keeps it: its serialised bytes plus the few
fields selectors and keys need, and how the next revision is built from it.

``raw`` is laid out like the apiserver's output (``kind``, ``apiVersion``, ``metadata``, then the
rest) and the revision remembers where ``metadata`` sits in it, so LIST pages and watch events are
built by concatenating bytes, never re-encoding, and a metadata-only change (the churn
generator's updates, a delete's final state) decodes and re-encodes ~1 KB, not the whole object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from apiserver_sim.resources import ResourceType
from apiserver_sim.selectors import FieldSelector, LabelSelector

__all__ = [
    "KEEP",
    "Event",
    "StoredObject",
    "encode_object",
    "encode_revision",
    "rv_of",
    "splice_revision",
]


@dataclass(slots=True, eq=False)
class StoredObject:
    """One revision of one object: its bytes plus what selectors and keys need, and the watch
    event that wrote it (the log and the per-key revision lists share these objects, so a
    change costs one tracked object). A ``DELETED`` revision is a tombstone carrying the
    object's final state; ``silent`` revisions are history for snapshots but never sent.

    Treat it as immutable: only the store clears ``prev`` when the revision leaves the log.
    """

    key: str
    namespace: str
    name: str
    uid: str
    rv: int
    raw: bytes
    labels: Mapping[str, str]
    fields: Mapping[str, str]
    meta_start: int
    """``raw[meta_start:meta_end]`` is the serialised ``metadata`` (``meta_end`` 0: unknown)."""
    meta_end: int
    status_start: int
    """``raw[status_start:-1]`` is the serialised ``status`` (0: none or unknown)."""
    resource: ResourceType
    type: str
    """``ADDED``, ``MODIFIED`` or ``DELETED``: the watch event type of this revision."""
    ts: float
    """When it was written (the store's clock; compaction by age reads it)."""
    prev: StoredObject | None = None
    """The revision this one replaced, while this one is in the event log (then ``None``)."""
    silent: bool = False

    def decode(self) -> dict[str, Any]:
        """A fresh dict (callers may mutate it)."""
        result: dict[str, Any] = orjson.loads(self.raw)
        return result

    def decode_metadata(self) -> dict[str, Any]:
        """A fresh dict of ``metadata`` alone (decodes only its bytes)."""
        if self.meta_end:
            result: dict[str, Any] = orjson.loads(self.raw[self.meta_start : self.meta_end])
            return result
        meta: dict[str, Any] = self.decode()["metadata"]
        return meta

    def decode_status(self) -> Any:
        """A fresh copy of ``status`` alone (``None`` without one)."""
        if self.status_start:
            return orjson.loads(self.raw[self.status_start : -1])
        return self.decode().get("status") if not self.meta_end else None

    def matches(self, labels: LabelSelector, fields: FieldSelector) -> bool:
        return (labels.empty or labels.matches(self.labels)) and (
            fields.empty or fields.matches(self.fields)
        )


Event = StoredObject
"""An entry of the event log is the revision it wrote."""


def rv_of(revision: StoredObject) -> int:
    return revision.rv


_LAYOUT_KEYS = frozenset(("kind", "apiVersion", "metadata", "status"))
KEEP: Any = object()  # "leave this member as it is" for splice_revision
_heads: dict[tuple[Any, Any], bytes] = {}


def _head(kind: Any, api_version: Any) -> bytes:
    head = _heads.get((kind, api_version))
    if head is None:
        parts = [b"{"]
        if kind is not None:
            parts.append(b'"kind":' + orjson.dumps(kind) + b",")
        if api_version is not None:
            parts.append(b'"apiVersion":' + orjson.dumps(api_version) + b",")
        parts.append(b'"metadata":')
        head = b"".join(parts)
        if len(_heads) < 256:
            _heads[(kind, api_version)] = head
    return head


def encode_object(obj: Mapping[str, Any]) -> tuple[bytes, tuple[int, int, int]]:
    """``obj`` as JSON laid out like the apiserver's output (``kind``, ``apiVersion``,
    ``metadata``, the other members in their order, ``status`` last) and that layout:
    ``(meta_start, meta_end, status_start)`` (see :class:`StoredObject`)."""
    head = _head(obj.get("kind"), obj.get("apiVersion"))
    meta_raw = orjson.dumps(obj["metadata"])
    parts = [head, meta_raw]
    rest = orjson.dumps({k: v for k, v in obj.items() if k not in _LAYOUT_KEYS})
    if len(rest) > 2:
        parts += (b",", rest[1:-1])
    status_start = 0
    if "status" in obj:
        parts.append(b',"status":')
        status_start = sum(map(len, parts))
        parts.append(orjson.dumps(obj["status"]))
    parts.append(b"}")
    start = len(head)
    return b"".join(parts), (start, start + len(meta_raw), status_start)


def _labels_of(metadata: Mapping[str, Any]) -> dict[str, str]:
    labels = metadata.get("labels")
    return dict(labels) if isinstance(labels, dict) else {}


def encode_revision(
    resource: ResourceType,
    key: str,
    obj: dict[str, Any],
    type_: str,
    *,
    rv: int,
    ts: float,
    prev: StoredObject | None,
    silent: bool,
) -> StoredObject:
    """Encode ``obj`` as revision ``rv`` (stamps its ``metadata.resourceVersion``)."""
    metadata = obj["metadata"]
    metadata["resourceVersion"] = str(rv)
    raw, layout = encode_object(obj)
    return StoredObject(
        key, metadata.get("namespace") or "", metadata["name"], metadata.get("uid") or "",
        rv, raw, _labels_of(metadata), resource.field_values(obj), *layout, resource,
        type_, ts, prev, silent,
    )  # fmt: skip


def splice_revision(
    old: StoredObject,
    metadata: dict[str, Any],
    status: Any,
    type_: str,
    *,
    rv: int,
    ts: float,
    silent: bool,
) -> StoredObject:
    """Revision ``rv``: ``old`` with new ``metadata`` (and ``status`` unless it is
    :data:`KEEP`) spliced into its bytes; identity and the other members are shared."""
    if (
        metadata.get("name") != old.name
        or (metadata.get("namespace") or "") != old.namespace
        or (metadata.get("uid") or "") != old.uid
    ):
        raise ValueError("an in-place update cannot rename, move or re-identify an object")
    metadata["resourceVersion"] = str(rv)
    fields = old.fields
    if status is not KEEP:
        fields = old.resource.refresh_fields(fields, "status", status)
    if not old.meta_end or (status is not KEEP and not old.status_start):
        obj = old.decode()  # no layout to splice into: re-encode once, whole
        obj["metadata"] = metadata
        if status is not KEEP:
            obj["status"] = status
        raw, layout = encode_object(obj)
    else:
        meta_raw = orjson.dumps(metadata)
        start, end, status_start = old.meta_start, old.meta_end, old.status_start
        view = memoryview(old.raw)
        shift = len(meta_raw) - (end - start)
        if status is KEEP:
            raw = b"".join((view[:start], meta_raw, view[end:]))
        else:
            raw = b"".join(
                (view[:start], meta_raw, view[end:status_start], orjson.dumps(status), b"}")
            )
        layout = (start, start + len(meta_raw), status_start + shift if status_start else 0)
    labels = old.labels if metadata.get("labels") == old.labels else _labels_of(metadata)
    return StoredObject(
        old.key, old.namespace, old.name, old.uid, rv, raw, labels, fields,
        *layout, old.resource, type_, ts, old, silent,
    )  # fmt: skip
