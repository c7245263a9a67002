"""A group's view of its resource: which objects it keeps, and what of each.

A processor group may select objects (``--namespace``, ``--label-selector``,
``--field-selector``) and project them (``--project``). The view is applied before the store,
so the group's caches, listers and handlers only ever hold what it selected, and the handlers
see what a selector-filtered client-go informer sees:

* an object that starts matching arrives as an add (the store does not hold it yet);
* an object that stops matching arrives as a deletion carrying its **last matching state**
  (what the store held, already projected), never the state that no longer matches;
* a deletion arrives only for an object the store holds; its tombstone flag is kept (an
  inferred deletion stays a ``DeletedFinalStateUnknown``);
* a takeover's snapshot goes through the same selection, so an initial list holds exactly the
  selected objects.

**Cost.** Deciding "not mine" reads only the entry's header (:func:`common.wire.decode_header`:
key, namespace, labels and the resource's selectable fields), so an entry outside the view
costs a header parse and a store lookup, not an object parse. The object is parsed only for
entries the group keeps (or for a v1 entry, whose header is the whole document).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple, Protocol

from common.deltas import Delta, DeltaType
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.projection import Projection
from common.selectable_fields import field_values, supported_fields
from common.selectors import FieldSelector, LabelSelector
from common.wire import EntryHeader, Move, decode_header, decode_object

__all__ = ["GroupView", "HeldObjects", "Routed"]

_NAME: Final = "metadata.name"
_NAMESPACE: Final = "metadata.namespace"


class HeldObjects(Protocol):
    """What the view asks of the group's store: the object it holds for a key, if any (a
    shard worker's :class:`~processor_svc.shard_store.ShardStore` is one)."""

    def get_by_key(self, key: str) -> Obj | None: ...


class Routed(NamedTuple):
    """What one stream entry means to the group: the delta to apply (``None``: outside the
    view, acknowledge it and move on), and what the worker counts it by. A named tuple: one
    is built per entry (the cheapest record to construct)."""

    delta: Delta | None
    key: str
    type: DeltaType
    observed_at: float
    packed_as_is: bool
    """``delta`` carries the entry's object unchanged (a store that keeps entries may keep
    these bytes); ``False`` once it was projected or replaced by the stored state."""
    move: Move | None = None
    """The entry is half of a move between shards (:class:`common.wire.Move`)."""


class GroupView:
    """One group's selection and projection of ``resource`` (module docstring).

    Built from texts in Kubernetes syntax; raises ``ValueError`` (a
    :class:`~common.selectors.SelectorError` or
    :class:`~common.projection.ProjectionError`) naming the mistake.
    """

    def __init__(
        self,
        resource: str,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        project: str = "full",
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.labels = LabelSelector.parse(label_selector)
        self.fields = FieldSelector.parse(
            field_selector, supported_fields(resource), resource=resource
        )
        self.projection = Projection.parse(project)
        self.selects_everything: Final = not namespace and self.labels.empty and self.fields.empty
        """No selection: every object is kept (a projection may still apply)."""
        self.is_identity: Final = self.selects_everything and self.projection.is_full
        """Neither selection nor projection: the worker skips the view altogether."""
        self._reads_fields = not self.fields.empty
        self._reads_identity = bool(self.fields.fields & {_NAME, _NAMESPACE})

    def __str__(self) -> str:
        parts = []
        if self.namespace:
            parts.append(f"namespace={self.namespace}")
        if not self.labels.empty:
            parts.append(f"labels={self.labels}")
        if not self.fields.empty:
            parts.append(f"fields={self.fields}")
        if not self.projection.is_full:
            parts.append(f"project={self.projection}")
        return ", ".join(parts) or "everything"

    # --- selection -------------------------------------------------------------------------

    def selects_header(self, header: EntryHeader) -> bool | None:
        """Whether the entry's object is selected, from its header alone; ``None`` when the
        header cannot tell (a field the header does not carry: the object must be read)."""
        if self.namespace and header.namespace != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(header.labels):
            return False
        if not self._reads_fields:
            return True
        values: Mapping[str, str] = header.fields
        if self._reads_identity:  # the header's key says those: only then a dict per entry
            values = {**values, _NAME: header.key.rpartition("/")[2], _NAMESPACE: header.namespace}
        if not self.fields.fields <= values.keys():
            return None
        return self.fields.matches(values)

    def selects(self, obj: Obj) -> bool:
        """Whether ``obj`` (a whole object) is selected."""
        metadata = obj.get("metadata") or {}
        if self.namespace and metadata.get("namespace", "") != self.namespace:
            return False
        if not self.labels.empty and not self.labels.matches(metadata.get("labels") or {}):
            return False
        if not self._reads_fields:
            return True
        return self.fields.matches(field_values(self.resource, obj))

    def project(self, obj: Obj) -> Obj:
        """``obj`` as the group keeps it."""
        return obj if self.projection.is_full else self.projection.apply(obj)

    # --- one stream entry ------------------------------------------------------------------

    def route(self, data: bytes, store: HeldObjects, max_bytes: int) -> Routed:
        """What the entry ``data`` means for the group whose store is ``store``.

        The store is asked about the key only when the answer matters (an entry outside the
        view, a deletion): an entry the group keeps goes to ``process_deltas``, whose update
        finds the old object anyway. Raises :class:`~common.wire.WireDecodeError` for an entry
        that cannot be decoded (a poison entry: the caller parks it).
        """
        header = decode_header(data, max_bytes)
        key, delta_type, observed_at = header.key, header.type, header.observed_at
        if delta_type is DeltaType.DELETED:
            held = store.get_by_key(key)
            if held is None:
                return Routed(None, key, delta_type, observed_at, False)
            last: Obj = held  # the last matching state, as the store holds it (projected)
            final = self.selected_object(header, data) if header.has_object else None
            if final is not None:
                last = self.project(final)
            gone: Obj | DeletedFinalStateUnknown = (
                DeletedFinalStateUnknown(key, last) if header.tombstone else last
            )
            return Routed(Delta(delta_type, gone), key, delta_type, observed_at, False)
        obj = self.selected_object(header, data)
        if obj is None:
            held = store.get_by_key(key)
            if held is None:
                return Routed(None, key, delta_type, observed_at, False)
            # It stopped matching: a deletion of what the group last had.
            deleted = DeltaType.DELETED
            return Routed(Delta(deleted, held), key, deleted, observed_at, False)
        kept = self.project(obj)
        return Routed(
            Delta(delta_type, kept), key, delta_type, observed_at, kept is obj, header.move
        )

    def selected_object(self, header: EntryHeader, data: bytes) -> Obj | None:
        """The entry's object if the view selects it, else ``None``; parsed only when the
        header says it may be selected."""
        selected = self.selects_header(header)
        if selected is False:
            return None
        obj = decode_object(data, header)
        if obj is None or (selected is None and not self.selects(obj)):
            return None
        return obj
