"""Read back what a reflector published, for tests (layout: ``docs/architecture.md``).

* :class:`Bus`: one resource's shard streams decoded with :mod:`common.wire`, grouped per key in
  the order they were written (a key sharded by owner or label can move between shards:
  ``docs/architecture.md``, "Moves between shards"); the known state (``versions`` and
  ``objects``) per shard; the recorded layout; checkpoints, fences and the leader lease.
* Checks that return a list of problems (empty when fine), so an assertion shows all of them:
  :func:`duplicate_problems`, :func:`order_problems`, :func:`known_state_problems`,
  :func:`history_problems` (published deltas against the API server's event history) and
  :func:`republish_problems` (nothing unchanged re-published after a restart).
* :class:`ReflectorProcess` and :class:`ProcessorProcess`: ``python -m reflector_svc`` /
  ``python -m processor_svc`` as a child process with its log in a file, for kill -9 / SIGSTOP
  / SIGTERM tests.

Resource versions are compared as integers, as the publisher does (etcd revisions). Stream
entries are read with a client that does not decode responses (envelopes are bytes).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from common.publication import ResourceLayout
from common.redis_layout import DEFAULT_PREFIX, PROCESSOR_GROUP, ResourceKeys, ShardKeys
from common.shard_routing import ShardKeyChoice
from common.sharding import shard_for
from common.versions import is_integer_version
from common.wire import FIELD, DeltaEnvelope, Move, decode_envelope
from informer_bus.child_process import ChildProcess
from tests.support.waiting import wait_until

__all__ = [
    "Bus",
    "Entry",
    "History",
    "ProcessorProcess",
    "ReflectorProcess",
    "ServiceProcess",
    "as_history",
    "duplicate_problems",
    "history_problems",
    "known_state_problems",
    "order_problems",
    "republish_problems",
]


History = Mapping[str, Sequence[tuple[str, str]]]
"""Per key, in order: ``(type, rv)`` with the delta type's client-go spelling (``Added``,
``Updated``, ``Deleted``), e.g. an API server's watch events mapped to deltas."""


# --- reading the bus -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One decoded stream entry."""

    shard: int
    stream_id: str
    raw: bytes
    """The envelope exactly as stored (what ``objects`` holds for the key's last delta)."""
    envelope: DeltaEnvelope

    @property
    def type(self) -> str:
        """``Added``, ``Updated`` or ``Deleted``."""
        return self.envelope.type.value

    @property
    def key(self) -> str:
        return self.envelope.key

    @property
    def rv(self) -> str:
        return self.envelope.resource_version

    @property
    def tombstone(self) -> bool:
        return self.envelope.tombstone

    @property
    def is_deletion(self) -> bool:
        return self.type == "Deleted"

    @property
    def move(self) -> Move | None:
        """Set on the two halves of a move between shards."""
        return self.envelope.move

    @property
    def outgoing(self) -> bool:
        """The old shard's half of a move (a deletion naming where the object went)."""
        return self.envelope.move is not None and self.envelope.move.outgoing

    @property
    def incoming(self) -> bool:
        """The new shard's half of a move (an addition naming the outgoing half)."""
        return self.envelope.move is not None and not self.envelope.move.outgoing

    @property
    def order(self) -> tuple[int, int]:
        """Where the entry falls in its key's history across shards: its resourceVersion, and
        at equal ones a move's outgoing half before its incoming half (a relist moves an
        unchanged object with both at the object's version)."""
        rv = self.rv
        return (int(rv) if is_integer_version(rv) else 0, 1 if self.incoming else 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _named_half(entry: Entry) -> tuple[int | None, str] | None:
    """``(shard, stream id)`` of the outgoing half an incoming half names; ``None`` otherwise."""
    move = entry.move
    if move is None or move.outgoing:
        return None
    return move.from_shard, move.from_id


def _written_order(shards: Mapping[int, Sequence[Entry]]) -> list[Entry]:
    """One key's entries from each shard (each in stream order) in the order they were
    written: a move's incoming half right after the outgoing half it names; otherwise the next
    entry is the shard head with the lowest :attr:`Entry.order` among those not waiting for
    their outgoing half (the shard of the entry before first, at equal ones). Only heads are
    ever taken, so an entry out of order on its own shard stays so, for
    :func:`order_problems` to see."""
    queues = [collections.deque(entries) for entries in shards.values() if entries]
    written: list[Entry] = []
    emitted: set[tuple[int | None, str]] = set()
    while any(queues):
        heads = [queue[0] for queue in queues if queue]
        last = written[-1] if written else None
        chosen = None
        if last is not None and last.outgoing:
            named = (last.shard, last.stream_id)
            chosen = next((e for e in heads if _named_half(e) == named), None)
        if chosen is None:
            ready = [e for e in heads if (half := _named_half(e)) is None or half in emitted]
            ready = ready or heads
            chosen = min(ready, key=lambda e: (e.order, last is None or e.shard != last.shard))
        written.append(chosen)
        emitted.add((chosen.shard, chosen.stream_id))
        next(queue for queue in queues if queue and queue[0] is chosen).popleft()
    return written


class Bus:
    """One resource's shards in Redis, read-only. ``client`` must not decode responses."""

    def __init__(
        self,
        client: redis.Redis,
        resource: str = "pods",
        *,
        shard_count: int,
        prefix: str = DEFAULT_PREFIX,
        group: str = PROCESSOR_GROUP,
    ) -> None:
        self.client = client
        self.keys = ResourceKeys(prefix, resource)
        self.group = self.keys.group(group)
        self.shards = tuple(ShardKeys(prefix, resource, shard) for shard in range(shard_count))

    # streams

    def entries(self, shard: int, after: str | None = None, chunk: int = 5000) -> list[Entry]:
        """The shard's stream, oldest first (only entries after stream ID ``after`` if given)."""
        stream = self.shards[shard].stream
        start = "-" if after is None else f"({after}"
        result: list[Entry] = []
        while True:
            page: list[tuple[bytes, dict[bytes, bytes]]] = self.client.xrange(  # type: ignore[assignment]
                stream, min=start, max="+", count=chunk
            )
            for stream_id, fields in page:
                raw = fields[FIELD]
                result.append(Entry(shard, _text(stream_id), raw, decode_envelope(raw)))
            if len(page) < chunk:
                return result
            start = f"({result[-1].stream_id}"

    def all_entries(self, after: Mapping[int, str] | None = None) -> list[Entry]:
        """Every shard's entries, shard by shard, each in stream order; ``after`` maps a shard
        to a stream ID (see :meth:`positions`) to read only what came later."""
        result: list[Entry] = []
        for keys in self.shards:
            result += self.entries(keys.shard, None if after is None else after.get(keys.shard))
        return result

    def by_key(self, entries: Iterable[Entry] | None = None) -> dict[str, list[Entry]]:
        """Entries grouped per key in the order they were written: each shard's in stream
        order, interleaved across shards (a key that moved has entries on several) by
        :func:`_written_order`."""
        per_shard: dict[str, dict[int, list[Entry]]] = {}
        for entry in self.all_entries() if entries is None else entries:
            per_shard.setdefault(entry.key, {}).setdefault(entry.shard, []).append(entry)
        return {key: _written_order(shards) for key, shards in per_shard.items()}

    def positions(self) -> dict[int, str]:
        """The last stream ID of every shard (``0-0`` when empty): a bookmark for
        :meth:`all_entries` ``after=`` to read only what is published later."""
        positions: dict[int, str] = {}
        for keys in self.shards:
            last: list[tuple[bytes, object]] = self.client.xrevrange(keys.stream, count=1)  # type: ignore[assignment]
            positions[keys.shard] = _text(last[0][0]) if last else "0-0"
        return positions

    def length(self) -> int:
        """Entries over all shard streams."""
        return sum(int(self.client.xlen(keys.stream)) for keys in self.shards)

    def settle(self, quiet: float = 0.3, timeout: float = 10.0) -> int:
        """Wait until no stream grows for ``quiet`` seconds; returns the total length.

        After a writer is killed, Redis still executes the commands that had reached its
        socket: call this before taking a "what the dead writer left" snapshot.
        """
        deadline = time.monotonic() + timeout
        length = self.length()
        while True:
            time.sleep(quiet)
            now = self.length()
            if now == length:
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"the streams still grow after {timeout} s")
            length = now

    # known state

    def envelopes(self) -> list[DeltaEnvelope]:
        """Every entry's envelope, shard by shard in stream order."""
        return [entry.envelope for entry in self.all_entries()]

    def history(self) -> dict[str, list[tuple[str, str, bool]]]:
        """Per key: (type, resourceVersion, tombstone) in stream order."""
        return {
            key: [(e.type, e.rv, e.tombstone) for e in entries]
            for key, entries in self.by_key().items()
        }

    def known_versions(self) -> dict[str, str]:
        """key -> resourceVersion over all shards' ``versions`` hashes."""
        known: dict[str, str] = {}
        for keys in self.shards:
            for key, rv in self.client.hgetall(keys.versions).items():
                known[_text(key)] = _text(rv)
        return known

    def known_by_shard(self) -> dict[int, dict[str, str]]:
        """shard -> its ``versions`` hash (key -> resourceVersion)."""
        return {
            keys.shard: {_text(k): _text(v) for k, v in self.client.hgetall(keys.versions).items()}
            for keys in self.shards
        }

    def objects_by_shard(self) -> dict[int, dict[str, bytes]]:
        """shard -> its ``objects`` hash (key -> the last envelope published for it there)."""
        return {
            keys.shard: {_text(k): bytes(v) for k, v in self.client.hgetall(keys.objects).items()}
            for keys in self.shards
        }

    def layout(self) -> ResourceLayout | None:
        """The layout the reflector recorded (``None``: none, a reflector from before)."""
        return ResourceLayout.from_fields(self.client.hgetall(self.keys.layout))

    def shard_of(self, entry: Entry) -> int | None:
        """The shard ``entry``'s object maps to by the recorded layout's shard key (by key when
        none is recorded); ``None`` for a tombstone without its object."""
        layout = self.layout()
        choice = layout.shard_key if layout is not None else ShardKeyChoice()
        obj = entry.envelope.obj
        if obj is None:
            return None
        return shard_for(choice.shard_key(obj, entry.key).text, len(self.shards))

    def known_objects(self) -> dict[str, bytes]:
        """key -> the last envelope published for it, over all shards' ``objects`` hashes."""
        known: dict[str, bytes] = {}
        for keys in self.shards:
            for key, envelope in self.client.hgetall(keys.objects).items():
                known[_text(key)] = envelope if isinstance(envelope, bytes) else envelope.encode()
        return known

    # checkpoints and leadership

    def checkpoints(self) -> list[dict[str, str]]:
        """Every shard's checkpoint hash (``rv``, ``fence``, ``synced_rv``, ``relisting``)."""
        return [
            {_text(k): _text(v) for k, v in self.client.hgetall(keys.checkpoint).items()}
            for keys in self.shards
        ]

    def synced(self) -> bool:
        """Every shard finished a relist (``synced_rv`` set) and none is mid-relist."""
        return all(
            "synced_rv" in checkpoint and checkpoint.get("relisting") != "1"
            for checkpoint in self.checkpoints()
        )

    def synced_rvs(self) -> list[str | None]:
        """Every shard's ``synced_rv`` (``None`` before its first relist finished)."""
        return [checkpoint.get("synced_rv") for checkpoint in self.checkpoints()]

    def fences(self) -> list[int]:
        """Every shard's fence (highest leader epoch seen; 0 when never fenced)."""
        return [int(checkpoint.get("fence", "0")) for checkpoint in self.checkpoints()]

    def leader(self) -> dict[str, str] | None:
        """The leader lease ``{holder, epoch}``, ``None`` when nobody holds it."""
        lease = self.client.hgetall(self.keys.leader)
        return {_text(k): _text(v) for k, v in lease.items()} or None

    def holder(self) -> str | None:
        """Who holds the leader lease (``identity/pid/random``), ``None`` when nobody."""
        lease = self.leader()
        return None if lease is None else lease.get("holder")

    def epoch(self) -> int:
        """The leader epoch counter (0 before any election)."""
        value = self.client.get(self.keys.epoch)
        return 0 if value is None else int(value)

    # processors

    def shard_holders(self) -> dict[int, str | None]:
        """Every shard's ownership lease holder (``member/pid/random``), ``None`` when free."""
        return {
            keys.shard: (None if holder is None else _text(holder))
            for keys in self.shards
            for holder in (self.client.hget(keys.for_group(self.group.group).lease, "holder"),)
        }

    def shard_epochs(self) -> dict[int, int]:
        """Every shard's ownership lease epoch now (0 when the lease is free)."""
        group = self.group.group
        return {
            keys.shard: int(self.client.hget(keys.for_group(group).lease, "epoch") or 0)
            for keys in self.shards
        }

    def members(self) -> list[str]:
        """The live processor members (heartbeat deadline after Redis's clock now)."""
        seconds, micros = self.client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        live: list[bytes] = self.client.zrangebyscore(  # type: ignore[assignment]
            self.group.members, f"({now_ms}", "+inf"
        )
        return sorted(_text(member) for member in live)


# --- checks ----------------------------------------------------------------------------------


def as_history(by_key: Mapping[str, Sequence[Entry]]) -> dict[str, list[tuple[str, str]]]:
    """Published entries as a :data:`History`, to compare with an API server's events."""
    return {key: [(e.type, e.rv) for e in entries] for key, entries in by_key.items()}


def duplicate_problems(by_key: Mapping[str, Sequence[Entry]]) -> list[str]:
    """Keys on which one ``(type, rv)`` was published more than once. A move's half is another
    delta than a plain one at the same version (a relist moves an unchanged object, maybe there
    and back again): it is told apart by its move, so an incoming half is a duplicate only of
    one naming the same outgoing half (an outgoing half written twice leaves its key absent
    twice over, which :func:`order_problems` reports)."""
    problems = []
    for key, entries in by_key.items():
        seen: set[tuple[str, str, str]] = set()
        for entry in entries:
            move = entry.move
            if move is None:
                half = ""
            elif move.outgoing:
                half = f"out {entry.shard} {entry.stream_id}"
            else:
                half = f"in {move.from_shard} {move.from_id}"
            identity = (entry.type, entry.rv, half)
            if identity in seen:
                problems.append(f"{key}: {entry.type}@{entry.rv} published twice")
            seen.add(identity)
    return problems


def order_problems(by_key: Mapping[str, Sequence[Entry]]) -> list[str]:
    """Per key, in the order written (:meth:`Bus.by_key`): resourceVersions strictly increase
    (a relist tombstone and a move's outgoing half carry the last known object, so they repeat
    the previous entry's RV; an incoming half may repeat its outgoing half's), ``Added`` only
    while the key is absent, ``Updated``/``Deleted`` only while it is present; and the two
    halves of every move come together: the outgoing half on the shard of the entry before it,
    then, next for the key, the incoming half on the shard the outgoing half names, naming the
    outgoing half's shard and stream id."""
    problems = []
    for key, entries in by_key.items():
        present = False
        previous: Entry | None = None
        for entry in entries:
            where = f"{key}: {entry.type}@{entry.rv} (shard {entry.shard}, id {entry.stream_id})"
            problems += _move_problems(where, previous, entry)
            if entry.tombstone or entry.outgoing:
                if previous is None or entry.rv != previous.rv:
                    last = None if previous is None else previous.rv
                    problems.append(f"{where}: does not carry the last rv {last}")
            elif (
                previous is not None
                and int(entry.rv) <= int(previous.rv)
                and not (entry.incoming and entry.rv == previous.rv)
            ):
                problems.append(f"{where}: not after {previous.type}@{previous.rv}")
            if entry.type == "Added" and present:
                problems.append(f"{where}: Added while the key is present")
            if entry.type != "Added" and not present:
                problems.append(f"{where}: {entry.type} while the key is absent")
            present = not entry.is_deletion
            previous = entry
        if previous is not None and previous.outgoing:
            problems.append(f"{key}: the outgoing half {previous.stream_id} has no incoming half")
    return problems


def _move_problems(where: str, previous: Entry | None, entry: Entry) -> list[str]:
    """What is wrong with how ``entry`` follows ``previous`` (the key's entry before it) where
    either is half of a move."""
    problems = []
    if previous is not None and previous.outgoing and not entry.incoming:
        problems.append(f"{where}: follows the outgoing half {previous.stream_id} unmoved")
    if entry.outgoing and previous is not None and previous.shard != entry.shard:
        problems.append(f"{where}: moves out of a shard the key was not on ({previous.shard})")
    move = entry.move
    if entry.incoming and move is not None:
        if previous is None or not previous.outgoing:
            problems.append(f"{where}: an incoming half without its outgoing half before it")
        elif (move.from_shard, move.from_id) != (previous.shard, previous.stream_id):
            problems.append(
                f"{where}: names {move.from_shard}/{move.from_id}, the outgoing half is "
                f"{previous.shard}/{previous.stream_id}"
            )
        elif previous.move is not None and previous.move.to_shard != entry.shard:
            problems.append(f"{where}: the outgoing half sends it to {previous.move.to_shard}")
    return problems


def known_state_problems(bus: Bus, by_key: Mapping[str, Sequence[Entry]]) -> list[str]:
    """The known state agrees with the streams: exactly the keys whose last entry is not a
    deletion are known, each by exactly one shard -- the one that entry is on, which is the one
    its object maps to by the recorded shard key -- in both ``versions`` (at that entry's rv)
    and ``objects`` (that entry's envelope)."""
    problems = []
    versions = bus.known_by_shard()
    objects = bus.objects_by_shard()
    knowing: dict[str, list[int]] = {}
    for shard, known in versions.items():
        if known.keys() != objects[shard].keys():
            problems.append(
                f"shard {shard}: versions and objects disagree on keys: "
                f"{known.keys() ^ objects[shard].keys()}"
            )
        for key in known:
            knowing.setdefault(key, []).append(shard)
    live = {key: entries[-1] for key, entries in by_key.items() if not entries[-1].is_deletion}
    for key in knowing.keys() - live.keys():
        problems.append(f"{key}: known by shards {knowing[key]} but its streams say absent")
    for key, last in live.items():
        if knowing.get(key) != [last.shard]:
            problems.append(
                f"{key}: known by shards {knowing.get(key)}, last entry on {last.shard}"
            )
            continue
        if versions[last.shard][key] != last.rv:
            problems.append(
                f"{key}: versions has {versions[last.shard][key]}, last entry {last.rv}"
            )
        if objects[last.shard].get(key) != last.raw:
            problems.append(f"{key}: objects does not hold the last published envelope")
        mapped = bus.shard_of(last)
        if mapped is not None and mapped != last.shard:
            problems.append(f"{key}: on shard {last.shard}, its object maps to {mapped}")
    return problems


def history_problems(
    by_key: Mapping[str, Sequence[Entry]],
    events: History,
    ground_truth: Mapping[str, str],
) -> list[str]:
    """The published deltas are a faithful, possibly coarser, account of ``events`` (the API
    server's history of every key, complete from before the key was created) ending in
    ``ground_truth`` ({key: rv} of the live objects):

    * every upsert carries an RV the key really had (an ``Added``/``Updated`` event's RV), every
      watched deletion the RV of a ``Deleted`` event of the key (tombstones: see
      :func:`order_problems`); no entry for a key that never existed;
    * a live key's last entry is an upsert at its current RV; a gone key's last is a deletion.

    A relist may skip intermediate versions (that is what a relist diff does); use an exact
    comparison with :func:`as_history` where nothing may be skipped.
    """
    problems = []
    for key, entries in by_key.items():
        history = events.get(key, ())
        upserts = {rv for kind, rv in history if kind != "Deleted"}
        deletions = {rv for kind, rv in history if kind == "Deleted"}
        for entry in entries:
            if entry.tombstone or entry.outgoing:  # the last known object, at its version
                continue
            had = deletions if entry.is_deletion else upserts
            if entry.rv not in had:
                problems.append(f"{key}: {entry.type}@{entry.rv}: the key never had that rv")
        last = entries[-1]
        if key in ground_truth:
            if last.is_deletion or last.rv != ground_truth[key]:
                problems.append(
                    f"{key}: last entry {last.type}@{last.rv}, the object is at {ground_truth[key]}"
                )
        elif not last.is_deletion:
            problems.append(f"{key}: last entry {last.type}@{last.rv}, the object is gone")
    for key in ground_truth.keys() - by_key.keys():
        problems.append(f"{key}: live at {ground_truth[key]} but never published")
    return problems


def republish_problems(
    before: Mapping[str, Sequence[Entry]], after: Iterable[Entry], limit: int = 20
) -> list[str]:
    """Entries published after a restart (``after``) that announce no change: an upsert whose RV
    is not newer than the key's last RV on the stream before the restart (``before``), or a
    deletion of a key the stream already had deleted (or never had). A move's halves change
    where the object is, not what it is (a relist moves unchanged objects): they are left to
    :func:`order_problems`."""
    last: dict[str, Entry] = {key: entries[-1] for key, entries in before.items()}
    problems = []
    for entry in after:
        previous = last.get(entry.key)
        where = f"{entry.key}: {entry.type}@{entry.rv} after the restart"
        if entry.move is not None:
            last[entry.key] = entry
            continue
        if entry.is_deletion:
            if previous is None or previous.is_deletion:
                problems.append(f"{where} deletes a key the stream already had absent")
        elif previous is not None and int(entry.rv) <= int(previous.rv):
            problems.append(f"{where}: unchanged since {previous.type}@{previous.rv}")
        last[entry.key] = entry
    return problems[:limit]


# --- service child processes -----------------------------------------------------------------

_PROBES = re.compile(r"metrics and probes on (http://[^\s\"]+)")  # text or JSON logs


class ServiceProcess:
    """``python -m <MODULE> ARGS`` with stdout and stderr appended to ``log_path``.

    ``INFORMER_BUS_*`` variables of this environment are not inherited (only ``env``'s), so
    the flags say everything. :meth:`close` kills it if still running (even when SIGSTOPped)
    and reaps it: call it from a finalizer. Subclasses name the module.
    """

    module = ""
    what = "service"

    def __init__(
        self,
        args: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.args = list(args)
        self.log_path = log_path
        base = {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}
        self.env = {**base, **(env or {})}
        self.cwd = cwd or Path(__file__).resolve().parents[2]
        self.process: ChildProcess | None = None

    def command(self) -> list[str]:
        """What runs: ``python -m MODULE ARGS`` (a subclass may run something else)."""
        return [sys.executable, "-m", self.module, *self.args]

    def start(self) -> Self:
        self.process = ChildProcess(
            self.command(),
            name=self.what, log_path=self.log_path, env=self.env, cwd=self.cwd,
        ).start()  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def _flag(self, flag: str, env: str) -> str | None:
        """A flag's value from the arguments, else from the environment, else ``None``."""
        if flag in self.args:
            return self.args[self.args.index(flag) + 1]
        return self.env.get(env)

    def _holds(self, holder: str | None, name: str | None) -> bool:
        """Whether a lease holder (``name/pid/random``, see ``common.lease.unique_holder``) is
        this process (``name``: its configured name, ``None`` when it uses the default)."""
        if holder is None or self.process is None:
            return False
        identity, pid, _ = holder.split("/", 2)
        return pid == str(self.pid) and (name is None or identity == name)

    def running(self) -> bool:
        return self.process is not None and self.process.running

    def log(self) -> str:
        """Everything it logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def url(self, timeout: float = 60.0) -> str:
        """The base URL of its /metrics, /healthz and /readyz (from its start-up log line).
        The wait is a liveness bound, not a speed check: a start-up under a loaded machine's
        imports took over 15 s once."""

        def found() -> str | None:
            assert self.running(), f"the {self.what} exited early:\n{self.log()}"
            match = _PROBES.search(self.log())
            return match.group(1) if match else None

        return wait_until(found, timeout, what=f"the {self.what} to serve its probes")

    def probe(self, path: str = "/readyz") -> int:
        """The HTTP status of one of its probes."""
        try:
            with urllib.request.urlopen(self.url() + path, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            error.close()
            return int(error.code)

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of its /metrics (e.g. ``informer_bus_reflector_lists_total``), ``None``
        when absent."""
        with urllib.request.urlopen(self.url() + "/metrics", timeout=5) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return None

    def send(self, signum: signal.Signals) -> None:
        assert self.process is not None, "not started"
        self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        self.send(signal.SIGKILL)
        self.wait(10)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM; returns the exit status (``TimeoutError`` if it does not exit in time)."""
        self.send(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        assert self.process is not None, "not started"
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.process is not None:
            self.process.close()  # SIGKILL ends a SIGSTOPped process too


class ReflectorProcess(ServiceProcess):
    """``python -m reflector_svc ARGS``, for kill -9 / SIGSTOP / SIGTERM tests."""

    module = "reflector_svc"
    what = "reflector"

    @property
    def identity(self) -> str | None:
        """Its ``--identity`` (flag or env var), ``None`` when it uses the default."""
        return self._flag("--identity", "INFORMER_BUS_IDENTITY")

    def holds(self, holder: str | None) -> bool:
        """Whether ``holder`` (a lease holder, ``identity/pid/random``) is this process."""
        return self._holds(holder, self.identity)


class ProcessorProcess(ServiceProcess):
    """``python -m processor_svc ARGS``, for kill -9 / SIGTERM / scale-out tests.

    The working directory defaults to the repository root, so ``--handler tests.support...``
    references import.
    """

    module = "processor_svc"
    what = "processor"

    @property
    def member_id(self) -> str | None:
        """Its ``--member-id`` (flag or env var), ``None`` when it uses the default."""
        return self._flag("--member-id", "INFORMER_BUS_MEMBER_ID")

    def holds(self, holder: str | None) -> bool:
        """Whether ``holder`` (a shard lease holder, ``member/pid/random``) is this process."""
        return self._holds(holder, self.member_id)

    def owned_shards(self, bus: Bus) -> list[int]:
        """The shards whose ownership lease this process holds now."""
        return [shard for shard, holder in bus.shard_holders().items() if self.holds(holder)]


P = TypeVar("P", bound=ServiceProcess)


@contextmanager
def closing_with_logs(started: list[P]) -> Iterator[list[P]]:
    """Yield ``started``; afterwards close every process in it, then print each one's log (so
    a failing test shows what every child said, after all of them are gone)."""
    try:
        yield started
    finally:
        for process in started:
            process.close()
        for process in started:
            print(f"----- {process.log_path.name} -----\n{process.log()}")


# --- the fixtures (registered for every test by tests/conftest.py's pytest_plugins) ----------

DEFAULT_BUS_SHARDS = 4
"""The pods' shard count the ``bus`` fixture reads, unless a directory overrides ``bus_shards``."""


@pytest.fixture
def bus_shards() -> int:
    """How many shards the ``bus`` fixture reads; a conftest overrides it for its directory."""
    return DEFAULT_BUS_SHARDS


@pytest.fixture
def bus(redis_client: redis.Redis, bus_shards: int) -> Bus:
    """What a reflector published for pods on the test's (flushed) redis-server, read back."""
    return Bus(redis_client, "pods", shard_count=bus_shards)
