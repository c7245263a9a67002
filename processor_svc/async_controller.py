"""Controllers whose ``reconcile`` is a coroutine: ``async def reconcile(self, key)``.

A sync :class:`~processor_svc.controller.Controller` needs a thread per key it reconciles at
once, so an I/O-bound operator pays a thread for every API call it waits on. An
:class:`AsyncController` reconciles on the processor's event loop (:mod:`processor_svc.event_loop`)
instead: one feeder thread takes keys off the same workqueue and starts a coroutine for each,
at most ``max_concurrent_reconciles`` at once (controller-runtime's ``MaxConcurrentReconciles``;
the processor's ``--max-concurrent-reconciles`` unless the class or constructor says otherwise).

Everything else is the sync controller's own code, not a copy of it: the workqueue keeps a key
from being handed out twice before its reconcile is ``done`` (dirty/processing), so a key is
never reconciled twice at once; a failure is retried with the rate limiter and given up after
``max_retries`` (the shard's dead letters are the reader's, not the controller's); the write
barrier, the shard hand-over (``shards_leaving``/``wait_shards_idle``) and the cache-sync waits
are the base class's ``_admit``/``_ready``/``_handle_error``. Only the call is awaited.

The event handler side (``on_add`` & co.) stays synchronous: it only queues a key. A reconcile
runs on the loop's thread, so it must not block: await I/O (an asyncio Kubernetes client such
as ``kubernetes_asyncio``), and hand CPU-heavy or blocking work to ``asyncio.to_thread``.
``expect_version`` saves the key's expectations to Redis synchronously (one short call).

Stopping drains like the sync controller (the keys already queued are reconciled, retries not
yet due are dropped) and waits, within the timeout, for the reconciles in flight; nothing
running is cancelled until the processor closes its loop after the grace period.
"""

from __future__ import annotations

import abc
import threading
from concurrent.futures import Future
from typing import Any

from common.workqueue import QueueShutDown
from processor_svc.async_dispatch import DEFAULT_MAX_CONCURRENT
from processor_svc.controller import Controller
from processor_svc.event_loop import EventLoopThread
from processor_svc.handlers import HandlerContext
from processor_svc.settings import ProcessorSettings

__all__ = ["AsyncController"]


class AsyncController(Controller):
    """Base for controllers with ``async def reconcile(self, key)``; see the module docstring.

    ``max_concurrent_reconciles`` (class attribute or keyword argument) caps the reconciles in
    flight; default: the processor's ``--max-concurrent-reconciles``. ``workers`` is unused.
    """

    max_concurrent_reconciles: int | None = None
    _awaits_reconcile = True

    def __init__(
        self,
        context: HandlerContext,
        *,
        max_concurrent_reconciles: int | None = None,
        **options: Any,
    ) -> None:
        limit = max_concurrent_reconciles or type(self).max_concurrent_reconciles
        if limit is None:
            settings = context.settings
            limit = (
                settings.max_concurrent_reconciles
                if isinstance(settings, ProcessorSettings)
                else DEFAULT_MAX_CONCURRENT
            )
        if limit < 1:
            raise ValueError(f"max_concurrent_reconciles must be >= 1, got {limit}")
        super().__init__(context, **options)  # (it starts the queue's thread: checks first)
        self.max_concurrent_reconciles = limit
        self._limit: int = limit
        # The processor's loop; without one (a controller built outside a processor), its own.
        self._own_loop = None if context.event_loop is not None else EventLoopThread(self.name)
        self._event_loop = context.event_loop or self._own_loop
        self._slots = threading.BoundedSemaphore(limit)

    @abc.abstractmethod
    async def reconcile(self, key: str) -> None:
        """As :meth:`Controller.reconcile`, awaited on the processor's event loop: never
        concurrently for one key, at most ``max_concurrent_reconciles`` keys at once."""

    def _new_threads(self) -> list[threading.Thread]:
        # Daemon: a feeder waiting on a reconcile stuck past stop(timeout) must not hang exit.
        return [
            threading.Thread(target=self._feed, name=f"controller[{self.name}]-feeder", daemon=True)
        ]

    def _log_started(self) -> None:
        self.logger.info(
            "started: up to %d reconciles at once on the event loop",
            self.max_concurrent_reconciles, extra={"controller": self.name},
        )  # fmt: skip

    def stop(self, timeout: float | None = None) -> bool:
        """As :meth:`Controller.stop`: drain the queue and wait for the reconciles in flight
        (the feeder ends once every slot is back)."""
        stopped = super().stop(timeout)
        if self._own_loop is not None:  # what outlived the timeout is cancelled now
            self._own_loop.close()
        return stopped

    def _feed(self) -> None:
        if self.wait_for_sync and not self.context.wait_for_cache_sync(stop=self._stop):
            self.logger.info("stopped before the caches synced; not reconciling")
            return
        assert self._event_loop is not None
        while True:
            self._slots.acquire()  # a reconcile's slot, given back when its coroutine ends
            try:
                key, priority = self._keys.get()
            except QueueShutDown:
                self._slots.release()
                break
            future: Future[None] = self._event_loop.submit(self._reconcile_one(key, priority))
            future.add_done_callback(self._report)
        for _ in range(self._limit):  # every reconcile in flight ended
            self._slots.acquire()
        for _ in range(self._limit):
            self._slots.release()

    async def _reconcile_one(self, key: str, priority: int) -> None:
        try:
            admitted, shard = self._admit(key)
            if not admitted:
                return
            try:
                if self._ready(key, shard, priority):
                    try:
                        await self.reconcile(key)
                    except Exception as exc:
                        self._handle_error(key, exc, priority)
                    else:
                        self._forget(key)
            finally:
                self._finish(shard)
        finally:
            self.queue.done(key)
            self._slots.release()

    def _report(self, future: Future[None]) -> None:
        """A failure outside ``reconcile`` (a bug here, or the loop cancelling it at close)."""
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self.logger.error(
                "reconciling failed outside reconcile: %s: %s", type(error).__name__, error,
                exc_info=error, extra={"controller": self.name},
            )  # fmt: skip
