"""Reading a lease hash from outside its scripts: who holds it, with which epoch.

Leases are written by their scripts only (:mod:`.lease_scripts`); several readers look at them
without taking them -- a processor's coordinator reads every shard's holder with its heartbeat,
``status`` shows leaders and owners, a reader checks whether a reflector leads. They read the
fields named here and decode them here, so none of them spells a lease's fields. Pure: the
caller's pipeline sends the commands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.redis_layout.names import LEASE_EPOCH, LEASE_HOLDER
from common.redis_replies import as_text

__all__ = ["LeaseFields", "decode_holder", "decode_lease", "queue_holder", "queue_lease"]


@dataclass(frozen=True, slots=True)
class LeaseFields:
    """A lease hash, decoded."""

    holder: str | None
    """Who holds it; ``None`` when nobody does (no hash, or no holder field)."""
    epoch: int | None
    """Its fencing epoch; ``None`` when absent or not an integer."""


def queue_lease(pipe: Any, key: str) -> None:
    """Add the read of lease ``key``'s holder and epoch (``HMGET``) to ``pipe``; decode its reply
    with :func:`decode_lease`."""
    pipe.hmget(key, [LEASE_HOLDER, LEASE_EPOCH])


def decode_lease(reply: Sequence[Any] | Mapping[Any, Any] | None) -> LeaseFields:
    """A lease from :func:`queue_lease`'s reply or from an ``HGETALL`` of the hash (``None``: the
    read failed, taken as no lease)."""
    if reply is None:
        return LeaseFields(None, None)
    if isinstance(reply, Mapping):
        fields = {as_text(name): value for name, value in reply.items()}
        holder, epoch = fields.get(LEASE_HOLDER), fields.get(LEASE_EPOCH)
    else:
        holder, epoch = reply
    epoch_text = None if epoch is None else as_text(epoch)
    return LeaseFields(
        holder=None if holder is None else as_text(holder),
        epoch=(
            int(epoch_text) if epoch_text is not None and epoch_text.lstrip("-").isdigit() else None
        ),
    )


def queue_holder(pipe: Any, key: str) -> None:
    """Add the read of lease ``key``'s holder alone (``HGET``: the processors' minimal ACL has
    it) to ``pipe``; decode its reply with :func:`decode_holder`."""
    pipe.hget(key, LEASE_HOLDER)


def decode_holder(reply: bytes | str | None) -> str | None:
    """:func:`queue_holder`'s reply: the holder, ``None`` when nobody holds the lease."""
    return None if reply is None else as_text(reply)
