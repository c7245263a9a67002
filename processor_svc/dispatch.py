"""Handler dispatch: one bounded buffer and one thread per handler.

client-go gives every handler of a SharedIndexInformer its own buffer and goroutine so that a
slow handler does not delay the others (reference 5.5). We do the same, with one difference that
matters for a bus: the buffer is **bounded**. Go's is unbounded, so a stuck handler grows memory
without limit; here, when a handler's buffer is full, :meth:`HandlerDispatcher.deliver` blocks,
the shard worker that called it stops reading its stream, and the entries wait in Redis
(backpressure). Memory per handler stays at ``buffer_size`` notifications.

Acknowledgement: a stream entry may be acknowledged only after *every* handler returned for it
(:mod:`processor_svc.ack_tracker`). :meth:`HandlerDispatcher.deliver` adds one hold per handler
to the entry's token and each handler thread releases its hold after the call returns (or raises).

Per-handler resync (reference 5.3/5.4): a handler with a resync period gets, from its own thread,
``on_update(obj, obj)`` for every object of the local stores (``lister``), never from the API.
Because it reads the store directly rather than travelling through the buffer, a resync can show
a handler an object's newer state just before the buffered notification that carried it (the
store is written before notifications are queued). Handlers are level-triggered, so that costs a
redundant reconcile, never a wrong one.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, TypeAlias, cast

from common.handlers import ResourceEventHandler
from common.object_keys import Obj
from processor_svc.ack_tracker import AckToken
from processor_svc.async_dispatch import (
    DEFAULT_MAX_CONCURRENT,
    AsyncNotification,
    AsyncResourceEventHandler,
    KeyedCoroutines,
    is_async_handler,
)
from processor_svc.event_loop import EventLoopThread
from processor_svc.key_events import KeyEventHandler
from processor_svc.metrics import ProcessorMetrics
from processor_svc.notifications import (
    AddNotification,
    DeleteNotification,
    Notification,
    NotificationCollector,
    NotificationSink,
    UpdateNotification,
)
from processor_svc.resync import checked_resync_periods

__all__ = [
    "AddNotification",
    "DeleteNotification",
    "DispatcherClosedError",
    "HandlerDispatcher",
    "Notification",
    "NotificationCollector",
    "NotificationSink",
    "UpdateNotification",
]

log = logging.getLogger(__name__)


class _Barrier:
    """A no-op queued behind earlier notifications: its token completes when every handler has
    processed everything queued before it (how "initial list delivered" is detected)."""

    __slots__ = ()

    def apply(self, handler: object) -> None:
        pass

    def object_key(self) -> None:
        return None

    def describe(self) -> str:
        return "barrier"


_BARRIER: Final = _Barrier()

_Item: TypeAlias = tuple["Notification | _Barrier", "AckToken | None", "threading.Event | None"]
"""A notification, the ack token it holds, and its shard worker's stop event: once that is
set, the notification is skipped instead of applied (see :meth:`HandlerDispatcher.wait_quiet`)."""


# --- the dispatcher ------------------------------------------------------------------------------


class DispatcherClosedError(RuntimeError):
    """``deliver`` after (or during) :meth:`HandlerDispatcher.stop`."""


_CANCEL_POLL: Final = 0.25
"""A blocked ``deliver`` re-checks its cancel event this often, in case a wake-up was missed."""
_TRACEBACK_INTERVAL: Final = 60.0
"""A failing handler's traceback is logged at most this often (every failure gets one line)."""


class _Runner:
    """One handler: its bounded buffer, its thread, its resync schedule."""

    def __init__(
        self,
        name: str,
        handler: ResourceEventHandler,
        *,
        capacity: int,
        metrics: ProcessorMetrics,
        resource: str,
        resync_period: float | None,
        lister: Callable[[], Iterable[Obj]] | None,
        coroutines: Callable[[_Runner], KeyedCoroutines] | None = None,
    ) -> None:
        self.name = name
        self.handler = handler
        self._capacity = capacity
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._items: collections.deque[_Item] = collections.deque()
        self._closed = False
        self._aborted = False
        self._resync_period = resync_period
        self._lister = lister
        self._next_resync = (
            time.monotonic() + resync_period if resync_period is not None else float("inf")
        )
        scope = (resource, metrics.group, name)
        self._errors = metrics.handler_errors.labels(*scope)
        self._latency = metrics.handler_latency.labels(*scope)
        self._resyncs = metrics.resyncs.labels(*scope)
        # Items taken out of the buffer but not yet processed (the consumer's current batch):
        # they still count against the capacity, so memory stays at ``capacity`` items.
        # Written by the consumer thread only.
        self._taken = 0
        self._calling = 0  # 1 while a call runs (it is in _taken, but will not be dropped)
        # The stop event of the item being (or about to be) called: what wait_quiet looks at.
        self._calling_cancel: threading.Event | None = None
        self._batch_done = False
        metrics.handler_buffer.labels(*scope).set_function(self.buffered)
        self._last_traceback = -_TRACEBACK_INTERVAL
        # An async handler's calls run on the event loop; this thread only hands them over.
        self._coroutines = None if coroutines is None else coroutines(self)
        # Daemon: a handler stuck in user code must not keep the process alive after stop().
        self.thread = threading.Thread(
            target=self._run, name=f"handler[{resource}:{name}]", daemon=True
        )

    # producer side (shard workers) --------------------------------------------------------------

    def put(self, item: _Item, cancel: threading.Event | None) -> bool:
        """Queue ``item``, waiting while the buffer is full; ``False`` if ``cancel`` was set."""
        with self._lock:
            while len(self._items) + self._taken >= self._capacity:
                if self._closed:
                    raise DispatcherClosedError(f"handler {self.name!r} is stopping")
                if cancel is not None and cancel.is_set():
                    return False
                self._not_full.wait(_CANCEL_POLL if cancel is not None else None)
            if self._closed:
                raise DispatcherClosedError(f"handler {self.name!r} is stopping")
            self._items.append(item)
            self._not_empty.notify()
        return True

    def put_many(self, items: Sequence[_Item], cancel: threading.Event | None) -> bool:
        """Queue ``items`` in order, as many per lock round trip as the buffer has room for;
        ``False`` if ``cancel`` was set while waiting for room (a prefix may be queued).

        One wake-up per read batch instead of one per notification: the per-item hand-off was
        the processor's largest cost (a lock, a notify and a thread switch per notification).
        """
        start, total = 0, len(items)
        with self._lock:
            while start < total:
                if self._closed:
                    raise DispatcherClosedError(f"handler {self.name!r} is stopping")
                room = self._capacity - len(self._items) - self._taken
                if room <= 0:
                    if cancel is not None and cancel.is_set():
                        return False
                    self._not_full.wait(_CANCEL_POLL if cancel is not None else None)
                    continue
                end = min(total, start + room)
                self._items.extend(items[start:end] if start or end < total else items)
                start = end
                self._not_empty.notify()
        return True

    def is_calling(self, cancel: threading.Event) -> bool:
        """Whether the handler is running a notification delivered with ``cancel``."""
        if self._coroutines is not None and self._coroutines.is_running(cancel):
            return True
        return self._calling_cancel is cancel

    def running(self) -> int:
        """How many calls of this handler run now."""
        return self._calling + (0 if self._coroutines is None else self._coroutines.running())

    def wake(self) -> None:
        """Make blocked producers re-check their cancel events now."""
        with self._lock:
            self._not_full.notify_all()

    # lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Accept nothing more; the thread ends once the buffer is drained."""
        with self._lock:
            self._closed = True
            self._wake_everyone_locked()

    def abort(self) -> int:
        """Drop what is still buffered (their tokens never complete); returns how many."""
        with self._lock:
            self._aborted = True
            left = len(self._items) + self._taken - self._calling
            self._items.clear()
            self._wake_everyone_locked()
        return left + (0 if self._coroutines is None else self._coroutines.abort())

    def _wake_everyone_locked(self) -> None:
        """After closing or aborting: the handler's thread and every blocked producer look
        again (and find out)."""
        self._not_empty.notify_all()
        self._not_full.notify_all()

    # consumer side (the handler's thread) -------------------------------------------------------

    def buffered(self) -> int:
        """Notifications waiting for this handler (queued or in its current batch)."""
        held = 0 if self._coroutines is None else self._coroutines.held()
        return len(self._items) + self._taken + held

    def _next(self) -> list[_Item] | None:
        """Everything queued, as one batch (``None``: resync now); raises ``_Done`` when the
        thread must end.

        Taking the whole buffer at once is what keeps the handler thread from waking once per
        notification: one lock round trip per batch instead of a producer/consumer lock convoy
        per item (measured: the per-item handoff cost more than decoding a 3.5 KB Pod).
        """
        with self._lock:
            if self._batch_done:  # the previous batch is processed: its room is free again
                self._batch_done = False
                self._taken = 0
                self._not_full.notify_all()
            while True:
                if self._aborted:
                    raise _Done
                if not self._closed and time.monotonic() >= self._next_resync:
                    return None
                if self._items:
                    batch = list(self._items)
                    self._items.clear()
                    self._taken = len(batch)
                    self._batch_done = True  # (as soon as the caller asks for the next one)
                    return batch
                if self._closed:
                    raise _Done
                timeout = None
                if self._resync_period is not None:
                    timeout = max(0.0, self._next_resync - time.monotonic())
                self._not_empty.wait(timeout)

    def _run(self) -> None:
        try:
            while True:
                batch = self._next()
                if batch is None:
                    self._resync()
                    continue
                for notification, token, cancel in batch:
                    if self._aborted:
                        break
                    if self._coroutines is not None:  # it checks ``cancel`` when it starts it
                        self._coroutines.submit(
                            cast(AsyncNotification, notification), token, cancel
                        )
                        self._taken -= 1
                        continue
                    # Published before the check, so a worker that sets ``cancel`` and then
                    # calls wait_quiet either sees this call or the call is skipped.
                    self._calling_cancel = cancel
                    if cancel is not None and cancel.is_set():
                        # Its shard stopped or moved: applying it now could overlap the next
                        # owner. Its token never completes, so its entry stays unacknowledged
                        # and the next owner's takeover delivers the shard's state again.
                        self._calling_cancel = None
                        self._taken -= 1
                        continue
                    self._calling = 1
                    try:
                        self._call(notification)
                    finally:
                        self._calling = 0
                        self._calling_cancel = None
                        self._taken -= 1
                        if token is not None:
                            token.release()
        except _Done:
            if self._coroutines is not None:  # the grace period covers what was handed over
                self._coroutines.drain()

    def _call(self, notification: Notification | _Barrier) -> None:
        if self._coroutines is not None:  # a resync's notification, in its key's order
            self._coroutines.submit(cast(AsyncNotification, notification), None, None)
            return
        start = time.perf_counter()
        try:
            notification.apply(self.handler)
        except Exception:
            self._failed(notification)
        finally:
            self._latency.observe(time.perf_counter() - start)

    def _failed(self, notification: AsyncNotification | Notification | _Barrier) -> None:
        """Count a call that raised and log it (with a traceback at most once a minute)."""
        self._errors.inc()
        now = time.monotonic()
        with_traceback = now - self._last_traceback >= _TRACEBACK_INTERVAL
        if with_traceback:
            self._last_traceback = now
        log.error(
            "handler %r failed on the %s",
            self.name,
            notification.describe(),
            exc_info=with_traceback,
            extra={"handler": self.name},
        )

    def _resync(self) -> None:
        period = self._resync_period
        assert period is not None and self._lister is not None  # only scheduled with both
        try:
            objects = list(self._lister())
        except Exception:
            self._errors.inc()
            log.exception("handler %r: listing the stores for a resync failed", self.name)
            objects = []
        else:
            self._resyncs.inc()
        for obj in objects:
            if self._closed or self._aborted:
                break
            self._call(UpdateNotification(obj, obj))
        self._next_resync = time.monotonic() + period


class _Done(Exception):
    """Ends a handler thread."""


_QUIET_POLL: Final = 0.005
"""How often ``wait_quiet`` looks again (what it waits for is one handler call)."""
_ABORT_JOIN: Final = 1.0
"""After the grace period, how long ``stop`` still waits for a handler call in progress."""


class HandlerDispatcher:
    """Fans notifications out to handlers, each in its own thread behind a bounded buffer.

    ``buffer_size`` bounds the notifications one handler holds: queued plus the batch its thread
    took out of the queue and is working through. ``handlers`` are ``(name, handler)`` pairs;
    names must be unique (they label metrics and key ``resync_periods``). ``resync_periods``
    maps a handler name to seconds (``0`` or absent: no resync; below
    :data:`~processor_svc.resync.MIN_RESYNC_PERIOD`: refused with ``ValueError``); any resync
    needs ``lister``, which returns the objects of the local stores. One dispatcher can serve
    every shard worker of a resource: per-shard order holds because each worker delivers in its
    stream's order and each handler consumes its buffer in FIFO order.
    """

    def __init__(
        self,
        handlers: Sequence[tuple[str, ResourceEventHandler]],
        *,
        buffer_size: int = 1000,
        metrics: ProcessorMetrics,
        resource: str,
        resync_periods: Mapping[str, float] | None = None,
        lister: Callable[[], Iterable[Obj]] | None = None,
        event_loop: EventLoopThread | None = None,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
    ) -> None:
        if type(buffer_size) is not int or buffer_size < 1:
            raise ValueError(f"buffer_size must be an integer >= 1, got {buffer_size!r}")
        names = [name for name, _ in handlers]
        if len(set(names)) != len(names):
            raise ValueError(f"handler names must be unique, got {names}")
        periods = checked_resync_periods(names, resync_periods or {})
        if periods and lister is None:
            raise ValueError("resync periods need a lister (the local stores to replay)")
        self.resource = resource
        self._metrics = metrics
        # Async handlers' coroutines (processor_svc.async_dispatch) run on the processor's loop,
        # or on one of this dispatcher's own (started only if one is async, closed by stop).
        self._own_loop = (
            None if event_loop is not None else EventLoopThread(f"handlers[{resource}]")
        )
        loop = event_loop or self._own_loop
        assert loop is not None

        def coroutines(runner: _Runner) -> KeyedCoroutines:
            handler = cast(AsyncResourceEventHandler, runner.handler)
            return KeyedCoroutines(
                handler, loop, limit=max_concurrent, capacity=buffer_size,
                failed=runner._failed, finished=runner._latency.observe,
            )  # fmt: skip

        self._runners = tuple(
            _Runner(
                name,
                handler,
                capacity=buffer_size,
                metrics=metrics,
                resource=resource,
                resync_period=periods.get(name),
                lister=lister,
                coroutines=coroutines if is_async_handler(handler) else None,
            )
            for name, handler in handlers
        )
        self._keys_suffice = all(
            isinstance(r.handler, KeyEventHandler) and r._coroutines is None for r in self._runners
        )  # (an async handler's calls take notifications of objects)
        self._state = threading.Lock()
        self._started = False
        self._stopped = False

    @property
    def keys_suffice(self) -> bool:
        """Every handler is a :class:`~processor_svc.key_events.KeyEventHandler`: live changes
        may be sent as keys alone."""
        return self._keys_suffice

    @property
    def handler_names(self) -> list[str]:
        """The handlers' names, in registration order."""
        return [runner.name for runner in self._runners]

    def start(self) -> None:
        """Start the handler threads. Raises ``RuntimeError`` if started or stopped before."""
        with self._state:
            if self._started or self._stopped:
                raise RuntimeError("a HandlerDispatcher can be started only once")
            self._started = True
            for runner in self._runners:
                runner.thread.start()

    def deliver(
        self,
        notification: Notification,
        ack: AckToken | None = None,
        *,
        cancel: threading.Event | None = None,
    ) -> bool:
        """Queue ``notification`` for every handler; ``ack`` completes when all processed it.

        Blocks while a handler's buffer is full (backpressure). Returns ``False`` when
        ``cancel`` is set while blocked: some handlers may have it queued, the others never
        will, and ``ack`` can never complete (the entry is left for the next owner). Raises
        :class:`DispatcherClosedError` once :meth:`stop` was called.
        """
        return self._deliver(notification, ack, cancel)

    def deliver_all(
        self,
        notifications: Sequence[tuple[Notification, AckToken | None]],
        *,
        cancel: threading.Event | None = None,
    ) -> bool:
        """Queue each notification for every handler, in order; each token completes when
        every handler processed every notification that carries it.

        The batched form of :meth:`deliver` (same blocking, cancelling and closing rules):
        the caller must still hold its own hold on every token until this returns.
        """
        if not notifications:
            return True
        runners = self._runners
        per_token = len(runners)
        holds = 0
        previous: AckToken | None = None
        items: list[_Item] = []
        for notification, token in notifications:
            # Consecutive notifications usually share one token (one entry): hold once per run.
            if token is not previous:
                if previous is not None:
                    previous.hold(holds)
                previous, holds = token, 0
            holds += per_token
            items.append((notification, token, cancel))
        if previous is not None:
            previous.hold(holds)
        # all() stops at the first cancelled put: later handlers never get the items.
        return all(runner.put_many(items, cancel) for runner in runners)

    def barrier(self, ack: AckToken, *, cancel: threading.Event | None = None) -> bool:
        """Queue a no-op behind everything delivered so far; ``ack`` completes when every
        handler has processed all of it. Blocking and cancelling as :meth:`deliver`."""
        return self._deliver(_BARRIER, ack, cancel)

    def _deliver(
        self,
        notification: Notification | _Barrier,
        ack: AckToken | None,
        cancel: threading.Event | None,
    ) -> bool:
        runners = self._runners
        if ack is not None:
            ack.hold(len(runners))
        item: _Item = (notification, ack, cancel)
        # all() stops at the first cancelled put: later handlers never get the item.
        return all(runner.put(item, cancel) for runner in runners)

    def wait_quiet(self, cancel: threading.Event, timeout: float) -> bool:
        """After ``cancel`` was set: wait until no handler runs a notification delivered with
        it (``True``), at most ``timeout`` seconds. Queued ones are skipped, never started, so
        this waits for at most one call per handler, not for a backlog; a shard can then be
        handed over without its old and new owners' handlers ever overlapping."""
        deadline = time.monotonic() + timeout
        while any(runner.is_calling(cancel) for runner in self._runners):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_QUIET_POLL)
        return True

    def running_calls(self) -> int:
        """How many handler calls are running now (what ending the process abandons)."""
        return sum(runner.running() for runner in self._runners)

    def wake(self) -> None:
        """Wake every ``deliver`` blocked on a full buffer so it re-checks its cancel event
        (a shard worker calls this after setting its stop event)."""
        for runner in self._runners:
            runner.wake()

    def stop(self, grace: float) -> dict[str, int]:
        """Drain the buffers for up to ``grace`` seconds, then drop what is left and stop.

        Returns, per handler, how many notifications were dropped (their tokens never
        complete, so their entries stay unacknowledged). A handler call still running after the
        grace period gets one more second; if it still has not returned, its (daemon) thread is
        left behind and logged. Idempotent.
        """
        with self._state:
            if self._stopped:
                return {runner.name: 0 for runner in self._runners}
            self._stopped = True
            started = self._started
        for runner in self._runners:
            runner.close()
        deadline = time.monotonic() + max(0.0, grace)
        if started:
            for runner in self._runners:
                runner.thread.join(max(0.0, deadline - time.monotonic()))
        left = {runner.name: runner.abort() for runner in self._runners}
        for name, count in left.items():
            if count:
                log.warning(
                    "handler %r: %d notifications not delivered within the %.1f s grace period",
                    name,
                    count,
                    grace,
                    extra={"handler": name},
                )
        if started:
            for runner in self._runners:
                runner.thread.join(_ABORT_JOIN)
                if runner.thread.is_alive():
                    log.error(
                        "handler %r is still running after stop; its thread is left behind",
                        runner.name,
                        extra={"handler": runner.name},
                    )
        for runner in self._runners:
            with contextlib.suppress(KeyError):
                self._metrics.handler_buffer.remove(self.resource, self._metrics.group, runner.name)
        if self._own_loop is not None:
            self._own_loop.close()
        return left
