"""Which processor owns which shard: balanced, sticky, and the same answer everywhere.

Every processor computes the assignment itself from two facts it reads from Redis — the live
members and the current owner of each shard — so no coordinator is needed and every member
reaches the same answer. The rules:

* **Balanced**: with ``n`` members and ``S`` shards every member gets ``S // n`` or
  ``S // n + 1`` shards (owned counts differ by at most one).
* **Sticky**: a member keeps as many of its current shards as its quota allows; only shards of
  departed members, unowned shards and a member's shards beyond its quota move. That is the
  fewest moves any balanced assignment can make, so a join or a leave disturbs as few shards
  (and as few handler re-syncs) as possible.
* **Deterministic**: ties are broken by member name and shard number, never by hash seeds.

Ownership itself is enforced by per-shard leases with fencing tokens (``common.lease``); this
module only decides who *should* own what.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["assign_shards", "moves"]


def assign_shards(
    shard_count: int, members: Iterable[str], current: Mapping[int, str | None]
) -> dict[int, str]:
    """The target owner of every shard, given the live ``members`` and ``current`` owners."""
    if shard_count < 1:
        raise ValueError(f"shard_count must be >= 1, got {shard_count}")
    live = sorted(set(members))
    if not live:
        return {}
    owned: dict[str, list[int]] = {member: [] for member in live}
    for shard in range(shard_count):
        owner = current.get(shard)
        if owner in owned:
            owned[owner].append(shard)
    base, extra = divmod(shard_count, len(live))
    # The larger quotas go to the members that already own the most: fewer moves.
    by_holdings = sorted(live, key=lambda member: (-len(owned[member]), member))
    quota = {member: base + (1 if rank < extra else 0) for rank, member in enumerate(by_holdings)}
    target: dict[int, str] = {}
    for member in live:
        for shard in owned[member][: quota[member]]:
            target[shard] = member
    free = [shard for shard in range(shard_count) if shard not in target]
    for member in live:
        room = quota[member] - sum(1 for owner in target.values() if owner == member)
        for _ in range(room):
            target[free.pop(0)] = member
    return dict(sorted(target.items()))


def moves(current: Mapping[int, str | None], target: Mapping[int, str]) -> int:
    """How many shards change owner (an unowned shard that gets one counts as a move)."""
    return sum(1 for shard, owner in target.items() if current.get(shard) != owner)
