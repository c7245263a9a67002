"""Durable subscribers: ``subscribe_durable(..., group=NAME)`` reads through a consumer group of
its own.

A position-less subscriber (plain ``XREAD``) forgets where it was when it stops. A durable one
is consumer group ``NAME`` on every shard stream, read by one stable consumer
(:data:`DURABLE_CONSUMER`), so Redis remembers for it what was delivered and what was
acknowledged: after a restart, even a ``kill -9``, it first re-reads its own pending entries
(``XREADGROUP ... 0``) and then new ones (``>``). Delivery is at least once; nothing the
subscriber did not acknowledge is lost (retention keeps what a group still needs, up to its
hard cap).

A group that does not exist yet starts like a processor takeover
(``processor_svc/takeover.py``): one ``MULTI`` reads the known state (``HGETALL objects``) and
creates the group at the stream's end (``XGROUP CREATE ... $``, and ``XINFO STREAM`` says which
ID that was), so the subscriber gets every known object (as ``Added``, flagged ``initial``) and
then exactly the stream after it -- never nothing for the history that retention trimmed. The
same ``MULTI`` sets a marker (``GroupShardKeys.initial_list``) that is removed only once the
caller has acknowledged that shard's whole initial list; a start that finds it set redoes the
snapshot (dropping and recreating the group, whose entries the new snapshot supersedes), so a
crash in the middle of a shard's initial list delivers that shard's list again, whole, rather
than half of it (shards whose list was finished are not delivered again). An existing
group that finds retention's hard cap trimmed entries it had not acknowledged (it was stopped
too long) starts again from the known state the same way, rather than silently missing them.

One subscriber process per group is the model: two would share its consumer and its pending
entries. Spreading a resource over several readers is what processor groups are for; a group
that processors are using (live members or a held shard lease) is refused, since a subscriber
reading it would take their entries.

The cursor says what to send as conversations (:mod:`common.redis_conversation`), so the
blocking and the asyncio subscriptions share every command sequence here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from common.redis_conversation import Commands, Conversation, Pause, Recorder, call
from common.redis_layout import (
    DURABLE_CONSUMER,
    PROCESSOR_GROUP,
    GroupShardKeys,
    ResourceKeys,
    ShardKeys,
    check_group_name,
)
from common.redis_layout.members import queue_live_count, redis_time_ms
from common.redis_layout.snapshot import GroupExistsError, snapshot_conversation
from informer_bus.subscription.stream_replies import Batches, entry_order, stream_batches, text

__all__ = ["GroupCursor", "GroupRefused", "InitialList"]

log = logging.getLogger(__name__)

_CLUSTER_POLL_SECONDS: Final = 0.05
_PENDING: Final = "0"
"""Where a restarted consumer starts each shard: its own pending entries, oldest first."""
_NEW: Final = ">"


class GroupRefused(ValueError):
    """The group cannot be used by a subscriber (bad name, processors are using it); one line."""


@dataclass(frozen=True, slots=True)
class InitialList:
    """One shard's known state as a new group found it: the objects, as of stream ID ``last_id``."""

    shard: int
    last_id: str
    objects: dict[bytes, bytes]


class GroupCursor:
    """Consumer group ``group`` on every shard of ``shards``: sets it up, reads, acknowledges.

    The constructor checks the name only (no Redis). :meth:`join` refuses a group processors
    use, then creates the group where it is missing (or redoes an unacknowledged initial list)
    and keeps those snapshots in :attr:`initial`. :meth:`read` acknowledges what
    :meth:`processed` collected (one ``XACK`` per shard) and removes the markers of finished
    initial lists before it reads the next batch, so nothing is acknowledged before the caller
    is done with it and nothing done waits for new entries.
    """

    def __init__(self, group: str, *, batch: int, block_ms: int) -> None:
        try:
            self.group = check_group_name(group)
        except ValueError as exc:
            raise GroupRefused(str(exc)) from None
        if group == PROCESSOR_GROUP:
            raise GroupRefused(
                f"group {group!r} is the processors' default group: give a durable subscriber "
                "a group of its own"
            )
        self._batch = batch
        self._block_ms = block_ms
        self._cluster = False
        self._keys: list[GroupShardKeys] = []
        self.initial: list[InitialList] = []
        self._positions: dict[str, str] = {}
        self._acks: dict[str, list[str]] = {}
        self._finished: list[str] = []

    def join(self, shards: Sequence[ShardKeys], *, cluster: bool) -> Conversation[None]:
        """Refuse a group processors use, then set the group up on every shard."""
        self._cluster = cluster
        self._keys = [keys.for_group(self.group) for keys in shards]
        yield from self._refuse_processor_group(shards)
        self.initial = []
        for keys in self._keys:
            snapshot = yield from self._set_up(keys)
            if snapshot is not None:
                self.initial.append(snapshot)
        # Each shard starts with its own pending entries; ">" once they are exhausted.
        self._positions = {keys.stream: _PENDING for keys in self._keys}
        for snapshot in self.initial:  # a new group has nothing pending
            self._positions[self._keys[snapshot.shard].stream] = _NEW

    def _refuse_processor_group(self, shards: Sequence[ShardKeys]) -> Conversation[None]:
        members = ResourceKeys(shards[0].prefix, shards[0].resource).group(self.group).members
        (now,) = yield Commands.one("time")
        pipe = Recorder()
        queue_live_count(pipe, members, redis_time_ms(now))
        for keys in self._keys:
            pipe.exists(keys.lease)
        live, *leases = yield pipe.commands()
        if live:
            raise GroupRefused(
                f"group {self.group!r} has {live} live processor member(s) ({members}): a "
                "subscriber reading it would take their entries; use another group name"
            )
        held = [keys.lease for keys, exists in zip(self._keys, leases, strict=True) if exists]
        if held:
            raise GroupRefused(
                f"group {self.group!r} holds processor shard leases ({', '.join(held)}): a "
                "subscriber reading it would take their entries; use another group name"
            )

    def _set_up(self, keys: GroupShardKeys) -> Conversation[InitialList | None]:
        """The shard's snapshot when the group is new there (or its initial list was never
        acknowledged), taken atomically with the group's creation; ``None`` to resume."""
        marker = keys.initial_list
        groups, redo, stream, pending = yield Commands(
            (
                call("xinfo_groups", keys.stream),
                call("exists", marker),
                call("xinfo_stream", keys.stream),
                call("xpending", keys.stream, self.group),
            ),
            raise_on_error=False,
        )
        listed = [] if isinstance(groups, Exception) else groups  # no stream yet: no group
        mine = [info for info in listed if text(info["name"]) == self.group]
        exists = bool(mine)
        if exists and not redo:
            lost = _trimmed(mine[0], stream, pending)
            if not lost:
                return None
            log.warning(
                "retention's hard cap trimmed entries (at least %d) group %r had not "
                "acknowledged on %s while it was stopped: starting it again from the known state",
                lost,
                self.group,
                keys.stream,
            )
        try:
            snapshot = yield from snapshot_conversation(
                keys.shard_keys, start=keys, recreate=exists
            )
        except GroupExistsError:
            raise GroupRefused(
                f"group {self.group!r} was just created on {keys.stream} by someone else: "
                "run one subscriber per group"
            ) from None
        info = snapshot.stream
        last_id = text(info["last-generated-id"])
        if isinstance(info.get("entries-added"), int):
            # XGROUP CREATE at "$" leaves the group's read counter unknown; set, it lets a
            # later start tell what a forced trim cost the group (_trimmed).
            yield Commands.one(
                "xgroup_setid", keys.stream, self.group, last_id, entries_read=info["entries-added"]
            )
        objects = snapshot.objects
        log.info(
            "%s group %r on %s at %s: delivering its %d known objects first",
            "redoing the initial list of" if exists else "created",
            self.group,
            keys.stream,
            last_id,
            len(objects),
        )
        return InitialList(keys.shard, last_id, objects)

    def initial_done(self, shard: int) -> None:
        """The caller processed shard ``shard``'s whole initial list: its marker can go."""
        self._finished.append(self._keys[shard].initial_list)

    def processed(self, stream: str, entry_id: str) -> None:
        """The caller is done with this entry (or it was filtered out, or undecodable)."""
        self._acks.setdefault(stream, []).append(entry_id)

    def flush(self) -> Conversation[None]:
        """Acknowledge what was processed, one ``XACK`` per shard, and drop finished markers."""
        if not self._acks and not self._finished:
            return
        acks, finished = self._acks, self._finished
        yield Commands(
            (
                *(call("xack", stream, self.group, *ids) for stream, ids in acks.items()),
                *(call("delete", marker) for marker in finished),
            )
        )
        self._acks, self._finished = {}, []

    def read(self) -> Conversation[Batches]:
        """Acknowledge (:meth:`flush`), then one read of every shard: its pending entries while
        there are any (no blocking), else new ones (blocking ``block_ms`` when all are new)."""
        yield from self.flush()
        if self._cluster:
            return (yield from self._read_each())
        history = any(position != _NEW for position in self._positions.values())
        (reply,) = yield Commands.one(
            "xreadgroup",
            self.group,
            DURABLE_CONSUMER,
            dict(self._positions),
            count=self._batch,
            block=None if history else self._block_ms,
        )
        return self._advance(stream_batches(reply))

    def _read_each(self) -> Conversation[Batches]:
        """On a Redis Cluster one read cannot span slots: one non-blocking read per shard in a
        pipeline, and a short sleep after a round that found nothing."""
        replies: list[Any] = yield Commands(
            tuple(
                call(
                    "xreadgroup",
                    self.group,
                    DURABLE_CONSUMER,
                    {stream: position},
                    count=self._batch,
                )
                for stream, position in self._positions.items()
            )
        )
        batches = self._advance([batch for reply in replies for batch in stream_batches(reply)])
        if not any(entries for _, entries in batches):
            yield Pause(_CLUSTER_POLL_SECONDS)
        return batches

    def _advance(self, batches: Batches) -> Batches:
        """Move each shard still re-reading its pending entries past what this read returned;
        a shard whose pending read came back empty goes on with new entries."""
        returned = dict(batches)
        for stream, position in self._positions.items():
            if position == _NEW:
                continue
            entries = returned.get(stream)
            self._positions[stream] = text(entries[-1][0]) if entries else _NEW
        return [(stream, entries) for stream, entries in batches if entries]


def _trimmed(group: dict[str, Any], stream: dict[str, Any], pending: dict[str, Any]) -> int:
    """How many entries the group still needed that are gone from the stream (0: none).

    Retention keeps what a group needs until its hard cap, which cuts from the oldest end:
    pending entries older than the first one left are gone (a re-read would return them
    empty), and when the trim reached past the group's position, the entries after it that
    are missing are those the counters say were added and not read (``entries-added -
    entries-read``) beyond the ones left. A stale ``entries-read`` (Redis before 7.4 after an
    AOF reload) can only overstate that: a needless restart from the known state, never a
    gap passed over.
    """
    first = stream.get("first-entry")
    first_id = entry_order(first[0]) if first else None
    lost = 0
    if pending.get("pending") and (first_id is None or entry_order(pending["min"]) < first_id):
        lost += 1  # at least one; the pending re-read reports each as undecodable
    delivered = entry_order(group["last-delivered-id"])
    if delivered == entry_order(stream["last-generated-id"]):
        return lost
    if first_id is not None and first_id <= delivered:
        return lost  # the trim did not reach past the group's position
    added, read = stream.get("entries-added"), group.get("entries-read")
    if not isinstance(added, int) or not isinstance(read, int):
        return lost
    return lost + max(0, added - read - int(stream["length"]))
