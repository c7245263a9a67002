"""The processor's one asyncio event loop, on a thread of its own, started on first use.

Async handlers and controllers (``async def on_update``, ``async def reconcile``) run their
coroutines here, beside the processor's threads rather than instead of them: the reading loop,
the ownership loop and sync handlers stay as they are, and a processor without async code
never starts this thread (the thread count of a process should depend on its code, not on
whether an async handler might appear).

One loop per processor, not one per handler: coroutines are cheap to interleave, and a single
loop is what async client libraries (``kubernetes_asyncio``, ``redis.asyncio``) expect their
sessions to live on. Shutdown order is the owner's business: everything that submits here is
stopped (and has waited, within its grace period, for what it started) before :meth:`close`
cancels whatever is still running, so no task outlives the processor and none is cancelled
within the grace period.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

__all__ = ["EventLoopThread"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

_CLOSE_TIMEOUT: Final = 5.0
"""How long :meth:`EventLoopThread.close` waits for cancelled tasks and the thread."""


class EventLoopThread:
    """An event loop running on its own daemon thread, created by the first :meth:`loop`."""

    def __init__(self, name: str = "processor-event-loop") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def started(self) -> bool:
        """Whether the loop's thread was started (something async used it)."""
        with self._lock:
            return self._thread is not None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started now if this is the first use; ``RuntimeError`` after
        :meth:`close`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the processor's event loop is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                # Daemon: a coroutine stuck past close() must not hang interpreter exit.
                thread = threading.Thread(
                    target=self._run, args=(loop, ready), name=self._name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Run ``coroutine`` on the loop; its future completes from the loop's thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop())

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` on the loop's thread (thread-safe)."""
        self.loop().call_soon_threadsafe(callback)

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def close(self, timeout: float = _CLOSE_TIMEOUT) -> None:
        """Cancel what still runs (its owners gave up on it), stop the loop, join its thread.
        Idempotent; a loop that never started costs nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout)
        except (TimeoutError, concurrent.futures.TimeoutError):
            log.error("tasks of the processor's event loop ignored their cancellation")
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            log.error("the processor's event loop did not stop; its thread is left behind")
            return
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def _cancel_all() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        log.warning("cancelling %d coroutines still running at shutdown", len(tasks))
        await asyncio.gather(*tasks, return_exceptions=True)
