"""A bystander's place on every shard stream: plain ``XREAD`` after a position per shard,
outside every consumer group, so it can neither steal nor acknowledge anybody's entries.

Conversations (:mod:`common.redis_conversation`), shared by the blocking and the asyncio
subscription.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from common.redis_conversation import Commands, Conversation, Pause, call
from common.redis_layout import ShardKeys
from informer_bus.subscription.options import FROM_NOW
from informer_bus.subscription.stream_replies import Batches, stream_batches, text

__all__ = ["PositionCursor"]

_CLUSTER_POLL_SECONDS: Final = 0.05
"""How long a subscriber on a Redis Cluster waits after a read that found nothing new."""


class PositionCursor:
    """Where a bystander stands on each shard stream, and its reads from there."""

    def __init__(self, *, batch: int, block_ms: int) -> None:
        self._batch = batch
        self._block_ms = block_ms
        self._cluster = False
        self.positions: dict[str, str] = {}

    def start(
        self, shards: Sequence[ShardKeys], start: str, *, cluster: bool
    ) -> Conversation[None]:
        """Stand at ``start`` on every shard; ``$`` is resolved once, here, to each stream's
        last entry: passing ``$`` to every XREAD would skip whatever arrives on one shard while
        the caller is busy with another's entries."""
        self._cluster = cluster
        if start != FROM_NOW:
            self.positions = {keys.stream: start for keys in shards}
            return
        lasts: list[list[tuple[bytes, object]]] = yield Commands(
            tuple(call("xrevrange", keys.stream, count=1) for keys in shards)
        )
        self.positions = {
            keys.stream: text(last[0][0]) if last else "0-0"
            for keys, last in zip(shards, lasts, strict=True)
        }

    def read(self) -> Conversation[Batches]:
        """One read of every shard after its position. On a Redis Cluster one XREAD cannot
        name streams of several slots, so each shard is read without blocking (one pipeline,
        split per node by redis-py) and an empty round waits a short poll interval instead."""
        if not self._cluster:
            (reply,) = yield Commands.one(
                "xread", dict(self.positions), count=self._batch, block=self._block_ms
            )
            return self._advance(stream_batches(reply))
        replies: list[Any] = yield Commands(
            tuple(
                call("xread", {stream: at}, count=self._batch)
                for stream, at in self.positions.items()
            )
        )
        batches = [batch for reply in replies for batch in stream_batches(reply) if batch[1]]
        if not batches:
            yield Pause(_CLUSTER_POLL_SECONDS)
        return self._advance(batches)

    def _advance(self, batches: Batches) -> Batches:
        """Stand after what this read returned: the caller takes all of it before the next."""
        for stream, entries in batches:
            if entries:
                self.positions[stream] = text(entries[-1][0])
        return batches
