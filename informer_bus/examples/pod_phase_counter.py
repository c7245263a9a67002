"""Pods per phase, from the cache; phase transitions, from events.

Run it with ``informer-bus processor --resource pods
--handler informer_bus.examples.pod_phase_counter:PodPhaseCounter``: every 10 s the processor's
log shows ``counts()`` (``pods per phase in the shards this processor owns: Pending 4, ...``).

The two halves show the two ways to use events. ``counts()`` is *level-based*: it reads the
lister's ``phase`` index every time, so it is right after replays, takeovers (which re-deliver
every object as ``on_add``) and handovers (which remove a shard's objects without any event).
Counting ``on_add``/``on_delete`` calls instead would drift with every one of those.
``recent_transitions`` is *edge-based*: it records ``on_update`` calls whose phase changed.
Edges are best effort by nature: a change made while nobody owned the shard is seen only as
its end state in the next owner's initial list (``on_add``), so it is never recorded here.
"""

from __future__ import annotations

import threading
from collections import deque

from informer_bus import DeletedFinalStateUnknown, HandlerContext, Obj, meta_namespace_key

__all__ = ["PHASE_INDEX", "PodPhaseCounter", "phase_index"]

PHASE_INDEX = "phase"


def phase_index(pod: Obj) -> list[str]:
    """``[status.phase]``, or ``[]`` for a pod without one yet (it is then in no phase)."""
    phase = (pod.get("status") or {}).get("phase")
    return [phase] if isinstance(phase, str) and phase else []


def _phase(pod: Obj) -> str | None:
    phases = phase_index(pod)
    return phases[0] if phases else None


class PodPhaseCounter:
    """A handler: the processor constructs it with a :class:`HandlerContext`, calls
    :meth:`start` before the first shard arrives and :meth:`stop` at shutdown."""

    def __init__(
        self, context: HandlerContext, *, history: int = 100, report_every: float = 10.0
    ) -> None:
        self._lister = context.lister
        self._logger = context.logger
        self._report_every = report_every  # seconds between two logs of counts(); 0: none
        self._stopping = threading.Event()
        self._reporter: threading.Thread | None = None
        # Index once, in every shard store, present and future: counts() then costs one
        # index lookup per phase instead of a scan of every pod.
        if PHASE_INDEX not in self._lister.get_indexers():
            self._lister.add_indexers({PHASE_INDEX: phase_index})
        # Handlers run on shard threads, counts() on whatever thread asks: guard the deque.
        self._lock = threading.Lock()
        self._transitions: deque[tuple[str, str | None, str | None]] = deque(maxlen=history)

    def counts(self) -> dict[str, int]:
        """``{phase: pods}`` over the shards this processor owns right now."""
        return {
            phase: len(self._lister.index_keys(PHASE_INDEX, phase))
            for phase in self._lister.list_index_func_values(PHASE_INDEX)
        }

    def recent_transitions(self) -> list[tuple[str, str | None, str | None]]:
        """The last ``history`` phase changes seen, oldest first: ``(key, old, new)``."""
        with self._lock:
            return list(self._transitions)

    def start(self) -> None:
        """Log counts() every ``report_every`` seconds, from a thread of its own."""
        if self._report_every > 0 and self._reporter is None:
            self._reporter = threading.Thread(
                target=self._report, name="pod-phase-counts", daemon=True
            )
            self._reporter.start()

    def stop(self, timeout: float | None = None) -> bool:
        """End the reports; ``False`` if the thread outlived ``timeout``."""
        self._stopping.set()
        if self._reporter is not None:
            self._reporter.join(timeout)
            return not self._reporter.is_alive()
        return True

    def _report(self) -> None:
        while not self._stopping.wait(self._report_every):
            counts = sorted(self.counts().items())
            self._logger.info(
                "pods per phase in the shards this processor owns: %s",
                ", ".join(f"{phase} {pods}" for phase, pods in counts) or "none",
            )

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        """Nothing to do: counts() reads the cache, which already holds ``obj``."""

    def on_update(self, old: Obj, new: Obj) -> None:
        old_phase, new_phase = _phase(old), _phase(new)
        if old_phase == new_phase:  # includes resyncs, where old is new
            return
        key = meta_namespace_key(new)
        self._logger.info("pod %s: %s -> %s", key, old_phase, new_phase)
        with self._lock:
            self._transitions.append((key, old_phase, new_phase))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        """Nothing to do: the store dropped the pod before this call, so counts() is current."""
