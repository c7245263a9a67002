"""Where each processor group stands on the shard streams, read from Redis itself.

A group whose view drops most entries calls its handlers for few of them, so the handlers'
counts cannot say when it is done; the consumer group on each shard's stream can: a group has
consumed a burst when, on every shard, its last delivered ID is the stream's last entry and
nothing is pending (read and not yet acknowledged).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import redis
from reflector_child import stream_keys

from common.wire import envelope_from_fields


@dataclass(frozen=True)
class GroupPosition:
    """One consumer group, summed over the shards."""

    caught_up: bool
    """On every shard: delivered up to the stream's last entry, none pending."""
    entries_read: int | None
    """Redis' ``entries-read`` summed over the shards (None where Redis cannot tell)."""


def positions(client: redis.Redis, groups: Sequence[str]) -> dict[str, GroupPosition]:
    """Every group of ``groups`` (a group not created yet on a shard is not caught up)."""
    pipe = client.pipeline(transaction=False)
    for key in stream_keys():
        pipe.xinfo_groups(key)
        pipe.xrevrange(key, count=1)
    replies = pipe.execute()
    caught_up = dict.fromkeys(groups, True)
    read: dict[str, int | None] = dict.fromkeys(groups, 0)
    for infos, last in zip(replies[0::2], replies[1::2], strict=True):
        last_id = last[0][0] if last else b"0-0"
        by_name = {_text(info["name"]): info for info in infos}
        for group in groups:
            info = by_name.get(group)
            if info is None:
                caught_up[group] = False
                read[group] = None
                continue
            if _text(info["last-delivered-id"]) != _text(last_id) or int(info["pending"]):
                caught_up[group] = False
            entries = info.get("entries-read")
            total = read[group]
            read[group] = None if entries is None or total is None else total + int(entries)
    return {group: GroupPosition(caught_up[group], read[group]) for group in groups}


def keys_after(client: redis.Redis, before: Sequence[bytes], page: int = 1000) -> Iterator[str]:
    """The object key of every stream entry after ``before`` (per-shard last IDs, in
    :func:`stream_keys` order): which objects a burst touched, to count what each view keeps."""
    for stream, last in zip(stream_keys(), before, strict=True):
        start = b"(" + last
        while True:
            entries = client.xrange(stream, min=start, count=page)
            for _, fields in entries:
                yield envelope_from_fields(fields).key
            if len(entries) < page:
                break
            start = b"(" + entries[-1][0]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
