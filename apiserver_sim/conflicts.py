"""The 409 answers the simulator gave, counted by resource, verb and reason.

A controller under test must not race its own writes (an update carrying a stale
resourceVersion, a create of a name that exists, a delete whose preconditions no longer hold).
Its client may retry a 409 quietly and the run still converges, so the outcome cannot tell;
the server that answered can. Tests read the counts from Python (:meth:`Simulator.conflicts`)
or, with the simulator in another process, from ``GET /_sim/conflicts``.
"""

from __future__ import annotations

import threading

__all__ = ["ConflictCounter", "ConflictTable", "total_conflicts"]

ConflictTable = dict[str, dict[str, dict[str, int]]]
"""``{resource: {verb: {reason: count}}}``, e.g.
``{"configmaps": {"update": {"Conflict": 2}}, "widgets.example.com": {"create":
{"AlreadyExists": 1}}}``. ``resource`` is the qualified name (``configmaps``,
``widgets.example.com``), with ``/status`` appended for a write through the status subresource
(``widgets.example.com/status``); ``verb`` is the Kubernetes verb of the request (``create``,
``update``, ``patch``, ``delete``); ``reason`` is the Status reason (``Conflict``,
``AlreadyExists``). Only non-zero counts appear: no 409 at all is ``{}``."""


class ConflictCounter:
    """Thread-safe counts of 409 answers (every connection thread records into one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}

    def record(self, resource: str, verb: str, reason: str) -> None:
        key = (resource, verb, reason)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> ConflictTable:
        """A fresh :data:`ConflictTable` of the counts so far."""
        with self._lock:
            counts = dict(self._counts)
        return _table(counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> ConflictTable:
        """Start again from zero; returns the counts that were cleared."""
        with self._lock:
            counts, self._counts = self._counts, {}
        return _table(counts)


def _table(counts: dict[tuple[str, str, str], int]) -> ConflictTable:
    table: ConflictTable = {}
    for (resource, verb, reason), count in sorted(counts.items()):
        table.setdefault(resource, {}).setdefault(verb, {})[reason] = count
    return table


def total_conflicts(table: ConflictTable) -> int:
    """How many 409s ``table`` counts in all."""
    return sum(sum(reasons.values()) for verbs in table.values() for reasons in verbs.values())
