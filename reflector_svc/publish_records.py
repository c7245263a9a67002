"""What the reflector and its delta sink exchange: deltas ready to publish, what a publish
did, where to resume, and the refusal of a fenced write.

Neutral ground: the reflector's :class:`~reflector_svc.reflector.DeltaSink` protocol speaks in
these types, the Redis sink (:class:`~reflector_svc.publisher.ShardPublisher`) and the
in-memory one of the tests produce them, and none of them imports another for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common.deltas import DeltaType

__all__ = [
    "FencedError",
    "PendingDelta",
    "PublishResult",
    "ResumePoint",
    "ShardPublishResult",
]


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
    shard_key: str | None = None
    """What the object is sharded by (:mod:`common.shard_routing`), computed once where the
    envelope is built; ``None`` when that is its key (the default choice), so a resource sharded
    by key carries nothing more."""


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
    """What a :meth:`~reflector_svc.publisher.ShardPublisher.publish` call did, per touched
    shard and in total."""

    shards: Mapping[int, ShardPublishResult]
    published_by_type: Mapping[DeltaType, int] = field(default_factory=dict)
    """Published (not skipped) deltas per type, for the "deltas published by type" metric (a
    move's halves count as the Deleted and the Added they are on the streams)."""
    moves: int = 0
    """Objects that arrived on a new shard (incoming halves of moves written)."""

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
