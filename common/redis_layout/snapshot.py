"""Reading a shard's snapshot: its known state and its stream's position, in one ``MULTI``.

The reflector writes a delta to the stream and to the known state (``objects``) in one script,
so a ``MULTI`` that reads ``HGETALL objects`` with ``XINFO STREAM`` sees the state right after
the stream's last entry: whoever starts from the snapshot reads the stream after that entry
and misses nothing, sees nothing twice. Three readers start that way -- a processor taking a
shard over (with its lease, its group's held set and where its group stands), a replica reader
of a replicated resource, a durable subscriber creating its group at the snapshot -- and this
is their one read. What each does with the snapshot stays with it (``processor_svc.takeover``,
``processor_svc.replica_reader``, ``informer_bus.subscription.group_cursor``).

redis-py's Cluster transactions parse less than its standalone client (bytes names, a list for
``XPENDING``'s summary, a list for an entry): the replies are normalised here, so that both
kinds of client read alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from common.redis_conversation import Commands, Conversation, Recorder, converse
from common.redis_layout.key_names import GroupShardKeys, ShardKeys
from common.redis_layout.names import LEASE_EPOCH, LEASE_HOLDER
from common.redis_replies import as_text

__all__ = [
    "GroupExistsError",
    "ShardSnapshot",
    "read_snapshot",
    "snapshot_conversation",
    "stream_info",
]


class GroupExistsError(redis.ResponseError):
    """``XGROUP CREATE`` found the group already there (``BUSYGROUP``): someone else created
    it between the caller's look and its snapshot."""


@dataclass(frozen=True, slots=True)
class ShardSnapshot:
    """One ``MULTI``'s read of a shard (:func:`read_snapshot`)."""

    objects: dict[bytes, bytes]
    """The known state: key -> the last envelope published for it."""
    stream: dict[str, Any]
    """``XINFO STREAM`` with text names (:func:`stream_info`): ``last-generated-id`` is the
    entry the snapshot is the state after."""
    lease: tuple[Any, Any] | None = None
    """The group's shard lease ``(holder, epoch)`` as Redis returned them (``owner`` only)."""
    held: dict[bytes, bytes] | None = None
    """The group's held set (``owner`` only)."""
    group: dict[str, Any] | None = None
    """The group's ``XINFO GROUPS`` entry, text names (``owner`` only)."""
    pending: int | None = None
    """How many entries the group has pending (``owner`` only)."""


def read_snapshot(
    client: redis.Redis,
    keys: ShardKeys,
    *,
    owner: GroupShardKeys | None = None,
    start: GroupShardKeys | None = None,
    recreate: bool = False,
) -> ShardSnapshot:
    """The snapshot of ``keys``' shard, read in one ``MULTI``.

    ``owner``: a takeover by that group's owner; first creates the group at the stream's end
    if it is missing (before the ``MULTI``: a new group starts from the snapshot, never from
    history), then also reads its lease (the caller fences on it), its held set, its ``XINFO
    GROUPS`` entry and its pending count. ``start``: a durable subscriber (re)starting that
    group at the snapshot, in the same ``MULTI``: marks its initial list not acknowledged yet
    (``initial_list``), drops the group first when ``recreate``, creates it at the stream's
    end (``$``, making the stream); :class:`GroupExistsError` when the group appeared
    meanwhile. A stream the reflector never
    wrote to reads as an empty one. Other Redis errors are raised.
    """
    conversation = snapshot_conversation(keys, owner=owner, start=start, recreate=recreate)
    return converse(client, conversation)


def snapshot_conversation(
    keys: ShardKeys,
    *,
    owner: GroupShardKeys | None = None,
    start: GroupShardKeys | None = None,
    recreate: bool = False,
) -> Conversation[ShardSnapshot]:
    """:func:`read_snapshot` as a conversation (:mod:`common.redis_conversation`), for a
    blocking or an asyncio client."""
    if owner is not None:
        yield from _create_group(keys.stream, owner.group)
    pipe = Recorder()
    slots: list[str] = []  # what each queued command reads, in order

    def add(name: str, command: Any, *args: Any, **kwargs: Any) -> None:
        command(*args, **kwargs)
        slots.append(name)

    if start is not None:
        add("marker", pipe.set, start.initial_list, b"1")
    if owner is not None:
        add("lease", pipe.hmget, owner.lease, LEASE_HOLDER, LEASE_EPOCH)
    add("objects", pipe.hgetall, keys.objects)
    if owner is not None:
        add("held", pipe.hgetall, owner.held)
    if start is not None:
        if recreate:
            # The snapshot supersedes whatever the group had delivered: drop its entries.
            add("destroyed", pipe.xgroup_destroy, keys.stream, start.group)
        add("created", pipe.xgroup_create, keys.stream, start.group, id="$", mkstream=True)
    add("stream", pipe.xinfo_stream, keys.stream)
    if owner is not None:
        add("groups", pipe.xinfo_groups, keys.stream)
        add("pending", pipe.xpending, keys.stream, owner.group)
    executed = yield pipe.commands(transaction=True, raise_on_error=False)
    replies = dict(zip(slots, executed, strict=True))
    _raise_errors(replies)
    if owner is None:
        return ShardSnapshot(objects=replies["objects"], stream=stream_info(replies["stream"]))
    return _owner_snapshot(replies, owner.group)


def _raise_errors(replies: dict[str, Any]) -> None:
    """Raise the first error among ``replies``: :class:`GroupExistsError` for the group's
    creation first; a stream that does not exist is no error."""
    created = replies.get("created")
    if isinstance(created, redis.ResponseError) and "BUSYGROUP" in str(created):
        raise GroupExistsError(str(created))
    for name, reply in replies.items():
        if isinstance(reply, Exception) and not (name == "stream" and _no_stream(reply)):
            raise reply


def _owner_snapshot(replies: dict[str, Any], group: str) -> ShardSnapshot:
    """A takeover's snapshot from its ``MULTI``'s replies, by what each read."""
    holder, epoch = replies["lease"]
    pending = replies["pending"]
    named = [{as_text(name): value for name, value in g.items()} for g in replies["groups"]]
    return ShardSnapshot(
        objects=replies["objects"],
        stream=stream_info(replies["stream"]),
        lease=(holder, epoch),
        held=replies["held"],
        group=next(g for g in named if as_text(g["name"]) == group),
        pending=int(pending[0] if isinstance(pending, list) else pending["pending"]),
    )


def _create_group(stream: str, group: str) -> Conversation[None]:
    """``group`` on ``stream`` at its end, unless it exists (``BUSYGROUP``)."""
    try:
        yield Commands.one("xgroup_create", stream, group, id="$", mkstream=True)
    except redis.ResponseError as err:
        if "BUSYGROUP" not in str(err):
            raise


def stream_info(reply: Any) -> dict[str, Any]:
    """``XINFO STREAM``'s reply with text names; a shard the reflector never wrote an entry to
    has no stream yet, which reads as an empty one (any other error is raised)."""
    if isinstance(reply, Exception):
        if _no_stream(reply):
            return {"last-generated-id": "0-0", "entries-added": 0, "length": 0}
        raise reply
    return {as_text(name): value for name, value in reply.items()}


def _no_stream(error: Exception) -> bool:
    return isinstance(error, redis.ResponseError) and "no such key" in str(error).lower()
