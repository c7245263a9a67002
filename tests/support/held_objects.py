"""What a processor group's handlers were told, taken together across its members: replayed per
key into the objects they hold, and checked against the group's truth (issue 33).

An application that keeps its state outside the process (a database, an index, an exporter)
ends up with exactly what its handlers were told, whichever member told it. So the calls of
every member and every restart of a group (:func:`tests.support.handler_calls.read_calls`) are
merged into one sequence in the order they happened, :func:`in_call_order`: each process's own
calls in its order, the processes' sequences interleaved by the wall-clock time each call
started (``time.time()``, one machine). Per key that is the true order, because two processes
never call handlers for one shard at once: the next owner's first call starts after the
previous owner stopped, which a kill -9 or a released lease puts between them.

:func:`replay` then holds a key from an add until a deletion (an update changes the state
held), and :class:`Told` names what a client-go informer's handlers are never shown:

* a deletion or an update of a key the group's handlers were **never told about**;
* an update of a key they do not hold (after its deletion), or from a state they were not
  told last; an add (outside an initial list) of a key they already hold;
* at the end, against the truth (``{key: resourceVersion}`` of the objects the group's view
  selects in the API): a **ghost** (held, not in the truth: gone from the API, or still there
  out of the view, ``outside_view``), a **missing** object, a **stale** one (held at another
  version);
* with ``allowed_parts``, an object handed over with a part its projection removes.

What at-least-once delivery does is not a problem, only counted (:attr:`Told.allowed`): an
initial list's add of a key held (a new owner re-delivers its shards), a repeated deletion (one
handled but not acknowledged when its owner stopped is delivered again), and a deletion of a
key never told whose entry an owner read and stopped before acknowledging (``maybe_told``: it
cannot know whether its handlers were called, so the next owner tells the deletion).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from tests.support.handler_calls import Call

__all__ = ["PROBLEMS", "Told", "in_call_order", "replay"]

PROBLEMS = {
    "deleted_never_told": "deletions of keys the handlers were never told about",
    "updated_never_told": "updates of keys the handlers were never told about",
    "updated_not_held": "updates of keys the handlers had been told were deleted",
    "updated_from_other_state": "updates from another state than the last one told",
    "added_while_held": "adds (not an initial list) of keys the handlers already held",
    "ghost": "ghosts: held at the end, gone from the API",
    "left_unseen": "ghosts: held at the end, still there but out of the view (a leave never told)",
    "missing": "missing: in the truth, not held at the end",
    "stale": "stale: held at another resourceVersion than the truth's",
    "projection_leak": "calls handed a part the group's projection removes",
}
"""Every kind of problem :class:`Told` finds, and how its report names it."""


def in_call_order(calls: Iterable[Call]) -> list[Call]:
    """Every process's calls in their own order (``seq``), the processes interleaved by the time
    each call started (module docstring)."""
    per_process: dict[tuple[str, int], list[Call]] = defaultdict(list)
    for call in calls:
        per_process[(call.member, call.pid)].append(call)
    ordered = [sorted(own, key=lambda c: c.seq) for own in per_process.values()]
    return list(heapq.merge(*ordered, key=lambda c: c.t))


@dataclass
class Told:
    """What a group's handlers were told, replayed (:func:`replay`)."""

    history: dict[str, list[Call]] = field(default_factory=dict)
    """Per key, every call in the order they happened."""
    held: dict[str, str] = field(default_factory=dict)
    """key -> the resourceVersion of the last state the handlers hold."""
    problems: dict[str, dict[str, list[Call]]] = field(default_factory=dict)
    """Per kind of problem (:data:`PROBLEMS`), per key, the calls that made it (empty for the
    end state's problems)."""
    truth: Mapping[str, str] = field(default_factory=dict)
    allowed: dict[str, int] = field(default_factory=dict)
    """What at-least-once delivery did (module docstring), counted: ``deleted_again``,
    ``deleted_maybe_told``."""

    def found(self, kind: str, key: str, call: Call | None = None) -> None:
        calls = self.problems.setdefault(kind, {}).setdefault(key, [])
        if call is not None:
            calls.append(call)

    def count(self, kind: str) -> int:
        """How many keys have this kind of problem."""
        return len(self.problems.get(kind, {}))

    def counts(self) -> dict[str, int]:
        """Keys per kind of problem found (only those found)."""
        return {kind: self.count(kind) for kind in PROBLEMS if self.count(kind)}

    def calls_of(self, kind: str) -> int:
        """How many calls made this kind of problem."""
        return sum(len(calls) for calls in self.problems.get(kind, {}).values())

    def report(self, what: str, *, keys_per_kind: int = 3, calls_per_key: int = 12) -> str:
        """Counts per kind of problem, then for the first few keys of each its whole call
        history (the last ``calls_per_key`` calls) and its truth; empty when nothing is wrong."""
        if not self.problems:
            return ""
        lines = [
            f"{what}: {self.counts()} (keys), over {len(self.history)} keys told "
            f"(at-least-once: {self.allowed})"
        ]
        for kind, per_key in self.problems.items():
            lines.append(f"- {PROBLEMS[kind]}: {len(per_key)} keys, {self.calls_of(kind)} calls")
            for key in sorted(per_key)[:keys_per_kind]:
                truth = self.truth.get(key)
                lines.append(
                    f"  {key}: truth {'absent' if truth is None else '@' + truth}, "
                    f"held {self.held.get(key, 'nothing')}; calls:"
                )
                history = self.history.get(key, [])
                if len(history) > calls_per_key:
                    lines.append(f"    ... {len(history) - calls_per_key} earlier calls")
                lines += [f"    {_describe(call)}" for call in history[-calls_per_key:]]
        return "\n".join(lines)


def _describe(call: Call) -> str:
    parts = f" parts {','.join(call.parts)}" if call.parts else ""
    old = f" (old @{call.old_rv})" if call.kind == "update" else ""
    return f"{call}{old}{parts}"


def replay(
    calls: Iterable[Call],
    truth: Mapping[str, str],
    *,
    outside_view: Collection[str] = (),
    maybe_told: Collection[str] = (),
    allowed_parts: Collection[str] | None = None,
) -> Told:
    """Replay a group's calls (every member's, :func:`in_call_order`) into what its handlers
    hold, and check it (module docstring) against ``truth``; ``outside_view``: the keys of the
    objects the API has that the view does not select; ``maybe_told``: the keys of entries an
    owner read and left unacknowledged (:class:`tests.support.group_pipeline.InFlight`);
    ``allowed_parts``: what the group's projection keeps of an object
    (:func:`tests.support.recording_handler.parts_of`), ``None`` to skip that check."""
    told = Told(truth=truth)
    maybe = set(maybe_told)
    for call in in_call_order(calls):
        told.history.setdefault(call.key, []).append(call)
        _step(told, call, maybe)
        if allowed_parts is not None and not set(call.parts + call.old_parts) <= set(allowed_parts):
            told.found("projection_leak", call.key, call)
    outside = set(outside_view)
    for key in told.held.keys() - truth.keys():
        told.found("left_unseen" if key in outside else "ghost", key)
    for key in truth.keys() - told.held.keys():
        told.found("missing", key)
    for key in told.held.keys() & truth.keys():
        if told.held[key] != truth[key]:
            told.found("stale", key)
    return told


def _step(told: Told, call: Call, maybe_told: set[str]) -> None:
    """Apply one call to what the handlers hold, noting what a client-go informer never does."""
    key, held = call.key, told.held
    told_before = len(told.history[key]) > 1
    if call.kind == "add":
        if key in held and not call.initial:
            told.found("added_while_held", key, call)
        held[key] = call.rv
    elif call.kind == "update":
        if key not in held:
            told.found("updated_not_held" if told_before else "updated_never_told", key, call)
        elif call.old_rv != held[key]:
            told.found("updated_from_other_state", key, call)
        held[key] = call.rv
    elif key in held:
        del held[key]
    elif told_before or key in maybe_told:
        kind = "deleted_again" if told_before else "deleted_maybe_told"
        told.allowed[kind] = told.allowed.get(kind, 0) + 1
    else:
        told.found("deleted_never_told", key, call)
