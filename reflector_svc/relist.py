"""A relist: the resource's state listed, and only what differs from Redis published.

The fresh list is diffed against the known state in Redis (:func:`common.deltas.relist_diff`):
new keys are ``Added``, changed resourceVersions ``Updated``, vanished keys ``Deleted`` with a
tombstone carrying the last known object, and unchanged objects produce nothing -- unless
their shard is not the one that knows them (a new shard key), when they move. So a 410 or a
restart costs one LIST, not a storm of fake updates downstream. The list is a consistent
paginated LIST (client-go's pager), or the initial events of a watch-list; the reflector
decides which, at what resourceVersion, and marks the shards before and after.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from common.deltas import relist_diff
from common.object_keys import Obj
from common.versions import resource_version
from common.wire import WireDecodeError, decode_envelope
from reflector_svc.api_errors import (
    MalformedWatchEventError,
    ResourceExpiredError,
    TooLargeResourceVersionError,
)
from reflector_svc.delta_builder import DeltaBuilder
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.pager import ContinueExpiredError, follow_pages
from reflector_svc.publish_records import PendingDelta
from reflector_svc.watch_errors import RelistNeeded
from reflector_svc.watch_events import INITIAL_EVENTS_END, ListPage, WatchEvent

__all__ = ["Lister", "RelistSink", "Relister"]

# The reflector's lines keep the reflector's logger wherever they are written: operators
# filter its log by that name.
log = logging.getLogger("reflector_svc.reflector")


class Lister(Protocol):
    """The list's side of the reflector's view of the Kubernetes API
    (:class:`~reflector_svc.reflector.ListerWatcher`)."""

    def list_page(
        self,
        *,
        resource_version: str | None,
        limit: int,
        continue_token: str | None,
        timeout: float,
    ) -> ListPage: ...


class RelistSink(Protocol):
    """The diff's side of the reflector's view of Redis
    (:class:`~reflector_svc.reflector.DeltaSink`)."""

    def known_versions(self) -> dict[str, str]: ...

    def last_objects(self, keys: Iterable[str]) -> dict[str, bytes]: ...

    @property
    def tracks_placement(self) -> bool:
        """Objects may be on another shard than their state maps to (then a relist asks
        :meth:`misplaced` about every unchanged object)."""

    def misplaced(self, key: str, shard_key: str | None) -> bool: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Relister:
    """Lists one resource and publishes the diff, through the reflector's publishing thread."""

    resource: str
    source: Lister
    sink: RelistSink
    deltas: DeltaBuilder
    metrics: ReflectorMetrics
    page_size: int
    request_timeout: float
    batch_max: int
    publish: Callable[[list[PendingDelta]], None]
    """Hands a batch to the publishing thread (no checkpoint: a relist's checkpoint is its
    synced marker, which the reflector writes)."""
    flush: Callable[[], None]
    """Waits until Redis has everything handed over."""
    stopped: Callable[[], bool]
    """Whether the reflector is stopping."""
    refused: Callable[[], None]
    """Called when the resourceVersion asked for was refused and the latest state listed
    instead (the reflector asks for the latest until a list completes)."""

    def list_and_diff(self, known: Mapping[str, str], resource_version: str) -> tuple[str, int]:
        """Paginated LIST at ``resource_version``, diffed against ``known`` (1.4-1.7); returns
        the list's resourceVersion and how many changes were published."""
        first, requested_rv = self._first_page(resource_version)
        try:
            changes = self.publish_diff(
                self._all_pages(first), known, snapshot_rv=first.resource_version
            )
            return first.resource_version, changes
        except ContinueExpiredError:
            # 1.6: the continue token expired mid-list: one unpaginated LIST at the original RV,
            # diffed from scratch (what the first pages published stays valid: every publish
            # is idempotent per key, and the fresh diff sees it in the known state).
            self.metrics.expired.labels(resource=self.resource).inc()
            page = self._page(resource_version=requested_rv, continue_token=None, limit=0)
            self.flush()  # the fresh diff, and where keys are, see it all
            known = self.sink.known_versions()
            changes = self.publish_diff(
                self.deltas.prepared(page.items), known, snapshot_rv=page.resource_version
            )
            return page.resource_version, changes

    def _all_pages(self, first: ListPage) -> Iterator[Obj]:
        """Every object of a consistent paginated LIST, starting from its first page."""

        def next_page(token: str) -> ListPage:
            return self._page(resource_version=None, continue_token=token)

        for page in follow_pages(first, next_page, stopped=self.stopped):
            yield from self.deltas.prepared(page.items)

    def _first_page(self, resource_version: str) -> tuple[ListPage, str]:
        """The first page, and the resourceVersion it was finally asked at."""
        try:
            return self._page(resource_version=resource_version, continue_token=None), (
                resource_version
            )
        except (ResourceExpiredError, TooLargeResourceVersionError) as exc:
            # 1.7: the RV we asked for is gone (or not there yet): ask for the latest state.
            if resource_version == "":
                raise
            self.metrics.expired.labels(resource=self.resource).inc()
            log.info("%s: list at rv %r refused (%s); listing the latest", self.resource,
                     resource_version, exc)  # fmt: skip
            self.refused()
            return self._page(resource_version="", continue_token=None), ""

    def _page(
        self, *, resource_version: str | None, continue_token: str | None, limit: int | None = None
    ) -> ListPage:
        return self.source.list_page(
            resource_version=resource_version,
            limit=self.page_size if limit is None else limit,
            continue_token=continue_token,
            timeout=self.request_timeout,
        )

    def publish_diff(
        self, objects: Iterable[Obj], known: Mapping[str, str], *, snapshot_rv: str
    ) -> int:
        """Publish what ``objects``, the state at ``snapshot_rv``, changes in ``known``;
        returns how many deltas that was."""
        published = 0
        batch: list[PendingDelta] = []
        # The shard key of an unchanged object asked about (moved below), kept for its delta
        # when it moved: relist_diff yields that delta right after asking.
        asked: dict[str, str | None] = {}

        def moved(key: str, obj: Obj) -> bool:
            shard_key = self.deltas.shard_key_of(obj, key)
            if not self.sink.misplaced(key, shard_key):
                return False
            asked[key] = shard_key
            return True

        diff = relist_diff(
            objects, known, self._last_known_objects, snapshot_rv=snapshot_rv,
            moved=moved if self.sink.tracks_placement else None,
        )  # fmt: skip
        for key, delta in diff:
            pending = self.deltas.pending(delta, asked.pop(key, ...))
            if pending is None:
                continue
            batch.append(pending)
            if len(batch) >= self.batch_max:
                self.publish(batch)
                published += len(batch)
                batch = []
        if batch:
            self.publish(batch)
            published += len(batch)
        return published

    def _last_known_objects(self, keys: list[str]) -> dict[str, Obj | None]:
        """The objects published last for vanished keys: what their tombstones carry."""
        found: dict[str, Obj | None] = {}
        for key, data in self.sink.last_objects(keys).items():
            try:
                found[key] = decode_envelope(data).obj
            except WireDecodeError as exc:
                self.deltas.bad_input("corrupt_known_state", f"{key}: {exc}")
                found[key] = None
        return found

    def initial_events(self, batches: Iterator[list[WatchEvent]], initial: list[Obj]) -> str | None:
        """Collect a watch-list's initial events into ``initial`` (1.13); returns the RV of its
        initial-events-end bookmark, ``None`` if the stream ended before it."""
        try:
            for events in batches:
                done_rv = None
                for event in events:
                    if event.type == "BOOKMARK":
                        annotations = event.obj.get("metadata", {}).get("annotations") or {}
                        if annotations.get(INITIAL_EVENTS_END) == "true":
                            done_rv = resource_version(event.obj)
                    elif event.type == "ADDED":
                        prepared = self.deltas.prepare(event.obj)
                        if prepared is not None:
                            initial.append(prepared)
                if done_rv is not None:
                    return done_rv
        except MalformedWatchEventError as bad:
            # No position to resume from before the list is complete: it starts over.
            self.metrics.bad_watch_lines.labels(resource=self.resource, reason=bad.reason).inc()
            log.warning("%s: bad line in the initial events of a watch-list (%s)",
                        self.resource, bad)  # fmt: skip
            raise RelistNeeded("the watch-list's initial events were cut short") from bad
        return None
