"""The reflector's write side: deltas onto sharded Redis streams, atomically per shard, fenced.

``docs/architecture.md`` is the specification (Redis layout, publish protocol, fencing). Each
batch is grouped by shard and each shard's group is written by **one Lua script call** that
checks the leader fence, skips what the shard already has, appends the rest to the stream,
records the known state (``versions`` and ``objects``) and moves the checkpoint -- all in one
atomic step on keys that share one Cluster hash tag. All the shards' calls of a batch go out in
one pipelined round trip (not a transaction: a transaction would need one slot, and per-shard
atomicity plus idempotence is what makes a crash between two shards' writes safe).

Why every write is idempotent, and what "already has it" means (the rules of
:data:`~common.redis_layout.publish_scripts.PUBLISH_LUA`, in this order):

1. **Checkpoint rule** (upserts in batches that move the checkpoint, i.e. watch batches): an
   upsert whose resourceVersion is at or below the shard's checkpoint ``rv`` is skipped. The
   checkpoint means "every event up to ``rv`` is on this stream", so it is a replay. The
   per-key rule of ``docs/architecture.md`` alone is not enough after a crash: a replay of
   ``Added k@5, Deleted k@6`` finds ``k`` absent from ``versions`` (it was deleted) and would
   publish both again. The checkpoint never moves backwards in a publish, so a replay in
   smaller batches cannot undo this.
2. **Per-key rules** (every batch): an upsert is skipped when ``versions[key]`` is at least its
   resourceVersion; a deletion is skipped when the key is unknown, or when the known version is
   strictly newer than the deletion (a replayed deletion of an object re-created since). Once
   replayed upserts are skipped, these settle every replayed deletion, so the checkpoint rule
   leaves deletions alone: a relist tombstone (which carries the last known object, at exactly
   the known version) is never dropped, even if a caller passes a checkpoint with it.

Resource versions are compared as unsigned decimal integers (exactly, as digit strings, so an
int64 etcd revision above 2**53 still compares right); when either side is not a decimal
integer, only equality counts as "already have it". They are only used to skip duplicates,
never to order.

Moves between shards (a resource sharded by something its objects say, :mod:`common.shard_routing`):
the publisher keeps where each key lives (:mod:`reflector_svc.placement`) and writes a batch
with moves as sub-batches, each cut after a move's outgoing half, the replay rule on in every
one and the checkpoint moved only as far as every event before the move
(:mod:`reflector_svc.moves`). A resource sharded by key (or namespace) keeps no placement: its
key names its shard, and its publishes take exactly the path they took before moves existed.

**Replicas** (:class:`~common.replica_wait.ReplicaWait`, ``--redis-wait-replicas N``): every
round trip of script calls -- a batch, a sub-batch, a fence or checkpoint operation -- ends
with ``WAIT N timeout`` on the same connection (in the same pipeline: no extra round trip on a
single Redis; on Redis Cluster one pipeline per primary touched). Fewer than N confirmations
raise :class:`~common.replica_wait.ReplicationShortfallError`, a ``redis.RedisError``: the
reflector then does what it does after any failed publish -- it does not advance its resume
point, and continues from the checkpoints Redis holds -- which is safe because of the rules
above: whatever of the batch the primary kept is skipped when it comes again, and whatever a
failover lost is published again. N = 0 sends no ``WAIT``.

Deliberately no ``MAXLEN`` on the ``XADD``: a trim inside the publish would drop entries that a
consumer group has not read yet, silently; :mod:`reflector_svc.retention` trims instead, below
what every live group has consumed, and reports when a hard cap forces more.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from common.deltas import DeltaType
from common.publication import ResourceLayout, write_layout
from common.redis_layout import ResourceKeys, ShardKeys, script_runner
from common.redis_layout.checkpoint import ShardCheckpoint, decode_checkpoint, queue_checkpoint
from common.redis_layout.lua import LuaScript
from common.redis_layout.publish_scripts import CHECKPOINT_LUA, PUBLISH_LUA
from common.redis_replies import as_text
from common.replica_wait import NO_WAIT, ReplicaWait
from common.shard_routing import ShardKeyChoice
from common.sharding import shard_for
from common.versions import is_integer_version
from reflector_svc.moves import MovePlan, SubBatch, Write
from reflector_svc.placement import Placement
from reflector_svc.publish_records import (
    FencedError,
    PendingDelta,
    PublishResult,
    ResumePoint,
    ShardPublishResult,
)

__all__ = ["ShardCheckpoint", "ShardPublisher"]

_BY_KEY = ShardKeyChoice()


class ShardPublisher:
    """Writes one resource's deltas and checkpoints onto its ``shard_count`` shards.

    ``client`` should not decode responses (envelopes are bytes; other replies are decoded
    here either way). Calls are as thread-safe as the client, but per-object order needs a
    single publishing thread per resource: the leader's.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resource: str,
        shard_count: int,
        shard_key: ShardKeyChoice = _BY_KEY,
        wall_clock: Callable[[], float] = time.time,
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        shard_for("", shard_count)  # validates shard_count (ValueError)
        self._client = client
        self.prefix = prefix
        self.resource = resource
        self.shard_count = shard_count
        self.shard_key = shard_key
        """What the resource's objects are sharded by (the deltas carry the computed text)."""
        self._wall_clock = wall_clock
        self._wait = replica_wait
        # Where each key lives; None while the key names the shard of every object (sharded by
        # key or namespace, nothing left elsewhere by an earlier shard key: known_versions).
        self._placement: Placement | None = None if shard_key.key_names_shard else Placement()
        # Whether keys may sit on another shard than their key names (a resource sharded by
        # key or namespace): only after another shard key, or a relist that did not finish (it
        # may have been moving them). Until resume_point and recorded_layout say, assume so.
        self._strays_possible = True
        self.shards: tuple[ShardKeys, ...] = tuple(
            ShardKeys(prefix, resource, shard) for shard in range(shard_count)
        )
        self._publish_keys = tuple(
            (keys.stream, keys.versions, keys.objects, keys.checkpoint, keys.moving)
            for keys in self.shards
        )
        self._publish_script = PUBLISH_LUA
        self._checkpoint_script = CHECKPOINT_LUA

    def shard_of(self, key: str) -> int:
        """The shard owning cache key ``key`` by the resource's shard key, when the key names it
        (sharded by key or namespace); ``ValueError`` otherwise (only the object says)."""
        shard = self.shard_key.shard_of_key(key, self.shard_count)
        if shard is None:
            raise ValueError(f"{self.resource} is sharded by {self.shard_key}: keys name no shard")
        return shard

    @property
    def tracks_placement(self) -> bool:
        """Whether objects can be somewhere else than their state maps to, so that deltas may
        move them: always for a resource sharded by owner or label; for one sharded by key or
        namespace only after :meth:`known_versions` found keys an earlier shard key left on
        other shards (until the next :meth:`resume_point`)."""
        return self._placement is not None

    def misplaced(self, key: str, shard_key: str | None) -> bool:
        """Whether a shard knows ``key`` and it is not the one ``shard_key`` (the object's
        computed shard key, ``None`` for the key itself) maps to: an unchanged object a relist
        must move."""
        placement = self._placement
        if placement is None:
            return False
        target = shard_for(key if shard_key is None else shard_key, self.shard_count)
        return any(copy.shard != target for copy in self._loaded(placement).copies(key))

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self, epoch: int, deltas: Sequence[PendingDelta], *, checkpoint_rv: str | None
    ) -> PublishResult:
        """Publish ``deltas``: one script call per touched shard, one round trip for all.

        Order within a shard is the order in ``deltas``. ``checkpoint_rv`` is for watch
        batches, whose deltas come in RV order: the RV of the batch's last event (the caller
        vouches that every event up to it is in this batch or was published before). It moves
        each *touched* shard's checkpoint to it, never backwards, and turns on the checkpoint
        rule for replays (module docstring). Pass ``None`` for relist chunks. Untouched shards
        keep their checkpoint: call :meth:`advance_checkpoints` for bookmarks and after quiet
        periods, or the resume point stays behind. Keep batches bounded (hundreds to a few
        thousand deltas): each shard's call blocks Redis while it runs.

        Raises :class:`FencedError` when a shard refused (after every call ran; the others may
        have written), and re-raises a Redis error of any shard's call, noting the shard.
        """
        _check_epoch(epoch)
        if self._placement is not None:
            return self._publish_placed(epoch, self._loaded(self._placement), deltas, checkpoint_rv)
        groups: dict[int, list[PendingDelta]] = {}
        count = self.shard_count
        for delta in deltas:
            text = delta.shard_key
            groups.setdefault(shard_for(delta.key if text is None else text, count), []).append(
                delta
            )
        groups = dict(sorted(groups.items()))  # a deterministic call order (and FencedError)
        calls = self._publish_calls(epoch, groups, checkpoint_rv)
        replies = self._run(calls)
        return self._publish_result(groups, replies)

    def _publish_placed(
        self,
        epoch: int,
        placement: Placement,
        deltas: Sequence[PendingDelta],
        checkpoint_rv: str | None,
    ) -> PublishResult:
        """:meth:`publish` where objects may move: sub-batch after sub-batch
        (:mod:`reflector_svc.moves`), the moving keys' last states fetched first, at once."""
        plan = MovePlan(
            placement, deltas, self.shard_count, checkpoint_rv, self._known_state,
            self._wall_clock,
        )  # fmt: skip
        plan.fetched = self._fetch_objects(plan.known_states_needed())
        while (sub := plan.next()) is not None:
            groups = dict(sorted(sub.groups.items()))
            replies = self._run(self._sub_batch_calls(epoch, sub, groups))
            plan.record(
                sub,
                {
                    shard: tuple(as_text(stream_id) or None for stream_id in reply[1:])
                    for shard, reply in zip(groups, replies, strict=True)
                },
            )
        return plan.result()

    def _sub_batch_calls(
        self, epoch: int, sub: SubBatch, groups: Mapping[int, Sequence[Write]]
    ) -> list[_Call]:
        head = (str(epoch), "1" if sub.replay else "0", sub.checkpoint)
        calls: list[_Call] = []
        for shard, writes in groups.items():
            args: list[str | bytes] = list(head)
            for write in writes:
                args += (write.kind, write.delta.key, write.delta.resource_version, write.envelope)
            calls.append(_Call(shard, self._publish_script, self._publish_keys[shard], args))
        return calls

    def _fetch_objects(
        self, wanted: Mapping[int, Sequence[str]]
    ) -> dict[tuple[int, str], bytes | None]:
        """``objects[key]`` of each shard's wanted keys, in one round trip (``None``: the shard
        does not know the key)."""
        if not wanted:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for shard, keys in wanted.items():
            pipe.hmget(self.shards[shard].objects, keys)
        found: dict[tuple[int, str], bytes | None] = {}
        for (shard, keys), values in zip(wanted.items(), pipe.execute(), strict=True):
            for key, value in zip(keys, values, strict=True):
                found[shard, key] = None if value is None else _bytes(value)
        return found

    def _known_state(self, shard: int, key: str) -> bytes | None:
        """``objects[key]`` of ``shard``, alone: a move no prefetch foresaw (a replay)."""
        value = self._client.hget(self.shards[shard].objects, key)
        return None if value is None else _bytes(value)

    def _publish_calls(
        self,
        epoch: int,
        groups: Mapping[int, Sequence[PendingDelta]],
        checkpoint_rv: str | None,
    ) -> list[_Call]:
        head = (str(epoch), "0" if checkpoint_rv is None else "1", checkpoint_rv or "")
        calls: list[_Call] = []
        for shard, group in groups.items():
            args: list[str | bytes] = list(head)
            for delta in group:
                kind = "D" if delta.type is DeltaType.DELETED else "U"
                args += (kind, delta.key, delta.resource_version, delta.envelope)
            calls.append(_Call(shard, self._publish_script, self._publish_keys[shard], args))
        return calls

    def _publish_result(
        self, groups: Mapping[int, Sequence[PendingDelta]], replies: list[Any]
    ) -> PublishResult:
        results: dict[int, ShardPublishResult] = {}
        by_type: collections.Counter[DeltaType] = collections.Counter()
        for (shard, group), reply in zip(groups.items(), replies, strict=True):
            stream_ids = tuple(as_text(stream_id) or None for stream_id in reply[1:])
            results[shard] = ShardPublishResult(shard, stream_ids)
            for delta, stream_id in zip(group, stream_ids, strict=True):
                if stream_id is not None:
                    by_type[delta.type] += 1
        return PublishResult(results, dict(by_type))

    # -- checkpoints and fencing ------------------------------------------------------------

    def fence(self, epoch: int) -> None:
        """Raise every shard's fence to ``epoch`` (a new leader does this before any write).

        Per shard atomic; raises :class:`FencedError` when some shard already has a newer
        fence (that shard is left alone).
        """
        self._checkpoint_op(epoch, "fence", "")

    def advance_checkpoints(self, epoch: int, rv: str) -> None:
        """Move every shard's checkpoint to ``rv`` (never backwards), fenced.

        For bookmarks and quiet periods: the caller vouches that every event up to ``rv`` has
        been published (a bookmark's RV after the batch before it was published), so the moves
        at or below ``rv`` are complete and their ``moving`` entries go.
        """
        self._checkpoint_op(epoch, "advance", rv)

    def begin_relist(self, epoch: int) -> None:
        """Mark every shard ``relisting`` before a relist diff is written, fenced: a crash
        before :meth:`finish_relist` then makes the next leader relist instead of trusting a
        half-written diff."""
        self._checkpoint_op(epoch, "begin", "")

    def finish_relist(self, epoch: int, list_rv: str) -> None:
        """After the whole diff is published: ``rv = synced_rv = list_rv``, not relisting, and no
        move pending (every listed object is on the shard its state maps to)."""
        self._checkpoint_op(epoch, "finish", list_rv)
        self._strays_possible = False

    def _checkpoint_op(self, epoch: int, op: str, rv: str) -> None:
        _check_epoch(epoch)
        args = [str(epoch), op, rv]
        calls = [
            _Call(keys.shard, self._checkpoint_script, (keys.checkpoint, keys.moving), args)
            for keys in self.shards
        ]
        self._run(calls)

    def read_checkpoints(self) -> list[ShardCheckpoint]:
        """Every shard's checkpoint, index = shard (one round trip)."""
        pipe = self._client.pipeline(transaction=False)
        for keys in self.shards:
            queue_checkpoint(pipe, keys)
        return [decode_checkpoint(reply) for reply in pipe.execute()]

    def resume_point(self) -> ResumePoint:
        """Where to continue: the *lowest* shard checkpoint, so that no shard misses an event.

        Shards that are ahead skip the replayed events (module docstring). ``needs_relist``
        when any shard is mid-relist or has no checkpoint (never listed), or when checkpoints
        are not decimal integers and differ (they cannot be ordered, so none is safe).

        Where each key lives is read in the same round trip, when the resource's objects can
        move (:attr:`tracks_placement`): whatever Redis kept or lost, publishing continues from
        what it holds. A resource whose key names its shard forgets any placement here.
        """
        pipe = self._client.pipeline(transaction=False)
        for keys in self.shards:
            queue_checkpoint(pipe, keys)
        placed = not self.shard_key.key_names_shard
        if placed:
            self._queue_placement(pipe)
        replies = pipe.execute()
        count = self.shard_count
        checkpoints = [decode_checkpoint(reply) for reply in replies[:count]]
        self._placement = self._placement_of(replies[count:]) if placed else None
        self._strays_possible = any(checkpoint.relisting for checkpoint in checkpoints)
        rvs = [checkpoint.rv for checkpoint in checkpoints]
        relisting = any(checkpoint.relisting for checkpoint in checkpoints)
        present = [rv for rv in rvs if rv is not None]
        if len(present) < len(rvs):
            return ResumePoint(None, True)
        if all(is_integer_version(rv) for rv in present):
            return ResumePoint(min(present, key=int), relisting)
        if len(set(present)) == 1:
            return ResumePoint(present[0], relisting)
        return ResumePoint(None, True)

    # -- the resource's layout ----------------------------------------------------------------

    def recorded_layout(self) -> ResourceLayout | None:
        """The layout the resource's last leader recorded (``ib:{R}:layout``); ``None`` when
        none did (a reflector from before layouts, or nothing published yet); ``ValueError``
        (one line) when what is there is unusable."""
        fields = self._client.hgetall(ResourceKeys(self.prefix, self.resource).layout)
        try:
            layout = ResourceLayout.from_fields(fields)
        except ValueError:
            self._strays_possible = True
            raise
        # A reflector from before layouts sharded by key.
        recorded = layout.shard_key if layout is not None else _BY_KEY
        if recorded != self.shard_key:
            self._strays_possible = True
        return layout

    def record_layout(self, layout: ResourceLayout) -> None:
        """Record ``layout`` as the resource's (the leader, before its first publish)."""
        write_layout(self._client, prefix=self.prefix, resource=self.resource, layout=layout)

    # -- relist support ---------------------------------------------------------------------

    def known_versions(self) -> dict[str, str]:
        """key -> resourceVersion of every object any shard knows (one round trip).

        Also where each key lives, read from the same hashes: a relist diffs against this and
        then publishes where the keys are. For a resource whose key names its shard, placement
        is kept from here on only when some key is on another shard than its key names (left
        there while the resource had another shard key), or a move may be half written; and
        the keys are only checked for that when there can be such keys (the recorded layout
        names another shard key, or a relist did not finish), so that a resource sharded by
        key relists as fast as it did before moves existed.
        """
        pipe = self._client.pipeline(transaction=False)
        for keys in self.shards:
            pipe.hgetall(keys.versions)
        for keys in self.shards:
            pipe.hgetall(keys.moving)
        replies = pipe.execute()
        count = self.shard_count
        per_shard, moving = replies[:count], replies[count:]
        known: dict[str, str] = {}
        for versions in per_shard:
            for key, version in versions.items():
                known[as_text(key)] = as_text(version)
        if (
            self.shard_key.key_names_shard
            and not any(moving)
            and not (self._strays_possible and self._strays(per_shard))
        ):
            self._placement = None
        else:
            placement = Placement()
            placement.reload(per_shard, moving)
            self._placement = placement
        return known

    def _loaded(self, placement: Placement) -> Placement:
        """``placement``, read from Redis first if it never was (a caller that publishes
        before asking where to resume)."""
        if placement.loaded:
            return placement
        pipe = self._client.pipeline(transaction=False)
        self._queue_placement(pipe)
        self._placement = loaded = self._placement_of(pipe.execute())
        return loaded

    def _queue_placement(self, pipe: Any) -> None:
        """Queue what :meth:`_placement_of` reads: every shard's versions, then its moves."""
        for keys in self.shards:
            pipe.hgetall(keys.versions)
        for keys in self.shards:
            pipe.hgetall(keys.moving)

    def _placement_of(self, replies: Sequence[Any]) -> Placement:
        count = self.shard_count
        placement = Placement()
        placement.reload(replies[:count], replies[count : 2 * count])
        return placement

    def _strays(self, per_shard: Sequence[Mapping[bytes | str, Any]]) -> bool:
        """Whether some shard knows a key its key does not name (``per_shard[s]``: shard
        ``s``'s versions)."""
        shard_of_key = self.shard_key.shard_of_key
        count = self.shard_count
        return any(
            shard_of_key(as_text(key), count) != shard
            for shard, versions in enumerate(per_shard)
            for key in versions
        )

    def _shard_knowing(self, key: str) -> int | None:
        """The shard that knows ``key``, as far as this publisher can tell without asking."""
        if self._placement is not None:
            return self._loaded(self._placement).get(key)
        return self.shard_key.shard_of_key(key, self.shard_count)

    def last_objects(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The last published envelope of each of ``keys`` that a shard knows (one round
        trip): what a relist's tombstone for a vanished key carries."""
        by_shard: dict[int, list[str]] = {}
        for key in keys:
            shard = self._shard_knowing(key)
            if shard is not None:
                by_shard.setdefault(shard, []).append(key)
        if not by_shard:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for shard, shard_keys in by_shard.items():
            pipe.hmget(self.shards[shard].objects, shard_keys)
        found: dict[str, bytes] = {}
        for shard_keys, values in zip(by_shard.values(), pipe.execute(), strict=True):
            for key, value in zip(shard_keys, values, strict=True):
                if value is not None:
                    found[key] = _bytes(value)
        return found

    # -- running script calls ---------------------------------------------------------------

    def _run(self, calls: Sequence[_Call]) -> list[Any]:
        """Run ``calls`` in one pipelined round trip; return their replies, in order.

        :func:`~common.redis_layout.script_runner.run_pipelined` sends them (``EVALSHA``
        straight into the pipeline, and when Redis lost the scripts the whole round trip again:
        every call is idempotent, so the calls that did run -- none, in practice -- skip on the
        second pass). With a :class:`~common.replica_wait.ReplicaWait`, the round trip ends
        with its ``WAIT`` (module docstring); too few replicas raise
        :class:`~common.replica_wait.ReplicationShortfallError`, after a fence (the stronger
        news) and a shard's error were looked for.
        """
        if not calls:
            return []
        if self._wait.enabled:
            replies, waited = script_runner.run_pipelined(self._client, calls, self._wait)
        else:
            replies, waited = self._execute(calls), []
        fenced = [
            (call, reply)
            for call, reply in zip(calls, replies, strict=True)
            if not isinstance(reply, BaseException) and reply[0] == 0
        ]
        if fenced:
            call, reply = fenced[0]
            raise FencedError(call.shard, int(call.args[0]), int(reply[1]))
        for call, reply in zip(calls, replies, strict=True):
            # Any error in place of a reply: a script's ResponseError, or the ConnectionError a
            # Cluster pipeline leaves there for a node that died mid-batch (raised as if the
            # whole pipeline had failed, which the caller retries).
            if isinstance(reply, BaseException):
                reply.add_note(f"while writing shard {call.shard} of {self.resource}")
                raise reply
        for reply in waited:
            self._wait.check(reply, f"publishing {self.resource}")
        return replies

    def _execute(self, calls: Sequence[_Call]) -> list[Any]:
        """The calls' replies, in order: one pipelined round trip, no ``WAIT``."""
        return script_runner.run_pipelined(self._client, calls)[0]


@dataclass(frozen=True, slots=True)
class _Call:
    """One script call on one shard, as it goes into the pipeline."""

    shard: int
    script: LuaScript
    keys: tuple[str, ...]
    args: Sequence[str | bytes]


def _check_epoch(epoch: int) -> None:
    if type(epoch) is not int or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
