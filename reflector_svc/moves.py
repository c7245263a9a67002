"""A batch of deltas for a resource whose objects can change shards, cut into sub-batches.

An upsert whose state maps to another shard than the one that knows its key moves the object
(:mod:`reflector_svc.placement`). A move is written as two entries (wire version 3,
:func:`common.wire.moved_out` / :func:`common.wire.moved_in`): first the *outgoing half* on the
old shard, a deletion of the key carrying its last state there and naming the new shard; then
the *incoming half* on the new shard, an addition naming the old shard and the stream id of the
outgoing half. That id exists only once Redis ran the outgoing half, so a batch with moves is
published as a sequence of sub-batches, each cut right after an outgoing half; the next one
starts with the matching incoming half. Within a shard the deltas keep their order; across
shards nothing relies on the order of calls within one sub-batch (Redis Cluster may run
different shards' calls concurrently).

The checkpoint (the publish script's two separate arguments, ``PUBLISH_LUA``): every sub-batch
of a watch batch keeps the replay rule on, but only the last one moves the touched shards'
checkpoints to the batch's RV. A sub-batch that ends with an outgoing half moves them only up
to the RV of the event before the move (or not at all when the move is the batch's first
event): a checkpoint at the move's RV would say its incoming half is written, and a crash before
it would lose the object. Every event up to that earlier RV is in this sub-batch or an earlier
one, so the checkpoint still never runs ahead of what is written.

Placement (where the key is) is assumed within a sub-batch, from the deltas before in it, and
taken from what Redis really did between sub-batches (:meth:`MovePlan.record`): a skipped
delta (a replay) changes nothing. A key's outgoing half carries its last state on the old shard:
the envelope of its last upsert earlier in the batch if it had one (a key that moves twice in a
batch takes the earlier incoming half's bytes), else the old shard's ``objects`` entry, fetched
for every moving key of the batch in one round trip before the first sub-batch
(:meth:`MovePlan.known_states_needed`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from common.deltas import DeltaType
from common.sharding import shard_for
from common.versions import compare_resource_versions, is_integer_version
from common.wire import moved_in, moved_out
from reflector_svc.placement import Placement
from reflector_svc.publish_records import PendingDelta, PublishResult, ShardPublishResult

__all__ = ["MovePlan", "SubBatch", "Write"]

UPSERT: Final = "U"
DELETION: Final = "D"
OUTGOING: Final = "O"
"""Script kinds (``PUBLISH_LUA``); an outgoing half is ``O`` followed by the new shard."""


class Write(NamedTuple):
    """One entry a sub-batch asks a shard's script to write (a tuple: one is built per delta
    published)."""

    kind: str
    """``U``, ``D`` or ``O<to shard>``."""
    delta: PendingDelta
    """The delta this entry is (or is half of)."""
    envelope: bytes
    """What goes on the stream: the delta's envelope, or a move half made from it."""
    moved_from: int | None = None
    """For an incoming half: the shard the object left."""

    @property
    def upsert(self) -> bool:
        return self.kind == UPSERT

    @property
    def entry_type(self) -> DeltaType:
        """The type of the entry as written (a move's halves: Deleted, Added)."""
        if self.kind not in (UPSERT, DELETION):
            return DeltaType.DELETED
        return DeltaType.ADDED if self.moved_from is not None else self.delta.type


@dataclass(frozen=True, slots=True)
class SubBatch:
    """One round trip: per shard, the writes of its one script call, in order."""

    groups: Mapping[int, Sequence[Write]]
    replay: bool
    """The replay rule is on (a watch batch)."""
    checkpoint: str
    """The RV the touched shards' checkpoints move to; ``""`` leaves them."""
    outgoing: tuple[int, int] | None = None
    """``(shard, index in its group)`` of the outgoing half this sub-batch ends with."""


@dataclass(slots=True)
class _Incoming:
    """The incoming half the next sub-batch starts with, once the outgoing half's id is known."""

    index: int
    """Of the delta in the batch."""
    from_shard: int
    to_shard: int
    stream_id: str | None = None


KnownState = Callable[[int, str], bytes | None]
"""``(shard, key) -> objects[key]`` of that shard (``None`` when it does not know the key)."""

Copies = dict[int, str]
"""shard -> version: the shards that know one key, as a sub-batch assumes them."""


def _not_newer(version: str, rv: str) -> bool:
    """Whether a copy at ``version`` may precede the event at ``rv`` (not known to be after
    it: versions that do not compare as integers might)."""
    return compare_resource_versions(version, rv) != 1


def _latest(copies: Sequence[tuple[int, str]], preferred: int) -> int:
    """The shard of the copy with the highest version (integers; others count as lowest),
    ``preferred`` among equals."""
    return max(
        copies,
        key=lambda copy: (
            int(copy[1]) if is_integer_version(copy[1]) else -1,
            copy[0] == preferred,
        ),
    )[0]


@dataclass(slots=True)
class MovePlan:
    """Cuts one batch into :class:`SubBatch`\\ es as it is published: call :meth:`next`, run
    what it returns, hand Redis's stream ids to :meth:`record`, until :meth:`next` gives
    ``None``; then :meth:`result`.

    Where an event goes is decided from the copies of its key that may precede it (known at a
    version not after the event's): an upsert moves the key from the shard holding the latest
    of them when that is not the one its state maps to; a deletion goes to every shard holding
    one. Copies at later versions are shards that are ahead after a crash (they skip the
    replayed event themselves) and take no part. Normally a key has exactly one copy.
    """

    placement: Placement
    deltas: Sequence[PendingDelta]
    shard_count: int
    checkpoint_rv: str | None
    """As :meth:`~reflector_svc.publisher.ShardPublisher.publish` takes it: ``None`` for a
    relist chunk (no replay rule, no checkpoint)."""
    known_state: KnownState
    """Where an outgoing half's last state comes from when the batch has none for the key and
    :attr:`fetched` does not hold it."""
    wall_clock: Callable[[], float]
    """When a move is observed (the outgoing half's ``observed_at``)."""
    fetched: dict[tuple[int, str], bytes | None] = field(default_factory=dict)
    """``(shard, key) -> objects[key]`` fetched for :meth:`known_states_needed` (``None``:
    that shard does not know the key)."""
    _targets: list[int] = field(default_factory=list)
    """The shard each delta's state maps to, computed once."""
    _index: int = 0
    _incoming: _Incoming | None = None
    _done: bool = False
    _replanned: set[int] = field(default_factory=set)
    _last_upsert: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """key -> (shard, envelope) of its last upsert earlier in the batch."""
    _ids: dict[int, list[str | None]] = field(default_factory=dict)
    _by_type: collections.Counter[DeltaType] = field(default_factory=collections.Counter)
    moves: int = 0
    """Moves whose incoming half was written (the object arrived on its new shard)."""

    def __post_init__(self) -> None:
        count = self.shard_count
        self._targets = [
            shard_for(delta.key if delta.shard_key is None else delta.shard_key, count)
            for delta in self.deltas
        ]

    def _copies(self, where: dict[str, Copies], key: str) -> Copies:
        """``key``'s copies as assumed so far (``where``), from the placement at first."""
        copies = where.get(key)
        if copies is None:
            copies = where[key] = {copy.shard: copy.version for copy in self.placement.copies(key)}
        return copies

    @staticmethod
    def _source(copies: Copies, rv: str, target: int) -> int | None:
        """The shard an upsert at ``rv`` onto ``target`` finds its key on: the copy with the
        highest version not after ``rv`` (the state the event changed; ``target`` itself when
        no move is needed), ``None`` when no copy precedes it."""
        before = [(shard, version) for shard, version in copies.items() if _not_newer(version, rv)]
        if not before:
            return None
        return _latest(before, target)

    @staticmethod
    def _deletion_shards(copies: Copies, rv: str) -> list[int]:
        return [shard for shard, version in copies.items() if _not_newer(version, rv)]

    def known_states_needed(self) -> dict[int, list[str]]:
        """Per old shard, the keys whose ``objects`` entry an outgoing half will need: the
        moves this batch makes if every delta is written (the usual case; a replay that
        Redis skips in part may need another one, fetched then)."""
        where: dict[str, Copies] = {}
        upserted: dict[str, int] = {}
        needed: dict[int, list[str]] = {}
        for delta, target in zip(self.deltas, self._targets, strict=True):
            key, rv = delta.key, delta.resource_version
            copies = self._copies(where, key)
            if delta.type is DeltaType.DELETED:
                for shard in self._deletion_shards(copies, rv):
                    del copies[shard]
                upserted.pop(key, None)
                continue
            source = self._source(copies, rv, target)
            if source is not None and source != target:
                if upserted.get(key) != source:
                    needed.setdefault(source, []).append(key)
                del copies[source]
            copies[target] = rv
            upserted[key] = target
        return needed

    def next(self) -> SubBatch | None:
        """The next sub-batch to run, ``None`` when the batch is written."""
        if self._done:
            return None
        groups: dict[int, list[Write]] = {}
        where: dict[str, Copies] = {}  # what this sub-batch does to placement, assumed
        if self._incoming is not None:
            self._begin_with_incoming(groups, where)
        deltas = self.deltas
        while self._index < len(deltas):
            index = self._index
            delta = deltas[index]
            self._index = index + 1
            key, rv = delta.key, delta.resource_version
            copies = self._copies(where, key)
            target = self._targets[index]
            if delta.type is DeltaType.DELETED:
                shards = self._deletion_shards(copies, rv) or [target]
                for shard in shards:
                    groups.setdefault(shard, []).append(Write(DELETION, delta, delta.envelope))
                    copies.pop(shard, None)
                self._last_upsert.pop(key, None)
                continue
            source = self._source(copies, rv, target)
            if source is not None and source != target:
                outgoing = self._outgoing(delta, source, target)
                if outgoing is not None:  # cut here: the incoming half needs this one's id
                    group = groups.setdefault(source, [])
                    group.append(outgoing)
                    self._incoming = _Incoming(index, source, target)
                    replay = self.checkpoint_rv is not None
                    before = deltas[index - 1].resource_version if index and replay else ""
                    return SubBatch(groups, replay, before, (source, len(group) - 1))
                del copies[source]  # it has no state of the key: nothing to move out
            groups.setdefault(target, []).append(self._upsert(delta, target, source is None))
            copies[target] = rv
            self._last_upsert[key] = (target, delta.envelope)
        self._done = True
        if not groups:
            return None
        return SubBatch(groups, self.checkpoint_rv is not None, self.checkpoint_rv or "")

    def _begin_with_incoming(
        self, groups: dict[int, list[Write]], where: dict[str, Copies]
    ) -> None:
        """Start a sub-batch with the incoming half of the move the last one was cut at.

        When the old shard skipped the outgoing half (a replay), the move was planned on an
        assumption Redis did not bear out (a copy this batch wrote, or so it thought): the
        delta is planned again, once, from what Redis now says, the old state read from Redis.
        """
        incoming = self._incoming
        assert incoming is not None
        self._incoming = None
        delta = self.deltas[incoming.index]
        if incoming.stream_id is None:
            if incoming.index not in self._replanned:
                self._replanned.add(incoming.index)
                self._index = incoming.index
                self._last_upsert.pop(delta.key, None)
                return
            write = Write(UPSERT, delta, delta.envelope)
        else:
            envelope = moved_in(delta.envelope, incoming.from_shard, incoming.stream_id)
            write = Write(UPSERT, delta, envelope, incoming.from_shard)
        groups.setdefault(incoming.to_shard, []).append(write)
        self._copies(where, delta.key)[incoming.to_shard] = delta.resource_version
        self._last_upsert[delta.key] = (incoming.to_shard, delta.envelope)

    def _outgoing(self, delta: PendingDelta, source: int, target: int) -> Write | None:
        """The outgoing half moving ``delta``'s key from ``source`` to ``target``; ``None``
        when ``source`` has no state of it to carry."""
        key = delta.key
        last = self._last_upsert.get(key)
        if last is not None and last[0] == source:
            state: bytes | None = last[1]
        else:
            spot = (source, key)
            fetched = self.fetched
            state = fetched[spot] if spot in fetched else self.known_state(source, key)
        if state is None:
            return None
        out = moved_out(state, target, observed_at=self.wall_clock())
        return Write(f"{OUTGOING}{target}", delta, out)

    def _upsert(self, delta: PendingDelta, target: int, first: bool) -> Write:
        """``delta`` onto ``target``, where no move is needed: as itself, or, when no copy of
        its key precedes it (``first``), as the incoming half of a move a crash cut short
        between its halves (the replay of the event that moved it:
        :meth:`Placement.completes`)."""
        if first:
            move = self.placement.completes(delta.key, delta.resource_version, target)
            if move is not None:
                envelope = moved_in(delta.envelope, move.from_shard, move.stream_id)
                return Write(UPSERT, delta, envelope, move.from_shard)
        return Write(UPSERT, delta, delta.envelope)

    def record(self, sub: SubBatch, stream_ids: Mapping[int, Sequence[str | None]]) -> None:
        """What Redis did with ``sub``: per shard, each write's stream id (``None``: skipped)."""
        for shard, writes in sub.groups.items():
            ids = stream_ids[shard]
            self._ids.setdefault(shard, []).extend(ids)
            for write, stream_id in zip(writes, ids, strict=True):
                if stream_id is None:
                    continue
                self._by_type[write.entry_type] += 1
                delta = write.delta
                version = delta.resource_version if write.upsert else None
                self.placement.written(delta.key, shard, version)
                if write.moved_from is not None:
                    self.moves += 1
        if sub.outgoing is not None and self._incoming is not None:
            shard, position = sub.outgoing
            self._incoming.stream_id = stream_ids[shard][position]

    def result(self) -> PublishResult:
        """Everything the sub-batches did, per shard in call order."""
        shards = {
            shard: ShardPublishResult(shard, tuple(ids)) for shard, ids in sorted(self._ids.items())
        }
        return PublishResult(shards, dict(self._by_type), moves=self.moves)
