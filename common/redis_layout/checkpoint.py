"""Reading a shard's checkpoint hash: the one decoder of what the reflector leader wrote there.

The reflector reads its checkpoints back to resume, ``status`` shows them, and every reader
checks ``synced_rv`` before it trusts a shard (:mod:`common.publication`). They used to decode
the hash each its own way; a reader that disagreed with the writer about, say, what
``relisting`` holds would have called a half-written shard synced. The fields and what they
mean: :mod:`.names` and ``docs/architecture.md`` ("Redis layout").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.redis_layout.key_names import ShardKeys
from common.redis_layout.names import (
    CHECKPOINT_FENCE,
    CHECKPOINT_FIELDS,
    CHECKPOINT_RELISTING,
    CHECKPOINT_RV,
    CHECKPOINT_SYNCED_AT,
    CHECKPOINT_SYNCED_RV,
)
from common.redis_replies import as_text

__all__ = [
    "ShardCheckpoint",
    "decode_checkpoint",
    "is_listed",
    "queue_checkpoint",
    "queue_listed",
]


@dataclass(frozen=True)
class ShardCheckpoint:
    """One shard's checkpoint hash, decoded (``docs/architecture.md``)."""

    rv: str | None
    """Every event up to this RV is on the shard's stream; ``None`` before the first list."""
    fence: int
    """The highest leader epoch seen (0 when never fenced, or when what is there is not a
    decimal integer: the scripts read such a fence as below every epoch)."""
    synced_rv: str | None
    """The list RV of the last completed relist."""
    relisting: bool
    """A relist diff was started and not finished: the known state may be half-updated."""
    synced_at: int | None = None
    """When the last relist completed (ms, Redis clock); ``None`` when not read (the
    resume fields, :func:`queue_checkpoint`), never written, or not an integer."""

    @property
    def synced(self) -> bool:
        """The shard holds a complete list: a relist completed and none is half-written."""
        return self.synced_rv is not None and not self.relisting


def queue_checkpoint(pipe: Any, keys: ShardKeys) -> None:
    """Add the read of ``keys``' checkpoint fields a reflector resumes from (``HMGET``, no
    ``synced_at``) to ``pipe``; decode its reply with :func:`decode_checkpoint`."""
    pipe.hmget(keys.checkpoint, CHECKPOINT_FIELDS)


def decode_checkpoint(reply: Mapping[Any, Any] | Sequence[Any] | None) -> ShardCheckpoint:
    """A checkpoint from the reply of :func:`queue_checkpoint` (``HMGET`` of
    :data:`~common.redis_layout.names.CHECKPOINT_FIELDS`, in that order) or of an ``HGETALL``
    of the hash (``None``: the read failed, taken as no hash)."""
    if reply is None:
        fields: dict[str, str] = {}
    elif isinstance(reply, Mapping):
        fields = {as_text(name): as_text(value) for name, value in reply.items()}
    else:
        fields = {
            name: as_text(value)
            for name, value in zip(CHECKPOINT_FIELDS, reply, strict=True)
            if value is not None
        }
    fence = fields.get(CHECKPOINT_FENCE)
    synced_at = fields.get(CHECKPOINT_SYNCED_AT)
    return ShardCheckpoint(
        rv=fields.get(CHECKPOINT_RV),
        fence=int(fence) if fence is not None and fence.isascii() and fence.isdigit() else 0,
        synced_rv=fields.get(CHECKPOINT_SYNCED_RV),
        relisting=fields.get(CHECKPOINT_RELISTING) == "1",
        synced_at=(
            int(synced_at) if synced_at is not None and synced_at.lstrip("-").isdigit() else None
        ),
    )


def queue_listed(pipe: Any, keys: ShardKeys) -> None:
    """Add the read of whether ``keys``' shard ever completed a list (``HGET synced_rv``: a
    processor's minimal ACL has it) to ``pipe``; decode its reply with :func:`is_listed`."""
    pipe.hget(keys.checkpoint, CHECKPOINT_SYNCED_RV)


def is_listed(reply: object) -> bool:
    """Whether :func:`queue_listed`'s reply says the shard holds a complete list: the
    reflector never removes ``synced_rv`` once written."""
    return reply is not None
