"""Stream retention: Redis memory bounded by objects, not by history (issue 4, point 9).

A shard's known state lives in its ``objects`` hash, so its stream only has to hold what some
reader still needs. :func:`trim_shard` removes entries that are old in two senses at once:

* **every consumer group has delivered and acknowledged them**: below the minimum, over all
  groups, of the group's oldest pending ID (XPENDING summary) and the successor of its
  ``last-delivered-id`` (XINFO GROUPS). Pending entries are kept because trimming one makes
  ``XAUTOCLAIM`` purge it from the PEL (Redis 7) and ``XREADGROUP`` from the PEL return a nil
  payload: a delivered-but-unprocessed delta would vanish; and
* **they are not among the newest** ``min_entries``, kept for readers without a group (a
  subscriber replaying the recent tail, a debugging ``XRANGE``).

Both at once in one command: ``XTRIM MINID ~ <group floor> LIMIT <length - min_entries>``
(``MAXLEN ~ min_entries`` when the stream has no group). ``~`` removes whole macro-nodes only,
never an entry at or above the MINID, and LIMIT caps how many entries go, so neither bound can
be crossed; exact trimming has no LIMIT, so it could not combine the two without first reading
entries. What ``~`` leaves behind is less than one node: a node holds at most 100 entries and
4 KB (``stream-node-max-entries``/``-bytes``), so with ~3.5 KB envelopes about one entry. And it
is the cheap form: no node is split or rewritten.

Every consumer group on the stream counts -- each processor group and each durable subscriber
is one -- so the slowest live group sets the floor, and a group that no longer exists holds
entries until it is removed (``informer-bus groups delete``).

When the stream is still above ``hard_max_entries`` -- a dead or stuck group holds everything
back -- it is cut to exactly ``hard_max_entries`` anyway (``XTRIM MAXLEN =``), and the result
says so, naming the groups: ``forced`` (``lost_groups``) when entries a group still needed went
(pending or not yet delivered), ``undelivered_trimmed`` (``undelivered_groups``) when some had
not even been delivered. The caller logs and counts it
(:class:`RetentionLoop` does); those consumers resync from the known state in ``objects``.
Memory stays bounded even when a consumer never comes back.

The same ``XINFO GROUPS`` reply gives every group's lag on the shard (``TrimResult.group_lags``,
read before the trim): the loop hands each complete pass's results to ``on_pass``, which the
reflector sums into its per-group lag gauge (:mod:`reflector_svc.group_lag`).

Races are benign: a group that moves on between the reads and the trim only makes the trim
conservative, and entries added meanwhile only add to what is kept. A group created (or moved
with ``XGROUP SETID``) at an old ID during a trim may find those entries gone, as if it had been
created just after.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import redis
from redis.exceptions import ResponseError

from common.redis_layout import ShardKeys
from common.redis_replies import as_text
from reflector_svc.group_lag import GroupLags, shard_group_lags

__all__ = ["RetentionLoop", "TrimResult", "trim_shard"]

log = logging.getLogger(__name__)

_MAX_SEQ: Final = 2**64 - 1


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What :func:`trim_shard` did to one stream."""

    trimmed: int
    """Entries removed in total."""
    forced: bool
    """The hard cap removed entries a consumer group still needed (pending or not yet
    delivered). Not set when it only removed what ``~`` trimming had left behind."""
    undelivered_trimmed: bool
    """Among them were entries a group had not even delivered: its consumers will never see
    those deltas and must resync from the known state. (Pending-only losses lose retries.)"""
    length: int
    """Entries left (as of the trim; the publisher keeps appending)."""
    lost_groups: tuple[str, ...] = ()
    """The consumer groups that lost entries they still needed (set iff ``forced``), sorted."""
    undelivered_groups: tuple[str, ...] = ()
    """Those of them that lost entries not yet delivered to them, sorted."""
    group_lags: GroupLags = field(default_factory=dict)
    """Every consumer group's entries not yet acknowledged on this shard, read before the trim
    (:func:`reflector_svc.group_lag.shard_group_lags`)."""


def trim_shard(
    client: redis.Redis, keys: ShardKeys, *, min_entries: int, hard_max_entries: int
) -> TrimResult:
    """Trim ``keys.stream`` (module docstring): keep what any consumer group still needs and
    the newest ``min_entries``, but never more than ``hard_max_entries``.

    Raises ``ValueError`` unless ``0 <= min_entries <= hard_max_entries``.
    """
    _check_bounds(min_entries, hard_max_entries)
    stream = keys.stream
    pipe = client.pipeline(transaction=False)
    pipe.xlen(stream)
    pipe.xinfo_groups(stream)
    length, groups = pipe.execute(raise_on_error=False)
    if isinstance(length, Exception):
        raise length
    if isinstance(groups, ResponseError) and "no such key" in str(groups).lower():
        groups = []  # the stream vanished between the two commands: nothing to protect
    elif isinstance(groups, Exception):
        raise groups
    lags = shard_group_lags(groups, length)
    if length == 0:
        return TrimResult(0, False, False, 0, group_lags=lags)
    floors = _group_floors(client, stream, groups)

    trimmed = 0
    removable = length - min_entries
    if removable > 0:
        pipe = client.pipeline(transaction=False)
        if floors is None:
            pipe.xtrim(stream, maxlen=min_entries, approximate=True, limit=removable)
        else:
            pipe.xtrim(
                stream, minid=_format_id(_lowest_floor(floors)), approximate=True, limit=removable
            )
        pipe.xlen(stream)
        trimmed, length = pipe.execute()
    if length <= hard_max_entries:
        return TrimResult(trimmed, False, False, length, group_lags=lags)
    return replace(_force(client, stream, floors, hard_max_entries, trimmed), group_lags=lags)


def _force(
    client: redis.Redis,
    stream: str,
    floors: dict[str, _Floor] | None,
    hard_max_entries: int,
    trimmed: int,
) -> TrimResult:
    """Cut to exactly ``hard_max_entries`` and find out whose entries went.

    The first entry at or above a floor, read before the cut, was removed iff it is older than
    the first entry left after it: one-entry reads instead of reading what goes (two per
    group). One MULTI (one key, one slot) so that no XADD lands between the reads and the cut.
    """
    groups = sorted(floors or {})
    pipe = client.pipeline(transaction=True)
    for name in groups:
        assert floors is not None
        for floor in floors[name]:
            pipe.xrange(stream, _format_id(floor), "+", count=1)
    pipe.xtrim(stream, maxlen=hard_max_entries, approximate=False)
    pipe.xrange(stream, "-", "+", count=1)
    pipe.xlen(stream)
    *firsts, removed, left, length = pipe.execute()
    oldest_left = _parse_id(left[0][0]) if left else None

    def lost(first: list[Any]) -> bool:
        return bool(first) and (oldest_left is None or _parse_id(first[0][0]) < oldest_left)

    lost_groups = tuple(name for i, name in enumerate(groups) if lost(firsts[2 * i]))
    undelivered = tuple(name for i, name in enumerate(groups) if lost(firsts[2 * i + 1]))
    return TrimResult(
        trimmed + removed, bool(lost_groups), bool(undelivered), length, lost_groups, undelivered
    )


_Floor = tuple[tuple[int, int], tuple[int, int]]
"""A group's oldest needed entry ID (pending or undelivered) and its first undelivered ID."""


def _group_floors(
    client: redis.Redis, stream: str, groups: Sequence[Mapping[str, Any]]
) -> dict[str, _Floor] | None:
    """Per consumer group: the lowest ID it still needs (its oldest pending entry or its first
    entry not yet delivered) and its first entry not yet delivered; ``None`` without groups."""
    if not groups:
        return None
    floors: dict[str, _Floor] = {}
    for group in groups:
        undelivered = _successor(_parse_id(group["last-delivered-id"]))
        floors[as_text(group["name"])] = (undelivered, undelivered)
    pending = [as_text(group["name"]) for group in groups if group["pending"]]
    if pending:
        pipe = client.pipeline(transaction=False)
        for name in pending:
            pipe.xpending(stream, name)
        for name, summary in zip(pending, pipe.execute(), strict=True):
            if summary["pending"] and summary["min"] is not None:
                undelivered = floors[name][1]
                floors[name] = (min(undelivered, _parse_id(summary["min"])), undelivered)
    return floors


def _lowest_floor(floors: dict[str, _Floor]) -> tuple[int, int]:
    return min(needed for needed, _ in floors.values())


def _check_bounds(min_entries: int, hard_max_entries: int) -> None:
    if not 0 <= min_entries <= hard_max_entries:
        raise ValueError(
            f"need 0 <= min_entries <= hard_max_entries, got {min_entries}, {hard_max_entries}"
        )


def _parse_id(value: bytes | str) -> tuple[int, int]:
    text = as_text(value)
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _successor(stream_id: tuple[int, int]) -> tuple[int, int]:
    ms, seq = stream_id
    return (ms + 1, 0) if seq == _MAX_SEQ else (ms, seq + 1)


def _format_id(stream_id: tuple[int, int]) -> str:
    return f"{stream_id[0]}-{stream_id[1]}"


class RetentionLoop(threading.Thread):
    """Trims every shard of one resource now and then every ``interval`` seconds.

    A daemon thread so that a forgotten loop cannot keep the process alive, but :meth:`stop`
    is the way out (it joins). A Redis error on one shard is logged and counted, and the loop
    goes on: retention is housekeeping and must neither die silently nor take the reflector
    down. Forced trims are logged as warnings and counted; ``on_result`` (called on this
    thread after each shard) lets the caller feed its metrics, and ``on_pass`` (after each pass
    that reached every shard, with their results in shard order, ``None`` for a shard whose
    trim failed) its per-group lag.

    Defaults: ``min_entries`` 1,000 newest entries always kept per shard (for readers that
    replay without a consumer group); ``hard_max_entries`` 100,000, the per-shard cap no group
    can hold back (~350 MB of 3.5 KB envelopes); ``interval`` 10 s between two passes: growth
    between trims is the publish rate times this, so the streams overshoot the bounds by at
    most that much.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resource: str,
        shard_count: int,
        interval: float = 10.0,
        min_entries: int = 1_000,
        hard_max_entries: int = 100_000,
        on_result: Callable[[ShardKeys, TrimResult], None] | None = None,
        on_pass: Callable[[Sequence[TrimResult | None]], None] | None = None,
    ) -> None:
        super().__init__(name=f"retention-{resource}", daemon=True)
        _check_bounds(min_entries, hard_max_entries)
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval!r}")
        self._client = client
        self.shards = tuple(ShardKeys(prefix, resource, shard) for shard in range(shard_count))
        self.interval = interval
        self.min_entries = min_entries
        self.hard_max_entries = hard_max_entries
        self._on_result = on_result
        self._on_pass = on_pass
        self._stopping = threading.Event()
        self.rounds = 0
        """Completed passes over all shards."""
        self.trimmed_entries = 0
        self.forced_trims = 0
        self.undelivered_trims = 0
        self.errors = 0

    def run(self) -> None:
        while not self._stopping.is_set():
            self.run_once()
            self._stopping.wait(self.interval)

    def run_once(self) -> list[TrimResult | None]:
        """One pass over every shard (``None`` for a shard whose trim failed)."""
        results: list[TrimResult | None] = []
        for keys in self.shards:
            if self._stopping.is_set():
                break
            try:
                result = trim_shard(
                    self._client,
                    keys,
                    min_entries=self.min_entries,
                    hard_max_entries=self.hard_max_entries,
                )
            except redis.RedisError:
                self.errors += 1
                log.exception("retention: trimming %s failed", keys.stream)
                results.append(None)
                continue
            self._count(keys, result)
            results.append(result)
        self.rounds += 1
        if self._on_pass is not None and len(results) == len(self.shards):
            try:
                self._on_pass(results)
            except Exception:
                log.exception("retention: on_pass callback failed for %s", self.name)
        return results

    def _count(self, keys: ShardKeys, result: TrimResult) -> None:
        self.trimmed_entries += result.trimmed
        if result.forced:
            self.forced_trims += 1
            self.undelivered_trims += int(result.undelivered_trimmed)
            log.warning(
                "retention: hard cap %d forced a trim of %s: consumer group(s) %s lost entries "
                "they still needed (%d entries removed; undelivered entries lost by: %s); "
                "they must resync from the known state",
                self.hard_max_entries,
                keys.stream,
                ", ".join(result.lost_groups),
                result.trimmed,
                ", ".join(result.undelivered_groups) or "none",
            )
        if self._on_result is not None:
            try:
                self._on_result(keys, result)
            except Exception:
                log.exception("retention: on_result callback failed for %s", keys.stream)

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to stop and wait for it (a trim in progress finishes its shard)."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
