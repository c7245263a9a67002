"""Async handlers: one handler's coroutines on the processor's event loop, in key order.

A sync handler gets its notifications one at a time on its own thread
(:mod:`processor_svc.dispatch`), which is what keeps per-key order and delays an entry's
acknowledgement until the handler returned. An ``async def on_update`` handler awaits I/O, and
running its calls one at a time would waste exactly what it awaits: so its handler thread
hands each notification to :class:`KeyedCoroutines`, which runs up to ``limit`` of them at once
on the processor's one event loop (:mod:`processor_svc.event_loop`) under the same guarantees:

* **per-key order**: the notifications of one key run one after another, in the order they
  were handed over (stream order); different keys overlap;
* **acknowledgement after the coroutine**: an entry's token is released when its coroutine
  returned (or raised), so an entry is acknowledged only after every handler finished with it;
* **a stopped shard's notifications are skipped**: one whose stop event is set when its turn
  comes never starts (its token never completes: the next owner delivers the shard again), and
  :meth:`KeyedCoroutines.is_running` lets ``wait_quiet`` wait for the ones already started;
* **bounded memory**: at most ``capacity`` notifications are held (waiting or running); the
  handler thread waits for room, its buffer fills, and the shard's reads pause (backpressure);
* a **barrier** (no key) completes only when everything handed over before it has finished.

controller-runtime calls the limit ``MaxConcurrentReconciles``; so does our flag
(``--max-concurrent-reconciles``), and, as there, it is per handler or controller.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias

from common.object_keys import DeletedFinalStateUnknown, Obj
from processor_svc.event_loop import EventLoopThread

__all__ = [
    "DEFAULT_MAX_CONCURRENT",
    "AsyncResourceEventHandler",
    "KeyedCoroutines",
    "is_async_handler",
]

DEFAULT_MAX_CONCURRENT: Final = 10
"""Coroutines of one handler or controller in flight at once. controller-runtime defaults to 1
because its reconciles block a goroutine each; an async handler exists to overlap I/O, and 10
matches client-go's default API burst (QPS 5, burst 10), so the default neither serialises the
awaits nor lets one handler flood the API server."""

_EVENT_METHODS: Final = ("on_add", "on_update", "on_delete")


class AsyncResourceEventHandler(Protocol):
    """A :class:`~common.handlers.ResourceEventHandler` whose three methods are coroutines."""

    async def on_add(self, obj: Obj, is_in_initial_list: bool) -> None: ...

    async def on_update(self, old: Obj, new: Obj) -> None: ...

    async def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None: ...


def is_async_handler(handler: object) -> bool:
    """Whether ``handler``'s ``on_add``/``on_update``/``on_delete`` are coroutine functions.

    All three or none: a handler mixing them is refused (``ValueError``), since its sync
    methods would block the event loop and its calls could not share one key order.
    """
    kinds = {
        name: inspect.iscoroutinefunction(getattr(handler, name, None)) for name in _EVENT_METHODS
    }
    if all(kinds.values()):
        return True
    if any(kinds.values()):
        asynchronous = sorted(name for name, is_async in kinds.items() if is_async)
        synchronous = sorted(name for name, is_async in kinds.items() if not is_async)
        raise ValueError(
            f"handler {handler!r} mixes async ({', '.join(asynchronous)}) and sync "
            f"({', '.join(synchronous)}) event methods: make all three async def, or none"
        )
    return False


class AsyncNotification(Protocol):
    """What :class:`KeyedCoroutines` runs (:mod:`processor_svc.notifications`)."""

    def object_key(self) -> str | None:
        """The object's key; ``None`` for a barrier."""

    def apply(self, handler: AsyncResourceEventHandler) -> object:
        """Call the handler's method: the coroutine it returns is what runs."""

    def describe(self) -> str: ...


class Token(Protocol):
    """An entry's acknowledgement hold (:class:`processor_svc.ack_tracker.AckToken`)."""

    def release(self) -> None: ...


Cancel: TypeAlias = "threading.Event | None"


@dataclass(slots=True)
class _Call:
    notification: AsyncNotification
    token: Token | None
    cancel: Cancel


class KeyedCoroutines:
    """Runs one handler's coroutines on ``loop``: up to ``limit`` at once, one per key.

    :meth:`submit` is called by one thread (the handler's dispatch thread); the rest of the
    state lives on the loop, under one lock because :meth:`is_running`, :meth:`abort` and the
    waits look at it from other threads.
    """

    def __init__(
        self,
        handler: AsyncResourceEventHandler,
        loop: EventLoopThread,
        *,
        limit: int,
        capacity: int,
        failed: Callable[[AsyncNotification], None],
        finished: Callable[[float], None],
    ) -> None:
        if limit < 1:
            raise ValueError(f"the concurrency limit must be >= 1, got {limit}")
        self._handler = handler
        self._loop = loop
        self.limit = limit
        self._capacity = max(capacity, limit)
        self._failed = failed
        self._finished = finished
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._held = 0  # handed over and not finished (waiting or running)
        self._aborted = False
        self._waiting: dict[str, collections.deque[_Call]] = {}  # per key, behind the running one
        self._ready: collections.deque[str] = collections.deque()  # keys waiting for a slot
        self._running: dict[int, Cancel] = {}  # id of a started call -> its stop event
        self._active = 0  # tasks started and not finished (what the limit counts)
        self._tasks: set[asyncio.Task[None]] = set()  # strong references until they end

    # --- the handler thread's side --------------------------------------------------------------

    def submit(self, notification: AsyncNotification, token: Token | None, cancel: Cancel) -> bool:
        """Hand ``notification`` over, waiting while ``capacity`` are held; a barrier (no key)
        waits until everything before it finished, then releases its token. ``False`` once
        :meth:`abort` was called (the token is never released)."""
        key = notification.object_key()
        with self._lock:
            while not self._aborted and (
                self._held >= self._capacity if key is not None else self._held
            ):
                self._changed.wait()
            if self._aborted:
                return False
            if key is None:  # skipped, like any notification, once its shard stopped
                if token is not None and (cancel is None or not cancel.is_set()):
                    token.release()
                return True
            self._held += 1
        self._loop.call_soon(lambda: self._enqueue(key, _Call(notification, token, cancel)))
        return True

    def drain(self) -> None:
        """Wait until every coroutine handed over has finished (after an :meth:`abort`: the
        running ones; the waiting ones were dropped)."""
        with self._lock:
            while self._held:
                self._changed.wait()

    def abort(self) -> int:
        """Drop the notifications not started yet (their tokens never complete) and refuse new
        ones; the running coroutines are left to finish. Returns how many were dropped."""
        with self._lock:
            self._aborted = True
            dropped = sum(len(calls) for calls in self._waiting.values())
            self._waiting.clear()
            self._ready.clear()
            self._held -= dropped
            self._changed.notify_all()
        return dropped

    def is_running(self, cancel: threading.Event) -> bool:
        """Whether a coroutine handed over with ``cancel`` has started and not finished."""
        with self._lock:
            return any(running is cancel for running in self._running.values())

    def running(self) -> int:
        """How many coroutines run now."""
        with self._lock:
            return len(self._running)

    def held(self) -> int:
        """Notifications handed over and not finished (waiting or running)."""
        with self._lock:
            return self._held

    # --- the loop's side ------------------------------------------------------------------------

    def _enqueue(self, key: str, call: _Call) -> None:
        with self._lock:
            if self._aborted:
                self._held -= 1
                self._changed.notify_all()
                return
            queue = self._waiting.get(key)
            if queue is None:  # the key has nothing waiting or running: it may start
                self._waiting[key] = collections.deque([call])
                self._ready.append(key)
            else:
                queue.append(call)
        self._start_ready()

    def _start_ready(self) -> None:
        while True:
            with self._lock:
                if not self._ready or self._active >= self.limit:
                    return
                key = self._ready.popleft()
                call = self._waiting[key].popleft()
                self._active += 1
            task = asyncio.get_running_loop().create_task(self._run(key, call))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, key: str, call: _Call) -> None:
        ident = id(call)
        try:
            # Published before the check, so a shard worker that sets ``cancel`` and then calls
            # wait_quiet either sees this call or the call is skipped (dispatch's rule).
            with self._lock:
                self._running[ident] = call.cancel
            if call.cancel is not None and call.cancel.is_set():
                return  # its shard stopped or moved: the token never completes
            start = time.perf_counter()
            try:
                result = call.notification.apply(self._handler)
                if inspect.isawaitable(result):
                    await _awaited(result)
            except Exception:
                self._failed(call.notification)
            finally:
                self._finished(time.perf_counter() - start)
                if call.token is not None:
                    call.token.release()
        finally:
            with self._lock:
                self._running.pop(ident, None)
                self._active -= 1
                self._held -= 1
                queue = self._waiting.get(key)
                if queue:  # the key's next notification goes behind the keys already waiting
                    self._ready.append(key)
                elif queue is not None:
                    del self._waiting[key]
                self._changed.notify_all()
            self._start_ready()


async def _awaited(result: Awaitable[object]) -> None:
    await result
