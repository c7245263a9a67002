"""The fenced read/acknowledge protocol of one shard's stream, and its dead letters.

Every command that changes the consumer group -- reads included, since ``XREADGROUP`` moves the
group's last-delivered ID -- runs in a Lua script (:mod:`common.redis_layout.shard_scripts`)
that first checks that the shard lease still names this member and epoch. So a stale owner
(paused past its lease) can neither acknowledge nor pull entries out from under the new owner:
a refused script raises :class:`OwnershipLostError`, and its caller acknowledges nothing more.

**Poison entries** (undecodable, schema-invalid, no payload because trimmed, or refused by the
store's index functions) are written to the dead-letter stream (``reason``, ``id``, ``payload``
when there was one) by the same fenced script that acknowledges them, in stream order: an entry
is parked if and only if it is acknowledged.

**Replicas** (``--redis-wait-replicas N``): with a :class:`~common.replica_wait.ReplicaWait`,
every script -- a read, an acknowledging call, a takeover's commit -- goes out in one pipeline
with ``WAIT N timeout`` after it, on the node of the shard's keys: one ``WAIT`` per batch,
never per entry. Too few replicas raise :class:`~common.replica_wait.ReplicationShortfallError`
(a ``redis.RedisError``): the worker keeps those IDs to acknowledge again and replays its
pending entries, as after any failed call. A fence refusal is reported first.

Reads wait too, and that is what keeps handlers from seeing a delta a failover then takes
back: the reflector's ``XADD`` reaches the primary before its own ``WAIT`` returns, so without
one here a processor could hand an entry no replica has yet to a handler; after a failover the
next owner's initial list would then show an older version of that object (seen in the
Sentinel kill -9 runs of ``make ha``). ``XREADGROUP`` writes (the group's position, the
pending list), so this connection's ``WAIT`` covers the replication stream up to the read,
hence every entry it returned.

The helpers at the end read the shapes Redis replies with (bytes or text IDs, flat field
lists, a trimmed entry's ``None``) the same way for every caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis
from prometheus_client import Counter

from common.redis_layout import (
    DEAD_LETTER_ID,
    DEAD_LETTER_PAYLOAD,
    DEAD_LETTER_REASON,
    SHARD_CONSUMER,
    GroupShardKeys,
)
from common.redis_layout.lua import LuaScript
from common.redis_layout.script_runner import run, run_then_wait
from common.redis_layout.shard_scripts import FENCED_ACK, FENCED_HELD, FENCED_READ
from common.redis_replies import as_text
from common.replica_wait import NO_WAIT, ReplicaWait
from common.wire import FIELD
from processor_svc.held_keys import HeldState, held_arguments

__all__ = [
    "DEAD_LETTER_MAXLEN",
    "DeadLetter",
    "FencedStream",
    "OwnershipLostError",
    "as_mapping",
    "id_tuple",
    "payload_of",
    "raw_of",
]

DEAD_LETTER_MAXLEN: Final = 10_000
"""Dead-letter streams are capped (approximately): poison must not grow Redis without bound."""
HELD_CHANGES_PER_CALL: Final = 1000
"""Held set changes per script call (a big takeover's would otherwise be one huge call)."""


class OwnershipLostError(Exception):
    """A fenced script found the lease held by someone else (or another epoch)."""

    def __init__(self, holder: str, epoch: str) -> None:
        super().__init__(f"the shard lease is held by {holder or 'nobody'!r} (epoch {epoch!r})")


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry to park: the dead-letter stream's field/value pairs."""

    fields: tuple[tuple[str, bytes | str], ...]

    @classmethod
    def of(cls, source_id: str, reason: str, raw: Any) -> DeadLetter:
        pairs: list[tuple[str, bytes | str]] = [
            (DEAD_LETTER_REASON, reason[:2000]),
            (DEAD_LETTER_ID, source_id),
        ]
        if isinstance(raw, bytes):
            pairs.append((DEAD_LETTER_PAYLOAD, raw))
        elif isinstance(raw, Mapping):
            # Not our one-field layout: keep what was there, field by field.
            for name, value in raw.items():
                if isinstance(name, bytes | str) and isinstance(value, bytes | str):
                    text = name.decode(errors="replace") if isinstance(name, bytes) else name
                    pairs.append((f"field:{text}", value))
        return cls(tuple(pairs))


class FencedStream:
    """One owner's fenced access to a shard's stream: reads, acknowledgements, dead letters.

    ``keys`` name the consumer group (its lease, its dead letters) as well as the shard.

    ``member_id`` and ``epoch`` are the holder and fencing token of our shard lease; every call
    raises :class:`OwnershipLostError` when the lease names anything else, and
    ``redis.RedisError`` when Redis cannot be reached (XACK is idempotent: a caller that does not
    know whether a call ran may send the same acknowledgements again). ``dead_letters`` counts
    the letters parked. After :meth:`stop_acknowledging` (ownership is gone, or going),
    :meth:`acknowledge` sends nothing more.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: GroupShardKeys,
        *,
        member_id: str,
        epoch: int,
        dead_letters: Counter,
        replica_wait: ReplicaWait = NO_WAIT,
    ) -> None:
        self.client, self.keys = client, keys
        self._wait = replica_wait
        self._lease_args = (member_id, str(epoch))
        self._dead_letters = dead_letters
        self._acknowledging = True

    @property
    def acknowledging(self) -> bool:
        """``False`` once :meth:`stop_acknowledging` was called."""
        return self._acknowledging

    def stop_acknowledging(self) -> None:
        """Send no acknowledgement from now on (someone else may own the shard already)."""
        self._acknowledging = False

    def check_lease(self, holder: bytes | None, epoch: bytes | None) -> None:
        """Raise :class:`OwnershipLostError` unless the lease fields read (as bytes, ``None``
        when absent) are ours: how a read outside the scripts (the takeover's) is fenced too."""
        if (holder, epoch) != tuple(value.encode() for value in self._lease_args):
            raise OwnershipLostError(as_text(holder or b""), as_text(epoch or b""))

    def read(
        self,
        count: int,
        start: str,
        acks: Sequence[str],
        held: Mapping[str, HeldState] | None = None,
    ) -> list[Any]:
        """Acknowledge ``acks`` (changing the held set by ``held``, their entries' changes),
        then read up to ``count`` entries after ``start`` (``>``: new ones; an ID: this
        consumer's pending entries after it), in one fenced script."""
        reply = self._call(
            FENCED_READ,
            [self.keys.lease, self.keys.stream, self.keys.held],
            [
                *self._lease_args,
                self.keys.group,
                SHARD_CONSUMER,
                count,
                start,
                *held_arguments(held or {}),
                *acks,
            ],
            confirm=True,  # the entries read, not only the acknowledgements (module docstring)
        )
        entries: list[Any] = reply[1]
        return entries

    def acknowledge(
        self,
        dead: Sequence[DeadLetter],
        ids: Sequence[str],
        *,
        held: Mapping[str, HeldState] | None = None,
        setid: str = "",
        entries_read: str = "",
    ) -> None:
        """Park ``dead``, then acknowledge ``ids`` (changing the held set by ``held``, their
        entries' changes), in one fenced script. With ``setid`` (a takeover's commit), also
        move the group there (``entries_read``: its ``ENTRIESREAD``, ``""`` if unknown) and
        acknowledge every pending entry up to it. A no-op after :meth:`stop_acknowledging`."""
        if not self._acknowledging:
            return
        args: list[Any] = [
            *self._lease_args,
            self.keys.group,
            DEAD_LETTER_MAXLEN,
            setid,
            entries_read,
            len(dead),
        ]
        for letter in dead:
            args.append(len(letter.fields))
            for name, value in letter.fields:
                args += (name, value)
        args += held_arguments(held or {})
        args += ids
        self._call(
            FENCED_ACK,
            [self.keys.lease, self.keys.stream, self.keys.dead_letters, self.keys.held],
            args,
            confirm=True,
        )
        if dead:
            self._dead_letters.inc(len(dead))

    def change_held(self, held: Mapping[str, HeldState]) -> None:
        """Change the held set alone (what a takeover hands and tells), fenced, in calls of
        at most :data:`HELD_CHANGES_PER_CALL` keys: the caller makes each change true before
        it is written, so a crash between two calls leaves a held set that is still right.
        A no-op after :meth:`stop_acknowledging`."""
        changes = list(held.items())
        for start in range(0, len(changes), HELD_CHANGES_PER_CALL):
            if not self._acknowledging:
                return
            part = dict(changes[start : start + HELD_CHANGES_PER_CALL])
            self._call(
                FENCED_HELD,
                [self.keys.lease, self.keys.held],
                [*self._lease_args, *held_arguments(part)],
                confirm=True,
            )

    def _call(
        self, script: LuaScript, keys: list[str], args: list[Any], *, confirm: bool
    ) -> list[Any]:
        """Run a fenced script (with ``confirm``, its ``WAIT`` too); its reply unless the
        lease was not ours (:class:`OwnershipLostError`) or too few replicas confirmed."""
        if not (confirm and self._wait.enabled):
            reply: list[Any] = run(self.client, script, keys, args)
            waited: Any = None
        else:
            reply, waited = run_then_wait(self.client, script, keys, args, self._wait)
        if reply[0] == 0:
            raise OwnershipLostError(as_text(reply[1]), as_text(reply[2]))
        if waited is not None:
            self._wait.check(waited, f"reading or acknowledging {self.keys.stream}")
        return reply

    def lag(self) -> int | None:
        """The group's entries not yet acknowledged (undelivered + pending), ``None`` when
        Redis cannot tell (a plain read: ``XINFO GROUPS``)."""
        for group in self.client.xinfo_groups(self.keys.stream):
            if as_text(group["name"]) == self.keys.group:
                lag = group.get("lag")
                return None if lag is None else int(lag) + int(group["pending"])
        return None


# --- reading Redis's replies ---------------------------------------------------------------------


def id_tuple(entry_id: str) -> tuple[int, int]:
    """A stream ID as a comparable pair (``"1-2"`` -> ``(1, 2)``)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def as_mapping(fields: Any) -> Any:
    """A script reply's flat field list as a mapping (what ``envelope_from_fields`` takes);
    anything else (a trimmed entry's ``None``) is passed through for it to reject."""
    if type(fields) is list and len(fields) % 2 == 0:
        return dict(zip(fields[::2], fields[1::2], strict=True))
    return fields


def raw_of(fields: Any) -> Any:
    """What to keep of an entry's fields in its dead letter: the envelope bytes if present."""
    if isinstance(fields, Mapping) and len(fields) == 1 and FIELD in fields:
        return fields[FIELD]
    return fields


def payload_of(fields: Any) -> bytes | None:
    """The envelope bytes of a script reply's field list, ``None`` when it has none."""
    raw = raw_of(as_mapping(fields))
    return raw if isinstance(raw, bytes) else None
