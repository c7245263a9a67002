"""Deltas as CloudEvents 1.0: the one place that decides every attribute.

``informer-bus subscribe --output cloudevents`` prints these events (structured mode, one JSON
object per line) and ``--sink URL`` POSTs them (:mod:`informer_bus.cloudevents_sink`); both use
:class:`EventMapper` so a line printed and a request sent for the same delta are the same event.

The attributes, and why (``docs/cloudevents.md`` has the table):

* ``type``: Knative ApiServerSource's ``dev.knative.apiserver.resource.add|update|delete``, so
  an existing Knative Trigger or receiver written for ApiServerSource takes our events as they
  are. A subscriber keeps no cache, so it cannot tell client-go's "update of a known object"
  from "add" for ``Replaced`` and ``Sync``: both say "this is the object's current state", which
  a receiver applies as an update (an upsert). ``Added`` (also every initial-list delta of a new
  durable group) is ``add``, ``Updated`` is ``update``, ``Deleted`` (tombstones included) is
  ``delete``.
* ``id``: deterministic, so a receiver that dedupes by ``(source, id)`` drops what an
  at-least-once redelivery (a restarted durable subscriber, a retried POST) sends again:
  ``UID/RESOURCEVERSION/SHORTTYPE`` (``.../add``). Two deltas that say the same thing about the
  same object at the same version (``Updated`` then ``Sync`` at one resourceVersion) share an
  id, and that is what a receiver wants: it already has that state. An object without a UID
  uses its key in that place. A tombstone whose last state was never known has neither UID
  nor resourceVersion: its id is ``KEY/tombstone/STREAM-ENTRY-ID``, the stream entry being the
  one thing that names it (entry IDs never change, so a replay gives the same id).
* ``source``: the API path of the object's collection, ``/api/v1/namespaces/NS/pods`` or
  ``/apis/apps/v1/namespaces/NS/deployments`` (``/api/v1/nodes`` when cluster-scoped): a
  URI-reference naming where the object lives, and with ``id`` unique per event as the spec
  wants. The version is the one the reflector records for the resource (its layout), else the
  object's ``apiVersion``; when neither is known (an old reflector and a tombstone without its
  object) the version segment is left out, which still names the collection.
* ``subject``: the object's key (``NS/NAME`` or ``NAME``), what a Trigger filters one object by.
* ``time``: when the reflector observed the change (the envelope's ``observedAt``), RFC 3339
  in UTC with microseconds, not when the event was sent: a replay keeps its time.
* ``datacontenttype`` ``application/json`` and ``data`` the object (a tombstone's last known
  state); a tombstone without it has no data and so no ``datacontenttype``.
* Extensions (lowercase alphanumeric, as the spec requires): ``ibtombstone`` (true, only on a
  deletion inferred by a relist, client-go's ``DeletedFinalStateUnknown``: the object may have
  been deleted at any time since its last state), ``ibinitial`` (true, only on a durable
  group's initial list: known state, not a change), ``ibstream`` and ``ibentryid`` (the shard
  stream and entry the delta was read from, to find it on the bus).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from common.deltas import DeltaType
from common.publication import ResourceLayout
from common.resource_ids import ResourceSpec
from informer_bus.subscription import SubscribedDelta

__all__ = [
    "CONTENT_TYPE_JSON",
    "CONTENT_TYPE_STRUCTURED",
    "SPECVERSION",
    "TYPE_PREFIX",
    "EventMapper",
    "event_id",
    "event_time",
    "event_type",
]

SPECVERSION: Final = "1.0"
TYPE_PREFIX: Final = "dev.knative.apiserver.resource."
CONTENT_TYPE_JSON: Final = "application/json"
CONTENT_TYPE_STRUCTURED: Final = "application/cloudevents+json"

_SHORT_TYPES: Final[Mapping[DeltaType, str]] = {
    DeltaType.ADDED: "add",
    DeltaType.UPDATED: "update",
    DeltaType.REPLACED: "update",
    DeltaType.SYNC: "update",
    DeltaType.DELETED: "delete",
}


def event_type(delta_type: DeltaType) -> str:
    """The ApiServerSource type of a delta type (see the module docstring for why)."""
    return TYPE_PREFIX + _SHORT_TYPES[delta_type]


def event_id(delta: SubscribedDelta) -> str:
    """The id every delivery of this delta carries (see the module docstring for the rule)."""
    env = delta.envelope
    short = _SHORT_TYPES[env.type]
    if not env.resource_version:
        return f"{env.key}/tombstone/{delta.entry_id}"
    return f"{env.uid or env.key}/{env.resource_version}/{short}"


def event_time(observed_at: float) -> str:
    """RFC 3339 in UTC (``2024-05-01T12:31:30.250000Z``)."""
    when = datetime.fromtimestamp(observed_at, UTC).isoformat(timespec="microseconds")
    return when.removesuffix("+00:00") + "Z"


class EventMapper:
    """Builds the events of one resource's deltas; knows the resource's API path once.

    ``resource``: the resource id (``pods``, ``deployments.apps``, ``pods@shop``).
    ``layout``: what the reflector recorded (its API version), or ``None`` when it recorded
    nothing; then each object's ``apiVersion`` is used.
    """

    def __init__(self, resource: str, layout: ResourceLayout | None) -> None:
        spec = ResourceSpec.parse(resource)
        self._plural = spec.plural
        self._group = spec.group
        self._version = _version_of(layout.api_version) if layout is not None else None
        self._sources: dict[tuple[str, str | None], str] = {}

    def source(self, delta: SubscribedDelta) -> str:
        """The API path of the object's collection (see the module docstring)."""
        version = self._version
        if version is None and delta.obj is not None:
            api_version = delta.obj.get("apiVersion")
            version = _version_of(api_version) if isinstance(api_version, str) else None
        namespace = delta.namespace
        cache_key = (namespace, version)
        cached = self._sources.get(cache_key)
        if cached is not None:
            return cached
        root = f"/apis/{self._group}" if self._group else "/api"
        if version:
            root += f"/{version}"
        path = (
            f"{root}/namespaces/{namespace}/{self._plural}"
            if namespace
            else (f"{root}/{self._plural}")
        )
        self._sources[cache_key] = path
        return path

    def attributes(self, delta: SubscribedDelta) -> dict[str, Any]:
        """Every context attribute, extensions included (no ``data``, no content type): the
        same for both HTTP modes and the printed line."""
        attributes: dict[str, Any] = {
            "specversion": SPECVERSION,
            "id": event_id(delta),
            "source": self.source(delta),
            "type": event_type(delta.type),
            "subject": delta.key,
            "time": event_time(delta.observed_at),
        }
        if delta.tombstone:
            attributes["ibtombstone"] = True
        if delta.initial:
            attributes["ibinitial"] = True
        attributes["ibstream"] = delta.stream
        attributes["ibentryid"] = delta.entry_id
        return attributes

    def structured(self, delta: SubscribedDelta) -> dict[str, Any]:
        """The event in structured mode's JSON format (what ``--output cloudevents`` prints)."""
        event = self.attributes(delta)
        if delta.obj is not None:
            event["datacontenttype"] = CONTENT_TYPE_JSON
            event["data"] = delta.obj
        return event


def _version_of(api_version: str) -> str | None:
    """``v1`` of ``apps/v1`` or ``v1``; ``None`` for an empty one."""
    version = api_version.rpartition("/")[2]
    return version or None
