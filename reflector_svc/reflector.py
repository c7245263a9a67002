"""ListAndWatch for one resource, publishing deltas onto its shard streams.

This is client-go's Reflector (reference section 1) with two changes that matter to users:

* **Relists announce only real changes**: a fresh list is diffed against the known state in
  Redis, so a 410 or a restart costs one LIST, not a storm of fake updates downstream
  (:mod:`reflector_svc.relist`).
* **A broken watch is resumed, not relisted**, unless the server says that version is gone
  (410) or a watch closes at once with nothing (:mod:`reflector_svc.watch_errors`).
* **Objects go where their resource's shard key sends them.** A resource sharded by owner or
  label (``--resource configmaps?shardKey=owner``) publishes each object on the shard its state
  maps to; the publisher moves it when that changes (:mod:`reflector_svc.moves`), and a relist
  moves the unchanged objects a new shard key places elsewhere. The leader records the
  resource's layout before its first publish; when the recorded shard key is not its own, it
  relists first (:mod:`reflector_svc.layout_record`).
* **A bad watch line costs a re-watch.** A line that is not a usable event ends the watch right
  after the events before it (as client-go's decoder does); the reflector counts and logs it,
  waits a moment and re-watches from the last event it published, so the server sends the
  rest again and nothing is lost or repeated. Only a position that keeps failing
  (:data:`~reflector_svc.bad_lines.BAD_LINE_RELIST_AFTER` times in a row) is relisted, with
  the relist backoff (:mod:`reflector_svc.bad_lines`).

Every publish goes through the shard publisher, which is fenced by this replica's leader epoch
and idempotent per key, so a crash or a failover at any point neither loses nor repeats a delta.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from common.backoff import Backoff
from common.object_keys import Obj
from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from common.versions import is_integer_version, resource_version
from reflector_svc.api_errors import MalformedWatchEventError, WatchListUnsupportedError
from reflector_svc.bad_lines import BadLinePolicy
from reflector_svc.delta_builder import DeltaBuilder
from reflector_svc.layout_record import LayoutSink, record_layout
from reflector_svc.metrics import ReflectorMetrics
from reflector_svc.pipeline import PublishPipeline
from reflector_svc.publish_records import FencedError, PendingDelta, PublishResult, ResumePoint
from reflector_svc.relist import Lister, Relister, RelistSink
from reflector_svc.transform import Transform
from reflector_svc.watch_errors import RelistNeeded, WatchErrorPolicy
from reflector_svc.watch_events import WatchEvent

__all__ = [
    "DeltaSink",
    "ListerWatcher",
    "Reflector",
    "ReflectorOptions",
    "Watch",
]

log = logging.getLogger(__name__)


class Watch(AbstractContextManager["Watch"], Protocol):
    """An open watch: events in batches as they arrive; ``close`` works from any thread
    (:class:`reflector_svc.watch_stream.WatchStream`; in tests ``tests/support/fake_source.py``)."""

    def batches(self) -> Iterator[list[WatchEvent]]: ...

    @property
    def more_waiting(self) -> bool:
        """Whether more of the stream was already waiting to be read after the last batch."""
        ...

    def close(self) -> None: ...


class ListerWatcher(Lister, Protocol):
    """The reflector's view of the Kubernetes API
    (:class:`reflector_svc.lister_watcher.KubeSource`; in tests
    ``tests/support/fake_source.py``): the list's side is the relist's
    (:class:`~reflector_svc.relist.Lister`)."""

    def watch(
        self,
        *,
        resource_version: str | None,
        send_initial_events: bool,
        timeout_seconds: int,
        inactivity_timeout: float,
    ) -> Watch:
        """A watch with bookmarks (the reflector always wants them: they move its resume
        point), from ``resource_version``, or a watch-list with ``send_initial_events``."""


class DeltaSink(RelistSink, LayoutSink, Protocol):
    """The reflector's view of Redis (:class:`reflector_svc.publisher.ShardPublisher`; in tests
    ``tests/support/fake_source.py``); the relist's side
    (:class:`~reflector_svc.relist.RelistSink`) and the layout's
    (:class:`~reflector_svc.layout_record.LayoutSink`) are declared where they are used."""

    def fence(self, epoch: int) -> None: ...

    def resume_point(self) -> ResumePoint: ...

    def publish(
        self, epoch: int, deltas: Sequence[PendingDelta], *, checkpoint_rv: str | None
    ) -> PublishResult: ...

    def advance_checkpoints(self, epoch: int, rv: str) -> None: ...

    def finish_relist(self, epoch: int, list_rv: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    """What the ListAndWatch loop is tuned by, and nothing else of the configuration.

    Built from the service's settings by ``reflector_svc.service.reflector_options``; the
    meaning and the defaults of each value are the settings' (``ReflectorSettings``), so they
    are said once, there. Seconds unless named otherwise.
    """

    page_size: int
    watch_list: bool
    """Try a streaming list (``sendInitialEvents``) before the paginated LIST."""
    watch_timeout_min: int
    watch_timeout_max: int
    """Each watch asks the server for a timeout drawn from ``[min, max]``."""
    inactivity_timeout: float
    request_timeout: float
    backoff_initial: float
    backoff_max: float
    backoff_reset: float
    batch_max: int
    checkpoint_interval: float
    max_object_bytes: int


class Reflector:
    """Lists and watches one resource while this replica leads it.

    Not thread-safe: one thread calls :meth:`run`; any thread may call :meth:`interrupt`.
    """

    def __init__(
        self,
        *,
        resource: str,
        kind: str,
        source: ListerWatcher,
        sink: DeltaSink,
        options: ReflectorOptions,
        metrics: ReflectorMetrics,
        transform: Transform | None = None,
        layout: ResourceLayout | None = None,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``layout``: how this leader shards the resource and what its objects are, recorded
        before its first publish (``None``: record nothing, shard by key)."""
        self.resource = resource
        self.kind = kind
        self.layout = layout
        self.shard_key = layout.shard_key if layout is not None else ShardKeyChoice()
        self._source = source
        self._sink = sink
        self._options = options
        self._metrics = metrics
        self._rng = rng or random.Random()
        self._monotonic = monotonic
        self._errors = WatchErrorPolicy(resource, metrics, monotonic)
        self._deltas = DeltaBuilder(
            resource,
            kind,
            transform,
            options.max_object_bytes,
            metrics.bad_input,
            wall_clock,
            shard_key=self.shard_key,
            fallbacks=metrics.shard_key_fallbacks,
        )
        self._label = {"resource": resource}
        # The newest resourceVersion every shard has (events, bookmarks or a list): where the
        # next watch starts. None until known (then the first step is a list).
        self.last_rv: str | None = None
        self._needs_list = True
        # Set by a failed Redis call: the next attempt resumes from Redis's checkpoints.
        self._resume_from_redis = False
        # Set after a 410 / "too large" on LIST: the next list asks for the latest state ("").
        self._rv_unavailable = False
        self._watch_list_supported = options.watch_list
        self._last_checkpoint_rv: str | None = None
        self._last_checkpoint_at = 0.0
        self._epoch = 0
        self._bad_lines = BadLinePolicy(self._rng)
        self._stop = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: Watch | None = None
        self._pipeline: PublishPipeline | None = None
        self.synced = threading.Event()
        self._lists = Relister(
            resource=resource,
            source=source,
            sink=sink,
            deltas=self._deltas,
            metrics=metrics,
            page_size=options.page_size,
            request_timeout=options.request_timeout,
            batch_max=options.batch_max,
            publish=lambda batch: self._publish(batch, checkpoint_rv=None),
            flush=lambda: self._fresh_pipeline().flush(),
            stopped=self._stopping,
            refused=self._list_latest,
        )

    # --- control --------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Make a blocked list or watch return promptly (used on shutdown and step-down)."""
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def run(self, epoch: int, stop: threading.Event) -> None:
        """ListAndWatch until ``stop`` is set; raises :class:`FencedError` if a newer leader
        took over (the caller steps down)."""
        self._epoch = epoch
        self._stop = stop
        self._metrics.leader.labels(**self._label).set(1)
        try:
            self._sink.fence(epoch)
            self._load_resume_point()
            if not self._needs_list:
                self.synced.set()
                self._metrics.synced.labels(**self._label).set(1)
            log.info(
                "leading %s (epoch %d): %s",
                self.resource,
                epoch,
                "listing" if self._needs_list else f"resuming the watch at rv {self.last_rv}",
            )
            self._run_loop()
        finally:
            if self._pipeline is not None:
                self._pipeline.close()  # the batch in flight and the queue still go out
                self._pipeline = None
            self._metrics.leader.labels(**self._label).set(0)

    def _run_loop(self) -> None:
        backoff = Backoff(
            initial=self._options.backoff_initial,
            maximum=self._options.backoff_max,
            reset_after=self._options.backoff_reset,
            rng=self._rng,
            clock=self._monotonic,
        )
        while not self._stop.is_set():
            delay = self._attempt(backoff)
            if delay > 0:
                self._stop.wait(delay)

    def _fresh_pipeline(self) -> PublishPipeline:
        """The publishing thread; a failed one (its batch refused) is replaced, and the next
        attempt resumes from the last resourceVersion Redis confirmed."""
        if self._pipeline is not None and not self._pipeline.failed:
            return self._pipeline
        if self._pipeline is not None:
            self._pipeline.close()
        self._pipeline = PublishPipeline(
            self._publish_now,
            batch_max=self._options.batch_max,
            on_published=self._advance,
            name=f"publisher[{self.resource}]",
        )
        return self._pipeline

    def _attempt(self, backoff: Backoff) -> float:
        """One ListAndWatch; returns how long to wait before the next (1.1)."""
        try:
            self._fresh_pipeline()
            if self._resume_from_redis:
                self._load_resume_point()
            self._list_and_watch()
        except FencedError:
            raise
        except Exception as exc:
            recovery = self._errors.recovery(exc, self.last_rv)
            self._needs_list = self._needs_list or recovery.relist
            self._resume_from_redis = self._resume_from_redis or recovery.resume_from_redis
            if recovery.at_once:
                return 0.0
            if recovery.wait_at_least is not None:
                return max(recovery.wait_at_least, backoff.next_delay())
        if self._stop.is_set():
            return 0.0
        return backoff.next_delay()

    def _load_resume_point(self) -> None:
        """Continue from the checkpoints Redis holds rather than from what it confirmed to us:
        a restarted Redis may have lost its last acknowledged writes (AOF ``everysec``) or
        everything (no persistence), and only its surviving checkpoints tell what to publish
        again (the per-key skip drops what survived)."""
        resume = self._sink.resume_point()
        if self.layout is not None:
            resume = record_layout(self._sink, self._epoch, self.resource, self.layout, resume)
        self.last_rv = resume.resource_version
        self._needs_list = resume.needs_relist or resume.resource_version is None
        self._resume_from_redis = False

    # --- ListAndWatch ---------------------------------------------------------------------

    def _list_and_watch(self) -> None:
        reason = "resume"
        if self._needs_list and self._watch_list_supported:
            try:
                self._watch_list()
            except WatchListUnsupportedError:
                log.info("%s: the server has no watch-list (422); using LIST", self.resource)
                self._watch_list_supported = False
            except MalformedWatchEventError as bad:
                self._after_bad_line(bad)  # after the initial events: the stream was the watch
                reason = "bad_line"
        if self._needs_list:
            self._relist()
        self._watch(reason)

    def _relist(self) -> None:
        """Paginated LIST, diffed against the known state, then the synced markers (1.4-1.7)."""
        self._metrics.lists.labels(**self._label).inc()
        if self.synced.is_set():
            self._metrics.relists.labels(**self._label).inc()
        self._fresh_pipeline().flush()  # the diff must see everything already submitted
        self._sink.begin_relist(self._epoch)
        known = self._sink.known_versions()
        list_rv, changes = self._lists.list_and_diff(known, self._list_resource_version(known))
        self._finish_relist(list_rv, changes)

    def _finish_relist(self, list_rv: str, changes: int) -> None:
        self._fresh_pipeline().flush()  # the synced marker must follow every diff delta
        self._sink.finish_relist(self._epoch, list_rv)
        self._needs_list = False
        self._rv_unavailable = False
        self._bad_lines.reset()
        self._advance(list_rv)
        self._last_checkpoint_rv = list_rv
        self.synced.set()
        self._metrics.synced.labels(**self._label).set(1)
        log.info("%s: synced at rv %s (%d changes published)", self.resource, list_rv, changes)

    def _stopping(self) -> bool:
        return self._stop.is_set()  # not bound once: each run brings its stop event

    def _list_latest(self) -> None:
        """A list at the resourceVersion asked for was refused (410, "too large"): until a
        list completes, lists ask for the latest state."""
        self._rv_unavailable = True

    def _list_resource_version(self, known: Mapping[str, str]) -> str:
        """1.4, with one rule of ours: never list older than what the shards already hold.

        A snapshot older than the published state cannot tell a deleted object from one created
        after it, so after a crash (the lowest shard checkpoint may trail other shards) we list
        at the newest resourceVersion any shard knows.
        """
        if self._rv_unavailable:
            return ""
        candidates = [rv for rv in (self.last_rv, *known.values()) if rv and is_integer_version(rv)]
        if candidates:
            return max(candidates, key=int)
        return self.last_rv if self.last_rv is not None else "0"

    def _watch_list(self) -> None:
        """1.13: a streaming list (initial events, then the initial-events-end bookmark),
        diffed like a LIST, continuing as the watch on the same stream."""
        self._metrics.lists.labels(**self._label).inc()
        self._fresh_pipeline().flush()
        self._sink.begin_relist(self._epoch)
        known = self._sink.known_versions()
        initial: list[Obj] = []
        with self._open_watch("watch-list", send_initial_events=True) as stream:
            batches = stream.batches()
            done_rv = self._lists.initial_events(batches, initial)
            if done_rv is not None:
                published = self._lists.publish_diff(initial, known, snapshot_rv=done_rv)
                self._finish_relist(done_rv, published)
                initial.clear()
                self._consume(batches, stream)  # a bad line from here on: re-watch
                return
        raise RelistNeeded("the watch-list stream ended before its initial events were complete")

    def _open_watch(self, reason: str, *, send_initial_events: bool = False) -> Watch:
        self._fresh_pipeline().flush()  # resume exactly after what Redis has confirmed
        self._metrics.watch_restarts.labels(resource=self.resource, reason=reason).inc()
        stream = self._source.watch(
            resource_version=None if send_initial_events else self.last_rv,
            timeout_seconds=self._rng.randint(
                self._options.watch_timeout_min, self._options.watch_timeout_max
            ),
            send_initial_events=send_initial_events,
            inactivity_timeout=self._options.inactivity_timeout,
        )
        with self._stream_lock:
            self._stream = stream
        if self._stop.is_set():
            stream.close()
        return stream

    def _watch(self, reason: str = "resume") -> None:
        """Watch from ``last_rv``, re-watching after every normal close (1.8-1.10) and after
        every bad line; ``reason`` labels the first watch's ``watch_restarts`` count."""
        while not self._stop.is_set():
            started = self._monotonic()
            try:
                with self._open_watch(reason) as stream:
                    events = self._consume(stream.batches(), stream)
            except MalformedWatchEventError as bad:
                self._after_bad_line(bad)
                reason = "bad_line"
                continue
            if self._stop.is_set():
                return
            if events == 0 and self._monotonic() - started < 1.0:
                raise RelistNeeded("the watch closed at once with no events")
            reason = "closed"

    def _after_bad_line(self, bad: MalformedWatchEventError) -> None:
        """Count and log a bad line that ended the watch, then wait briefly before the
        re-watch from the last event published; raises
        :class:`~reflector_svc.watch_errors.RelistNeeded` when the same position failed
        :data:`~reflector_svc.bad_lines.BAD_LINE_RELIST_AFTER` times in a row."""
        self._metrics.bad_watch_lines.labels(resource=self.resource, reason=bad.reason).inc()
        self._fresh_pipeline().flush()  # last_rv: the last event before the bad line
        rv = self.last_rv
        delay = self._bad_lines.failed_at(rv)
        failures = self._bad_lines.failures
        if delay is None:
            log.warning("%s: bad watch line after rv %s (%s), %d in a row there; relisting",
                        self.resource, rv, bad, failures)  # fmt: skip
            raise RelistNeeded(f"re-watching from rv {rv} failed {failures} times in a row")
        log.warning("%s: bad watch line after rv %s (%s); re-watching from rv %s in %.2f s",
                    self.resource, rv, bad, rv, delay)  # fmt: skip
        self._stop.wait(delay)

    def _consume(self, batches: Iterable[list[WatchEvent]], stream: Watch) -> int:
        """Publish the events of each arriving batch; returns how many events were seen.
        Each batch says whether the next is already waiting (``stream.more_waiting``), so the
        publisher may wait for it (:mod:`reflector_svc.pipeline`)."""
        seen = 0
        for events in batches:
            seen += len(events)
            pending: list[PendingDelta] = []
            bookmark_rv: str | None = None
            for event in events:
                if event.type == "BOOKMARK":
                    bookmark_rv = resource_version(event.obj) or bookmark_rv
                    continue
                delta = self._deltas.event_delta(event)
                if delta is not None:
                    pending.append(delta)
                    bookmark_rv = None
            more = stream.more_waiting
            if pending:
                rv = pending[-1].resource_version
                self._publish(pending, checkpoint_rv=rv, progress_rv=rv, more_waiting=more)
            if bookmark_rv:
                # In order behind the events before it: durable only once they are.
                self._publish([], checkpoint_rv=None, progress_rv=bookmark_rv, more_waiting=more)
            self._maybe_checkpoint_all()
            if self._stop.is_set():
                break
        return seen

    def _publish(
        self,
        deltas: list[PendingDelta],
        *,
        checkpoint_rv: str | None,
        progress_rv: str | None = None,
        more_waiting: bool = False,
    ) -> None:
        """Hand a batch to the publishing thread; ``last_rv`` moves to ``progress_rv`` once
        Redis has confirmed it (see :mod:`reflector_svc.pipeline`)."""
        self._fresh_pipeline().submit(
            deltas, checkpoint_rv=checkpoint_rv, progress_rv=progress_rv, more_waiting=more_waiting
        )

    def _publish_now(self, deltas: Sequence[PendingDelta], checkpoint_rv: str | None) -> None:
        """Runs on the publishing thread."""
        started = self._monotonic()
        result = self._sink.publish(self._epoch, deltas, checkpoint_rv=checkpoint_rv)
        self._metrics.publish_latency.labels(**self._label).observe(self._monotonic() - started)
        for delta_type, count in result.published_by_type.items():
            self._metrics.deltas_published.labels(resource=self.resource, type=delta_type).inc(
                count
            )
        if result.skipped:
            self._metrics.deltas_skipped.labels(**self._label).inc(result.skipped)
        if result.moves:
            self._metrics.moves.labels(**self._label).inc(result.moves)

    def _advance(self, rv: str) -> None:
        self.last_rv = rv
        if is_integer_version(rv):
            self._metrics.last_resource_version.labels(**self._label).set(int(rv))

    def _maybe_checkpoint_all(self) -> None:
        """Move every shard's checkpoint to ``last_rv`` now and then, so shards without recent
        events do not hold the resume point (and a restart's replay) far back."""
        rv = self.last_rv
        if rv is None or rv == self._last_checkpoint_rv:
            return
        now = self._monotonic()
        if now - self._last_checkpoint_at < self._options.checkpoint_interval:
            return
        self._fresh_pipeline().flush()  # every shard must really have everything up to rv
        rv = self.last_rv
        if rv is None:
            return
        self._sink.advance_checkpoints(self._epoch, rv)
        self._last_checkpoint_rv = rv
        self._last_checkpoint_at = now
