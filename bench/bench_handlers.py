"""Handlers that bench/pipeline.py loads into its processor children (``--handler``).

Not for production: they report to the bench through files in ``$BENCH_PIPELINE_DIR``, one
pair per processor process (``<pid>`` is the child's process id):

* ``updates-<pid>.bin``: one :data:`RECORD` per ``on_update`` (read back as :class:`Update`):
  the churn step the simulator wrote into the object's ``sim.informer-bus.io/churn``
  annotation, the simulator's commit stamp from ``sim.informer-bus.io/committed-at`` (-1 for
  either when the update has none), and the CLOCK_MONOTONIC nanoseconds at which the handler
  was called. CLOCK_MONOTONIC is one clock for every process of the machine, so the handler
  time minus the stamp is the update's latency, with no estimate and no clock skew.
* ``stats-<pid>.json``: running counts (initial-list adds, later adds, updates, deletes),
  replaced atomically.

The handler thread only appends to a deque; a flusher thread writes both files every 20 ms
(and once more at ``stop``, if the processor calls it), so the handler's own cost stays a few
attribute lookups. That flusher is the one thread a bench handler adds to the process it runs
in (:attr:`Reporting.threads`): a count of a processor's threads leaves it out.

:class:`KeyOnly` writes no ``updates`` file: it reads nothing of an object but its key, so it
cannot see the commit stamp; its stats carry the clock of its last ``on_update`` instead, which
is all a burst needs (:meth:`processor_group.Group.last_update`).
"""

from __future__ import annotations

import asyncio
import collections
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from apiserver_sim.load import CHURN_ANNOTATION, COMMITTED_AT_ANNOTATION
from common.object_keys import meta_namespace_key

__all__ = [
    "DIR_ENV",
    "RECORD",
    "IoBound",
    "KeyOnly",
    "Null",
    "Reporting",
    "SlowAsync",
    "SlowSync",
    "Trivial",
    "Update",
    "handler_clock_ns",
    "records_updates",
]

DIR_ENV = "BENCH_PIPELINE_DIR"
RECORD = struct.Struct("<qqq")
"""(churn step, commit stamp ns, handler ns) per update: see :class:`Update`."""
_FLUSH_INTERVAL = 0.02


def handler_clock_ns() -> int:
    """The clock the simulator stamps commits with (``load.COMMITTED_AT_ANNOTATION``)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Update(NamedTuple):
    """One update a handler saw, as recorded."""

    step: int
    """The churn step (-1: not a churn update)."""
    committed_ns: int
    """The simulator's commit stamp (-1: the churn was not asked to stamp)."""
    handled_ns: int
    """When the handler was called, on the same clock as the stamp."""

    @property
    def handled(self) -> float:
        """:attr:`handled_ns` in seconds (``time.monotonic()``'s scale)."""
        return self.handled_ns / 1e9


class Reporting:
    """Counts a handler's calls and writes them, with whatever else it keeps (:meth:`_flush`),
    to ``$BENCH_PIPELINE_DIR`` from one flusher thread, so the calls themselves stay cheap."""

    threads = 1
    """Threads this adds to the process it runs in (the flusher): not the processor's own."""
    writes_updates = False
    """Whether it writes ``updates-<pid>.bin`` (:class:`Trivial`), or only its stats."""

    def __init__(self) -> None:
        self.dir = Path(os.environ[DIR_ENV])
        self.pid = os.getpid()
        self.counts = {"initial_adds": 0, "adds": 0, "updates": 0, "deletes": 0}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, name="bench-flush", daemon=True)
        # Started here too, so the in-process readers of bench/compare.py, which call no
        # start(), flush as well; the processor's own start() call is then a no-op.
        self.start()

    # --- lifecycle (called by the processor) ----------------------------------------------

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._flush()

    def _flush_loop(self) -> None:
        while not self._stopping.wait(_FLUSH_INTERVAL):
            self._flush()

    def _flush(self) -> None:
        self._write_stats({"pid": self.pid, **self.counts})

    def _write_stats(self, stats: dict[str, int]) -> None:
        path = self.dir / f"stats-{self.pid}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(orjson.dumps(stats))
        os.replace(temporary, path)


class Trivial(Reporting):
    """Counts events and stamps every update, reading ``new``'s annotations for the simulator's
    churn step and commit stamp; does nothing else."""

    delay = 0.0
    """Seconds of (simulated) I/O per live event."""
    writes_updates = True

    def __init__(self, context: Any = None) -> None:
        self._records: collections.deque[bytes] = collections.deque()
        self._pack = RECORD.pack
        super().__init__()

    # --- the handler ----------------------------------------------------------------------

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        if is_in_initial_list:
            self.counts["initial_adds"] += 1
            return
        self.counts["adds"] += 1
        if self.delay:
            time.sleep(self.delay)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        now = handler_clock_ns()
        annotations = new["metadata"].get("annotations") or {}
        step = annotations.get(CHURN_ANNOTATION)
        committed = annotations.get(COMMITTED_AT_ANNOTATION)
        self._records.append(
            self._pack(
                -1 if step is None else int(step), -1 if committed is None else int(committed), now
            )
        )
        self.counts["updates"] += 1
        if self.delay:
            time.sleep(self.delay)

    def on_delete(self, obj: Any) -> None:
        self.counts["deletes"] += 1
        if self.delay:
            time.sleep(self.delay)

    def _flush(self) -> None:
        records = self._records
        chunk = [records.popleft() for _ in range(len(records))]
        if chunk:
            with (self.dir / f"updates-{self.pid}.bin").open("ab") as out:
                out.write(b"".join(chunk))
        super()._flush()


class KeyOnly(Reporting):
    """Counts every call and takes the object's key, nothing else of it (issue 35: what the
    processor itself costs when a handler reads nothing of the objects it is given; ``old`` is
    never touched, and of ``new`` only what :func:`common.object_keys.meta_namespace_key` reads).

    With no commit stamp it reports no latency: its stats carry ``last_update_ns``, the clock
    of its latest ``on_update``, for a burst's end."""

    def __init__(self, context: Any = None) -> None:
        self.last_key = ""
        self.last_update_ns = 0
        super().__init__()

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        self.last_key = meta_namespace_key(obj)
        self.counts["initial_adds" if is_in_initial_list else "adds"] += 1

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.last_key = meta_namespace_key(new)
        self.last_update_ns = handler_clock_ns()  # written before the count the bench waits on
        self.counts["updates"] += 1

    def on_delete(self, obj: Any) -> None:
        self.last_key = meta_namespace_key(obj)  # a tombstone's key too
        self.counts["deletes"] += 1

    def on_key_event(self, key: str, change: str, is_in_initial_list: bool) -> None:
        """Live changes as keys alone (``processor_svc.key_events``): nothing is decoded."""
        self.last_key = key
        if change == "update":
            self.last_update_ns = handler_clock_ns()
        self.counts[change + "s"] += 1

    def _flush(self) -> None:
        # The counts before the clock: a count the bench reads as final comes with the clock
        # of that very call (the call writes the clock first).
        self._write_stats({"pid": self.pid, **self.counts, "last_update_ns": self.last_update_ns})


class Null:
    """Does nothing at all: what the processor itself spends on an event, for a bench that
    counts progress in Redis (several of these can run in one process; :class:`Trivial`'s
    report files are per process)."""

    def __init__(self, context: Any = None) -> None:
        pass

    def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        pass

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        pass

    def on_delete(self, obj: Any) -> None:
        pass


class IoBound(Trivial):
    """:class:`Trivial` plus 2 ms of waiting (an I/O call) per live event. Adds of the initial
    list do not wait: the bench measures the watch events, not a 200-second initial sync."""

    delay = 0.002


class SlowSync(Trivial):
    """:class:`Trivial` plus 50 ms of blocking I/O (``time.sleep``) per live event: a sync
    handler, called one event at a time (bench/async_handlers.py)."""

    delay = 0.05


class SlowAsync(Trivial):
    """:class:`SlowSync`'s 50 ms awaited (``asyncio.sleep``): an async handler, whose calls
    overlap on the processor's event loop up to ``--max-concurrent-reconciles``."""

    delay = 0.0  # the sync methods below do the counting and recording, and do not wait
    wait = 0.05

    async def on_add(self, obj: dict[str, Any], is_in_initial_list: bool) -> None:
        Trivial.on_add(self, obj, is_in_initial_list)
        if not is_in_initial_list:
            await asyncio.sleep(self.wait)

    async def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        Trivial.on_update(self, old, new)
        await asyncio.sleep(self.wait)

    async def on_delete(self, obj: Any) -> None:
        Trivial.on_delete(self, obj)
        await asyncio.sleep(self.wait)


def records_updates(spec: str) -> bool:
    """Whether the handler ``bench_handlers:Class`` writes an ``updates`` file (a record per
    update, latency included), or at most its counts (:class:`KeyOnly`, :class:`Null`)."""
    handler = globals().get(spec.rpartition(":")[2])
    return bool(getattr(handler, "writes_updates", False))
