"""The reflector's write side: deltas onto sharded Redis streams, atomically per shard, fenced.

``docs/architecture.md`` is the specification (Redis layout, publish protocol, fencing). Each
batch is grouped by shard and each shard's group is written by **one Lua script call** that
checks the leader fence, skips what the shard already has, appends the rest to the stream,
records the known state (``versions`` and ``objects``) and moves the checkpoint -- all in one
atomic step on keys that share one Cluster hash tag. All the shards' calls of a batch go out in
one pipelined round trip (not a transaction: a transaction would need one slot, and per-shard
atomicity plus idempotence is what makes a crash between two shards' writes safe).

Why every write is idempotent, and what "already has it" means (the rules of
:data:`PUBLISH_LUA`, in this order):

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

Deliberately no ``MAXLEN`` on the ``XADD``: a trim inside the publish would drop entries that a
consumer group has not read yet, silently; :mod:`reflector_svc.retention` trims instead, below
what every live group has consumed, and reports when a hard cap forces more.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from common.deltas import DeltaType
from common.redis_layout import ShardKeys
from common.sharding import shard_for

__all__ = [
    "CHECKPOINT_LUA",
    "PUBLISH_LUA",
    "FencedError",
    "PendingDelta",
    "PublishResult",
    "ResumePoint",
    "ShardCheckpoint",
    "ShardPublishResult",
    "ShardPublisher",
]

# Shared by both scripts: exact comparison of unsigned decimal integers given as strings.
_LUA_DIGITS: Final = r"""
local function digits(s)
  -- s without leading zeros when it is an unsigned decimal integer, else nil
  if not s or not string.find(s, '^%d+$') then return nil end
  local t = string.gsub(s, '^0+', '')
  return t
end
local function cmp(a, b)
  -- -1, 0, 1 for two results of digits(): longer is larger, same length compares bytewise
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  return a < b and -1 or 1
end
"""

PUBLISH_LUA: Final = (
    "#!lua\n"
    + _LUA_DIGITS
    + r"""
-- One shard's group of one batch.
-- KEYS: 1 stream, 2 versions, 3 objects, 4 checkpoint (one hash tag).
-- ARGV: 1 epoch, 2 '1' to set the checkpoint else '0', 3 checkpoint rv,
--       then per delta 4 values: kind ('U' upsert, 'D' deletion), key, rv, envelope.
-- Returns {0, fence} when fenced (nothing written), else {1, id_1, ..., id_n}: the stream ID
-- of each delta, '' for a skipped one.
local stream, versions, objects, checkpoint = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local state = redis.call('HMGET', checkpoint, 'fence', 'rv')
local fence = state[1] or '0'
local order = cmp(digits(ARGV[1]), digits(fence) or '')
if order < 0 then return {0, fence} end
if order > 0 then redis.call('HSET', checkpoint, 'fence', ARGV[1]) end
local moves = ARGV[2] == '1'
local current = digits(state[2])
local replay_below = nil
if moves then replay_below = current end
local out = {1}
for i = 4, #ARGV, 4 do
  local kind, key, rv, envelope = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local n = digits(rv)
  local skip = kind ~= 'D' and replay_below ~= nil and n ~= nil and cmp(n, replay_below) <= 0
  if not skip then
    local known = redis.call('HGET', versions, key)
    if known then
      local k = digits(known)
      if kind == 'D' then
        skip = k ~= nil and n ~= nil and cmp(k, n) > 0
      elseif k ~= nil and n ~= nil then
        skip = cmp(k, n) >= 0
      else
        skip = known == rv
      end
    else
      skip = kind == 'D'
    end
  end
  local id = ''
  if not skip then
    id = redis.call('XADD', stream, '*', 'd', envelope)
    if kind == 'D' then
      redis.call('HDEL', versions, key)
      redis.call('HDEL', objects, key)
    else
      redis.call('HSET', versions, key, rv)
      redis.call('HSET', objects, key, envelope)
    end
  end
  out[#out + 1] = id
end
if moves then
  local new = digits(ARGV[3])
  if current == nil or new == nil or cmp(new, current) > 0 then
    redis.call('HSET', checkpoint, 'rv', ARGV[3])
  end
end
return out
"""
)
"""The publish script (see the module docstring for its rules). ``#!lua`` (Redis 7 shebang)
makes Redis refuse the whole call up front under ``maxmemory`` pressure instead of failing at
the first write inside it, so a call applies entirely or not at all; it also means the script
may only touch the keys it declares."""

CHECKPOINT_LUA: Final = (
    "#!lua\n"
    + _LUA_DIGITS
    + r"""
-- Fenced checkpoint operations on one shard. KEYS: 1 checkpoint.
-- ARGV: 1 epoch, 2 op, 3 rv. op: 'fence' raise the fence; 'advance' rv = max(rv, ARGV[3]);
-- 'begin' relisting = 1; 'finish' rv = synced_rv = ARGV[3], relisting = 0, synced_at = now
-- (ms, Redis clock: when the last relist finished, for `informer-bus status`).
-- Returns {0, fence} when a newer epoch fenced the shard (nothing written), else {1}.
local checkpoint, op = KEYS[1], ARGV[2]
local fence = redis.call('HGET', checkpoint, 'fence') or '0'
local order = cmp(digits(ARGV[1]), digits(fence) or '')
if order < 0 then return {0, fence} end
if order > 0 then redis.call('HSET', checkpoint, 'fence', ARGV[1]) end
if op == 'advance' then
  local current = digits(redis.call('HGET', checkpoint, 'rv'))
  local new = digits(ARGV[3])
  if current == nil or new == nil or cmp(new, current) > 0 then
    redis.call('HSET', checkpoint, 'rv', ARGV[3])
  end
elseif op == 'begin' then
  redis.call('HSET', checkpoint, 'relisting', '1')
elseif op == 'finish' then
  local now = redis.call('TIME')
  local now_ms = tostring(tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
  redis.call('HSET', checkpoint, 'rv', ARGV[3], 'synced_rv', ARGV[3], 'relisting', '0',
             'synced_at', now_ms)
elseif op ~= 'fence' then
  return redis.error_reply('unknown checkpoint op ' .. op)
end
return {1}
"""
)
"""Fenced writes of a shard's checkpoint hash; every op also raises the fence to the caller's
epoch when that is newer (the fence is "the highest leader epoch seen")."""


@dataclass(frozen=True, slots=True)
class PendingDelta:
    """One delta ready to publish: routing and dedup facts beside the encoded envelope.

    ``resource_version`` is the envelope's: the object's RV, the deletion's RV for a watched
    deletion, the last known object's RV for a relist tombstone (``""`` when that is unknown).
    ``envelope`` is :func:`common.wire.encode_envelope`'s output; for a deletion it carries the
    final object or the tombstone's last object, which is what ``objects`` loses.
    """

    type: DeltaType
    key: str
    resource_version: str
    envelope: bytes


@dataclass(frozen=True)
class ShardCheckpoint:
    """One shard's checkpoint hash, decoded (``docs/architecture.md``)."""

    rv: str | None
    """Every event up to this RV is on the shard's stream; ``None`` before the first list."""
    fence: int
    """The highest leader epoch seen (0 when never fenced)."""
    synced_rv: str | None
    """The list RV of the last completed relist."""
    relisting: bool
    """A relist diff was started and not finished: the known state may be half-updated."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a (re)starting reflector continues: watch from ``resource_version`` unless
    ``needs_relist`` (then list, diff against the known state, and finish the relist)."""

    resource_version: str | None
    needs_relist: bool


@dataclass(frozen=True, slots=True)
class ShardPublishResult:
    """What one shard's script call did with its group of a batch."""

    shard: int
    stream_ids: tuple[str | None, ...]
    """Per delta of the group, in order: its new stream ID, or ``None`` when skipped."""

    @property
    def published(self) -> int:
        """Deltas appended to the stream."""
        return sum(1 for stream_id in self.stream_ids if stream_id is not None)

    @property
    def skipped(self) -> int:
        """Deltas the shard already had (replays, stale versions, unknown deletions)."""
        return len(self.stream_ids) - self.published


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What a :meth:`ShardPublisher.publish` call did, per touched shard and in total."""

    shards: Mapping[int, ShardPublishResult]
    published_by_type: Mapping[DeltaType, int] = field(default_factory=dict)
    """Published (not skipped) deltas per type, for the "deltas published by type" metric."""

    @property
    def published(self) -> int:
        """Deltas appended, over all shards."""
        return sum(result.published for result in self.shards.values())

    @property
    def skipped(self) -> int:
        """Deltas skipped as already published, over all shards."""
        return sum(result.skipped for result in self.shards.values())


class FencedError(Exception):
    """A write was refused: a newer leader epoch fenced the shard. The caller must step down.

    Other shards of the same call may have been written (each shard is atomic on its own, and
    every write is idempotent), which is harmless: the new leader resumes from the lowest
    checkpoint and skips what is there.
    """

    def __init__(self, shard: int, epoch: int, fence: int) -> None:
        super().__init__(f"shard {shard} is fenced at epoch {fence}; this writer has epoch {epoch}")
        self.shard = shard
        self.epoch = epoch
        self.fence = fence


_CHECKPOINT_FIELDS: Final = ("rv", "fence", "synced_rv", "relisting")


class ShardPublisher:
    """Writes one resource's deltas and checkpoints onto its ``shard_count`` shards.

    ``client`` should not decode responses (envelopes are bytes; other replies are decoded
    here either way). Calls are as thread-safe as the client, but per-object order needs a
    single publishing thread per resource: the leader's.
    """

    def __init__(
        self, client: redis.Redis, *, prefix: str, resource: str, shard_count: int
    ) -> None:
        shard_for("", shard_count)  # validates shard_count (ValueError)
        self._client = client
        self.prefix = prefix
        self.resource = resource
        self.shard_count = shard_count
        self.shards: tuple[ShardKeys, ...] = tuple(
            ShardKeys(prefix, resource, shard) for shard in range(shard_count)
        )
        self._publish_keys = tuple(
            (keys.stream, keys.versions, keys.objects, keys.checkpoint) for keys in self.shards
        )
        # Registered once; their SHA1 is what every call sends. Outside a pipeline the Script
        # object reloads on NOSCRIPT itself; in a pipeline see _run.
        self._publish_script: Script = client.register_script(PUBLISH_LUA)
        self._checkpoint_script: Script = client.register_script(CHECKPOINT_LUA)

    def shard_of(self, key: str) -> int:
        """The shard owning cache key ``key``."""
        return shard_for(key, self.shard_count)

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
        groups: dict[int, list[PendingDelta]] = {}
        for delta in deltas:
            groups.setdefault(shard_for(delta.key, self.shard_count), []).append(delta)
        groups = dict(sorted(groups.items()))  # a deterministic call order (and FencedError)
        calls = self._publish_calls(epoch, groups, checkpoint_rv)
        replies = self._run(calls)
        return self._publish_result(groups, replies)

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
            stream_ids = tuple(_text(stream_id) or None for stream_id in reply[1:])
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
        been published (a bookmark's RV after the batch before it was published).
        """
        self._checkpoint_op(epoch, "advance", rv)

    def begin_relist(self, epoch: int) -> None:
        """Mark every shard ``relisting`` before a relist diff is written, fenced: a crash
        before :meth:`finish_relist` then makes the next leader relist instead of trusting a
        half-written diff."""
        self._checkpoint_op(epoch, "begin", "")

    def finish_relist(self, epoch: int, list_rv: str) -> None:
        """After the whole diff is published: ``rv = synced_rv = list_rv``, not relisting."""
        self._checkpoint_op(epoch, "finish", list_rv)

    def _checkpoint_op(self, epoch: int, op: str, rv: str) -> None:
        _check_epoch(epoch)
        args = [str(epoch), op, rv]
        calls = [
            _Call(keys.shard, self._checkpoint_script, (keys.checkpoint,), args)
            for keys in self.shards
        ]
        self._run(calls)

    def read_checkpoints(self) -> list[ShardCheckpoint]:
        """Every shard's checkpoint, index = shard (one round trip)."""
        pipe = self._client.pipeline(transaction=False)
        for keys in self.shards:
            pipe.hmget(keys.checkpoint, _CHECKPOINT_FIELDS)
        checkpoints = []
        for rv, fence, synced_rv, relisting in pipe.execute():
            checkpoints.append(
                ShardCheckpoint(
                    rv=_text(rv),
                    fence=int(fence) if fence is not None else 0,
                    synced_rv=_text(synced_rv),
                    relisting=_text(relisting) == "1",
                )
            )
        return checkpoints

    def resume_point(self) -> ResumePoint:
        """Where to continue: the *lowest* shard checkpoint, so that no shard misses an event.

        Shards that are ahead skip the replayed events (module docstring). ``needs_relist``
        when any shard is mid-relist or has no checkpoint (never listed), or when checkpoints
        are not decimal integers and differ (they cannot be ordered, so none is safe).
        """
        checkpoints = self.read_checkpoints()
        rvs = [checkpoint.rv for checkpoint in checkpoints]
        relisting = any(checkpoint.relisting for checkpoint in checkpoints)
        present = [rv for rv in rvs if rv is not None]
        if len(present) < len(rvs):
            return ResumePoint(None, True)
        if all(rv.isdigit() and rv.isascii() for rv in present):
            return ResumePoint(min(present, key=int), relisting)
        if len(set(present)) == 1:
            return ResumePoint(present[0], relisting)
        return ResumePoint(None, True)

    # -- relist support ---------------------------------------------------------------------

    def known_versions(self) -> dict[str, str]:
        """key -> resourceVersion of every object any shard knows (one round trip)."""
        pipe = self._client.pipeline(transaction=False)
        for keys in self.shards:
            pipe.hgetall(keys.versions)
        known: dict[str, str] = {}
        for versions in pipe.execute():
            for key, version in versions.items():
                known[_str(key)] = _str(version)
        return known

    def last_objects(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The last published envelope of each of ``keys`` that a shard knows (one round
        trip): what a relist's tombstone for a vanished key carries."""
        by_shard: dict[int, list[str]] = {}
        for key in keys:
            by_shard.setdefault(shard_for(key, self.shard_count), []).append(key)
        if not by_shard:
            return {}
        pipe = self._client.pipeline(transaction=False)
        for shard, shard_keys in by_shard.items():
            pipe.hmget(self.shards[shard].objects, shard_keys)
        found: dict[str, bytes] = {}
        for shard_keys, values in zip(by_shard.values(), pipe.execute(), strict=True):
            for key, value in zip(shard_keys, values, strict=True):
                if value is not None:
                    found[key] = value.encode() if isinstance(value, str) else value
        return found

    # -- running script calls ---------------------------------------------------------------

    def _run(self, calls: Sequence[_Call]) -> list[Any]:
        """Run ``calls`` in one pipelined round trip; return their replies, in order.

        ``EVALSHA`` straight into the pipeline. redis-py's own ``Script`` in a pipeline sends a
        blocking ``SCRIPT EXISTS`` before every ``execute`` -- a second round trip per batch.
        Instead, when Redis lost the scripts (restart, failover, ``SCRIPT FLUSH``), they are
        loaded and the whole pipeline runs again: every call is idempotent, so the calls that
        did run (none, in practice) skip on the second pass.
        """
        if not calls:
            return []
        replies = self._execute(calls)
        if any(isinstance(reply, NoScriptError) for reply in replies):
            for script in {id(call.script): call.script for call in calls}.values():
                script.sha = self._client.script_load(script.script)
            replies = self._execute(calls)
        fenced = [
            (call, reply)
            for call, reply in zip(calls, replies, strict=True)
            if not isinstance(reply, BaseException) and reply[0] == 0
        ]
        if fenced:
            call, reply = fenced[0]
            raise FencedError(call.shard, int(call.args[0]), int(reply[1]))
        for call, reply in zip(calls, replies, strict=True):
            if isinstance(reply, ResponseError):
                reply.add_note(f"while writing shard {call.shard} of {self.resource}")
                raise reply
        return replies

    def _execute(self, calls: Sequence[_Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        # execute_command rather than pipe.evalsha, which redis-py's Cluster pipeline refuses
        # outright; both route EVALSHA by its keys (one shard, one slot). Unannotated in redis-py.
        queue: Any = pipe.execute_command
        for call in calls:
            queue("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies


@dataclass(frozen=True, slots=True)
class _Call:
    """One script call on one shard, as it goes into the pipeline."""

    shard: int
    script: Script
    keys: tuple[str, ...]
    args: Sequence[str | bytes]


def _check_epoch(epoch: int) -> None:
    if type(epoch) is not int or epoch < 0:
        raise ValueError(f"epoch must be an integer >= 0, got {epoch!r}")


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
