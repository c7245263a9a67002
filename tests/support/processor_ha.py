"""Settings and checks for processor chaos tests: a simulator, a real Redis, an in-process
reflector, processors as child processes that record every handler call.

Every processor runs ``tests.support.recording_handler:FileRecorder``, which appends one JSON
line per handler call to ``<tmp_path>/<member>.jsonl`` (see that module for the fields). The checks
below read those logs back and return lists of problems (empty when fine), so a failing
assertion shows all of them at once:

* :func:`ownership_problems`: every handler call happened while the calling process held the
  shard's lease; each ownership period (one lease epoch of one shard) belongs to one process, and
  the periods of a shard follow each other in time without overlapping;
* :func:`handler_order_problems` and :func:`stream_problems`: per object, the calls follow
  stream order, with nothing skipped or repeated while one owner applies a shard;
* :func:`deletion_problems`: every deletion on the streams reached ``on_delete``;
* :func:`final_stores`: the union of the stores the final owners hold (replayed from the log)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from apiserver_sim import Simulator
from tests.support.bus import Bus, Entry, ProcessorProcess
from tests.support.handler_calls import Call, read_calls
from tests.support.waiting import wait_until

SHARDS = 8
LEASE = 2.0
RENEW = 1.5
RETRY = 0.2
HANDLER = "tests.support.recording_handler:FileRecorder"


def processor_settings(redis_url: str, member: str, **extra: object) -> dict[str, str]:
    """Settings of a fast-failover processor for pods, by field name (``buffer_size=100``)."""
    settings: dict[str, object] = {
        "resource": "pods", "redis_url": redis_url, "shard_count": SHARDS, "handler": HANDLER,
        "http_host": "127.0.0.1", "http_port": 0, "lease_duration": LEASE,
        "renew_deadline": RENEW, "retry_period": RETRY, "heartbeat_interval": 0.1,
        "member_ttl": 0.6, "member_id": member, "log_level": "info", **extra,
    }  # fmt: skip
    return {name: str(value) for name, value in settings.items()}


# --- the recorded handler calls ----------------------------------------------------------------


def live_calls(calls: Iterable[Call], member: str) -> int:
    """How many live (non-initial-list) calls ``member`` made."""
    return sum(1 for c in calls if c.member == member and not (c.kind == "add" and c.initial))


def periods(calls: Iterable[Call]) -> dict[tuple[int, int | None], list[Call]]:
    """Calls per ownership period ``(shard, lease epoch)``, each in call order."""
    grouped: dict[tuple[int, int | None], list[Call]] = defaultdict(list)
    for call in calls:
        grouped[(call.shard, call.epoch)].append(call)
    for group in grouped.values():
        group.sort(key=lambda c: (c.member, c.pid, c.seq))
    return grouped


# --- checks ------------------------------------------------------------------------------------

_DEADLINE_SLACK = 0.5
"""Seconds between a renew deadline passing and the handler thread seeing the shard stopped."""


def ownership_problems(
    calls: Sequence[Call], killed: Mapping[str, float], *, renew_deadline: float | None = None
) -> list[str]:
    """No shard applied by two processors at once.

    * Every call started while its process held the shard's lease (``mine``). A call whose
      lease could not be read (Redis away) started at most ``renew_deadline`` seconds (plus
      scheduling slack) after the reads began to fail: a processor stops calling handlers for
      a shard once its renewals have failed that long.
    * An ownership period (a shard's lease epoch) belongs to one process: epochs are never
      reused, so two processes in one epoch would be two owners at once.
    * A shard's periods, in epoch order, follow each other in time: the first call of a period
      starts after the last call of the previous one returned. (A killed owner's last calls
      returned before its kill time, ``killed[member]``: checked as well.)
    """
    problems = [f"{c}: the lease was held by {c.holder!r}" for c in calls if not c.mine][:20]
    if renew_deadline is not None:
        unread = [(c, c.t - c.unread_since) for c in calls if c.unread_since is not None]
        problems += [
            f"{c}: {after:.2f} s after Redis stopped answering, past the renew deadline "
            f"({renew_deadline} s)"
            for c, after in unread
            if after > renew_deadline + _DEADLINE_SLACK
        ][:10]
    for member, at in killed.items():
        late = [c for c in calls if c.member == member and c.end > at]
        problems += [f"{c}: after {member} was killed at {at:.3f}" for c in late[:5]]
    by_shard: dict[int, list[tuple[int, list[Call]]]] = defaultdict(list)
    for (shard, epoch), group in periods(calls).items():
        owners = {(c.member, c.pid) for c in group}
        if len(owners) > 1:
            problems.append(f"shard {shard} epoch {epoch} applied by {sorted(owners)}")
        if epoch is not None:
            by_shard[shard].append((epoch, group))
    for shard, runs in by_shard.items():
        runs.sort(key=lambda run: run[0])
        for (epoch_a, a), (epoch_b, b) in itertools.pairwise(runs):
            last_end = max(c.end for c in a)
            first = min(b, key=lambda c: c.t)
            if first.t < last_end:
                problems.append(
                    f"shard {shard}: epoch {epoch_b} ({first}) started before epoch {epoch_a} "
                    f"of {a[0].member} ended at {last_end:.3f}"
                )
    return problems


def handler_order_problems(calls: Sequence[Call], *, view: bool = False) -> list[str]:
    """Per object, the handler calls follow stream order.

    Within one ownership period (its calls are one process's, in call order): first the
    takeover's deletions, then the initial list (``on_add(obj, True)``), then live deltas;
    per key, an add only while absent, an update or a deletion only while present or (a
    deletion) as the key's first call (a deletion from the unacknowledged range); an update's
    old object is the previous call's; resourceVersions strictly increase, except that a
    tombstone carries the last known state (its RV may repeat the previous one); nothing after
    a deletion. Across periods, in epoch order: RVs never go backwards (a new owner's initial
    list may repeat the RV the previous owner saw last; a new owner's tombstone carries the state
    the key was recorded with, which may be older), and a deleted key never comes back (a
    re-delivered deletion is allowed).

    ``view``: the calls of a group with a selection (``processor_svc.view``), where an object
    that leaves the view is deleted with its last state (its RV repeats the previous call's)
    and may be added again later, when it matches again.
    """
    problems: list[str] = []
    for (shard, epoch), group in sorted(periods(calls).items(), key=lambda kv: str(kv[0])):
        problems += _period_problems(f"shard {shard} epoch {epoch}", group, view=view)
    by_key: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_key[call.key].append(call)
    for key, history in by_key.items():
        history.sort(key=lambda c: (c.epoch if c.epoch is not None else -1, c.seq))
        for a, b in itertools.pairwise(history):
            if a.epoch == b.epoch:
                continue  # checked per period
            # A new owner's tombstone (DeletedFinalStateUnknown) carries the state the held set
            # recorded, the one the key entered with: updates are not recorded (one write per
            # transition), so it may be older than the last update told (docs/handlers.md,
            # "Keeping state outside the process"). Seen under load on main before issue 35.
            if b.rv_int < a.rv_int and not b.tombstone:
                problems.append(f"{key}: {b} went back from {a}")
            if a.kind == "delete" and b.kind != "delete" and not view:
                problems.append(f"{key}: {b} after its deletion {a}")
    return problems[:30]


def _period_problems(period: str, group: Sequence[Call], *, view: bool) -> list[str]:
    problems: list[str] = []
    phase = 0  # 0: the takeover's deletions, 1: the initial list, 2: live deltas
    last: dict[str, Call] = {}
    for call in group:
        where = f"{period}: {call}"
        if call.kind == "add" and call.initial:
            if phase > 1:
                problems.append(f"{where}: initial-list add after live deltas")
            phase = 1
        elif call.kind != "delete" or call.key in last or phase > 0:
            phase = 2
        previous = last.get(call.key)
        if previous is not None:
            problems += [
                f"{where}: {problem}" for problem in _step_problems(previous, call, view=view)
            ]
        elif call.kind == "update":
            problems.append(f"{where}: update of an object the store did not have")
        last[call.key] = call
    return problems


def _step_problems(previous: Call, call: Call, *, view: bool) -> list[str]:
    """What is wrong with ``call`` right after ``previous`` (same key, same period)."""
    if previous.kind == "delete":
        if view and call.kind == "add" and call.rv_int > previous.rv_int:
            return []  # it matches the view again
        return [f"after its deletion {previous}"]
    if call.kind == "add":
        return [f"added while present ({previous})"]
    problems = []
    last_state = call.tombstone or (view and call.kind == "delete")
    if not (last_state and call.rv == previous.rv) and call.rv_int <= previous.rv_int:
        problems.append(f"not after {previous}")
    if call.kind == "update" and call.old_rv != previous.rv:
        problems.append(f"old object at {call.old_rv}, not {previous.rv}")
    return problems


_KINDS = {"Added": "add", "Updated": "update", "Deleted": "delete"}


def stream_problems(calls: Sequence[Call], entries: Iterable[Entry]) -> list[str]:
    """Within one ownership period, the handler calls are the shard's stream, delta for delta.

    Per key: an initial-list add carries the version of one of the key's upserts on the stream
    (the snapshot's), a takeover deletion the key's deletion entry; after that, each live call
    is the key's *next* entry on the stream -- same kind, same RV, same tombstone flag -- so no
    delta was skipped, repeated or reordered while one owner applied the shard.
    """
    stream: dict[str, list[Entry]] = defaultdict(list)
    for entry in entries:
        stream[entry.key].append(entry)
    problems: list[str] = []
    for (shard, epoch), group in periods(calls).items():
        position: dict[str, int] = {}  # per key: the index of the entry applied last
        for call in group:
            history = stream.get(call.key, [])
            where = f"shard {shard} epoch {epoch}: {call}"
            if (call.kind == "add" and call.initial) or (
                call.kind == "delete" and call.key not in position
            ):
                matches = [
                    i for i, e in enumerate(history)
                    if e.rv == call.rv and (e.is_deletion == (call.kind == "delete"))
                ]  # fmt: skip
                if not matches:
                    problems.append(f"{where}: no such entry on the stream")
                    continue
                position[call.key] = matches[-1]
                continue
            index = position.get(call.key, -1) + 1
            if index >= len(history):
                problems.append(f"{where}: the stream has no entry after the last one applied")
                continue
            entry = history[index]
            if (_KINDS[entry.type], entry.rv, entry.tombstone) != (
                call.kind,
                call.rv,
                call.tombstone,
            ):
                problems.append(
                    f"{where}: the next entry is {entry.type}@{entry.rv} (stream id "
                    f"{entry.stream_id}, tombstone {entry.tombstone})"
                )
            position[call.key] = index
    return problems[:30]


def deletion_problems(calls: Sequence[Call], entries: Iterable[Entry]) -> list[str]:
    """Every deletion on the streams -- watched (final state) or inferred by a relist
    (tombstone) -- of a key the handlers were told about reached ``on_delete`` with the same RV
    and kind, and ``on_delete`` was never called for anything without a deletion there.

    A key the handlers never heard of (created and deleted while its shard was unowned, or
    before an owner read it) gets no ``on_delete``, except when an owner handed it to its
    handlers and died before the call (``processor_svc.held_keys``): then with the same RV and
    kind too. Sound because the reflector never trims here (retention keeps 10k entries per
    shard and runs hourly) and never re-creates a name (the churn's names only grow): each
    deleted key has exactly one deletion entry, and a processor calls ``on_delete`` for it
    live, or in a takeover when the entry was not acknowledged, or never again once it was.
    """
    deletions = {e.key: e for e in entries if e.is_deletion}
    told = {call.key for call in calls if call.kind != "delete"}
    deletes: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if call.kind == "delete":
            deletes[call.key].append(call)
    problems: list[str] = []
    for key, entry in deletions.items():
        seen = deletes.get(key)
        if not seen:
            if key in told:
                kind = "tombstone" if entry.tombstone else "deletion"
                problems.append(f"{key}: {kind}@{entry.rv} (stream id {entry.stream_id}) never "
                                "reached on_delete")  # fmt: skip
            continue
        for call in seen:
            if call.rv != entry.rv or call.tombstone != entry.tombstone:
                problems.append(f"{call}: the stream's deletion is {entry.type}@{entry.rv} "
                                f"(tombstone {entry.tombstone})")  # fmt: skip
    for key in deletes.keys() - deletions.keys():
        problems.append(f"{deletes[key][0]}: no deletion of {key} on the streams")
    return problems[:30]


def final_stores(calls: Sequence[Call], epochs: Mapping[int, int]) -> dict[str, str]:
    """The union of the shards' stores as their current owners hold them: per shard, the calls
    of the current ownership period (``epochs``: shard -> lease epoch now) replayed in order
    (an add or update sets the key's RV, a deletion removes it). A takeover replaces the store
    with the initial list, so that period's calls say everything its store holds."""
    store: dict[str, str] = {}
    for (shard, epoch), group in periods(calls).items():
        if epoch is None or epochs.get(shard) != epoch:
            continue
        for call in group:
            if call.kind == "delete":
                store.pop(call.key, None)
            else:
                store[call.key] = call.rv
    return store


def store_differences(store: Mapping[str, str], truth: Mapping[str, str]) -> list[str]:
    wrong = sorted(k for k in store.keys() | truth.keys() if store.get(k) != truth.get(k))
    return [f"{k}: stores {store.get(k)}, simulator {truth.get(k)}" for k in wrong[:20]]


# --- waiting -----------------------------------------------------------------------------------


def assignment_problems(bus: Bus, live: Sequence[ProcessorProcess]) -> list[str]:
    """Every shard owned by one of ``live``, the counts within one of each other."""
    holders = bus.shard_holders()
    counts = {p.member_id: len(p.owned_shards(bus)) for p in live}
    problems = [
        f"shard {shard}: held by {holder}"
        for shard, holder in holders.items()
        if not any(p.holds(holder) for p in live)
    ]
    if max(counts.values()) - min(counts.values()) > 1:
        problems.append(f"unbalanced: {counts}")
    return problems


def wait_balanced(bus: Bus, live: Sequence[ProcessorProcess], timeout: float = 30.0) -> None:
    """Until the shards are spread over ``live`` (within one) and every one of them is ready."""

    def settled() -> bool:
        if assignment_problems(bus, live):
            return False
        return all(p.probe("/readyz") == 200 for p in live)

    wait_until(
        settled, timeout, interval=0.1,
        what=lambda: f"balanced, ready processors: {assignment_problems(bus, live)}",
    )  # fmt: skip


def wait_converged(
    bus: Bus, sim: Simulator, live: Sequence[ProcessorProcess], records: Path, timeout: float = 30.0
) -> list[Call]:
    """Until the shards are balanced over ``live``, all ready, and the final owners' stores
    (replayed from the log) are the simulator's ground truth; returns the calls."""
    wait_balanced(bus, live, timeout)
    found: list[Call] = []

    def converged() -> bool:
        found[:] = read_calls(records)
        epochs = bus.shard_epochs()
        if assignment_problems(bus, live):
            return False
        return final_stores(found, epochs) == sim.ground_truth("pods")

    def why() -> str:
        calls = read_calls(records)
        wrong = store_differences(final_stores(calls, bus.shard_epochs()), sim.ground_truth("pods"))
        hints = stream_problems(calls, bus.all_entries())[:5]
        return f"the stores to match the ground truth: {wrong}; stream problems: {hints}"

    wait_until(converged, timeout, interval=0.2, what=why)
    return found


def no_tracebacks(processes: Iterable[ProcessorProcess]) -> list[str]:
    return [p.log_path.name for p in processes if "Traceback" in p.log()]
