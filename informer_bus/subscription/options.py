"""What a subscription is asked for, checked before it talks to Redis: the resource, the start
position, the delta types, and the other settings both kinds of subscription share.

Every check here is pure, so a mistake raises :class:`SubscribeError` where the subscription
is made, not later at its first read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from common.deltas import DeltaType
from common.redis_layout import DEFAULT_PREFIX, ResourceKeys
from common.resource_ids import resource_id_from
from informer_bus.subscription.delta import SubscribedDelta, UndecodableEntry

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_BLOCK_MS",
    "FROM_BEGINNING",
    "FROM_NOW",
    "VALID_TYPES",
    "Selection",
    "StopSignal",
    "SubscribeError",
    "check_start",
    "parse_types",
    "resource_id_of",
]

FROM_BEGINNING: Final = "0-0"
"""``start`` for every delta still on the streams (retention may have trimmed older ones)."""
FROM_NOW: Final = "$"
"""``start`` for only the deltas published after the subscription opens (its ``with`` block,
``async with`` block or first read)."""

DEFAULT_BLOCK_MS: Final = 2000
"""How long one ``XREAD`` waits for new entries; bounds how late a ``stop`` is noticed."""
DEFAULT_BATCH: Final = 500

_STREAM_ID = re.compile(r"(0|[1-9][0-9]{0,19})(?:-(0|[1-9][0-9]{0,19}))?")
_UINT64_MAX: Final = 2**64 - 1
VALID_TYPES: Final = ", ".join(member.value for member in DeltaType)


class SubscribeError(ValueError):
    """A subscription that cannot start (unknown resource, bad start ID, bad type, wrong client);
    the message is one line meant for a human."""


class StopSignal(Protocol):
    """Anything with ``is_set()``, e.g. a :class:`threading.Event`: checked between reads."""

    def is_set(self) -> bool: ...


def resource_id_of(resource: str) -> str:
    """The resource id used in Redis keys, from an id or from the spec a reflector was given.

    ``pods``, ``deployments.apps`` and ``pods@shop`` are ids already; ``deployments.v1.apps`` or
    ``pods@shop?labelSelector=app%3Dweb`` become ``deployments.apps`` and ``pods@shop``, so a
    user can paste the reflector's ``--resource`` as is. Text that is neither (``x!!bogus``)
    raises :class:`SubscribeError`: no reflector could publish it (the rule of
    :mod:`common.resource_ids`, the same for every tool).
    """
    try:
        return resource_id_from(resource)
    except ValueError as exc:
        raise SubscribeError(str(exc)) from None


def check_start(start: str) -> str:
    """``start`` if it is ``$``, ``0`` or a stream entry ID (``MS`` or ``MS-SEQ``), else a
    :class:`SubscribeError` that says what is expected."""
    if start == FROM_NOW:
        return start
    match = _STREAM_ID.fullmatch(start)
    if match is None or any(int(part) > _UINT64_MAX for part in match.groups() if part):
        raise SubscribeError(
            f"invalid stream entry ID {start!r}: expected MILLISECONDS-SEQUENCE such as "
            "1714567890123-0 (or just MILLISECONDS), as printed in the 'id' field"
        )
    return start


def parse_types(names: Iterable[DeltaType | str]) -> frozenset[DeltaType]:
    """Delta types from their client-go names (any case; commas split several)."""
    by_name = {member.value.lower(): member for member in DeltaType}
    chosen: set[DeltaType] = set()
    for name in names:
        if isinstance(name, DeltaType):
            chosen.add(name)
            continue
        for part in name.split(","):
            member = by_name.get(part.strip().lower())
            if member is None:
                raise SubscribeError(f"unknown delta type {part.strip()!r}; use {VALID_TYPES}")
            chosen.add(member)
    if not chosen:
        raise SubscribeError(f"no delta type given; use {VALID_TYPES}")
    return frozenset(chosen)


@dataclass(frozen=True, slots=True)
class Selection:
    """Which resource, which of its shards, which deltas: checked once, shared by both kinds
    of subscription."""

    resource: str
    prefix: str
    shard_count: int | None
    types: frozenset[DeltaType] | None
    namespace: str | None
    batch: int
    on_undecodable: Callable[[UndecodableEntry], None]

    @classmethod
    def of(
        cls,
        resource: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        shard_count: int | None,
        types: Iterable[DeltaType | str] | None,
        namespace: str | None,
        batch: int,
        on_undecodable: Callable[[UndecodableEntry], None],
    ) -> Selection:
        resource_id = resource_id_of(resource)
        try:
            ResourceKeys(prefix, resource_id)
        except ValueError as exc:
            raise SubscribeError(str(exc)) from None
        if shard_count is not None and (type(shard_count) is not int or shard_count < 1):
            raise SubscribeError(f"shard count must be an integer >= 1, got {shard_count!r}")
        if batch < 1:
            raise SubscribeError(f"batch must be >= 1, got {batch}")
        chosen = None if types is None else parse_types(types)
        return cls(resource_id, prefix, shard_count, chosen, namespace, batch, on_undecodable)

    def wanted(self, delta: SubscribedDelta) -> bool:
        """The delta passes the ``types`` and ``namespace`` filters."""
        if self.types is not None and delta.envelope.type not in self.types:
            return False
        return self.namespace is None or delta.namespace == self.namespace
