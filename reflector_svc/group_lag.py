"""Each consumer group's lag as the reflector leader sees it: the autoscaling signal that stays
up when the consumers stall (issue 37).

A processor reports its own lag per shard (``informer_bus_processor_lag_entries``), but a
processor that is stopped -- SIGSTOPped, frozen in a long GC or a hung handler, on a node that
went away -- serves no ``/metrics``: its gauge vanishes exactly when the lag grows, and an
autoscaler reading it sees "no data" instead of a backlog. The reflector leader reads every
shard's ``XINFO GROUPS`` for retention anyway (:mod:`reflector_svc.retention`), so it reports
each group's lag from there, summed over the resource's shards, at no extra Redis call.

A group's lag on one shard is the processor's definition: entries not yet delivered to it
(``XINFO GROUPS`` ``lag``) plus entries delivered and not yet acknowledged (``pending``). Two
cases have no exact figure:

* Redis cannot tell the undelivered count (``lag`` is nil: entries were deleted with ``XDEL``
  after the group's position): the shard's whole stream counts (or the pending entries, if
  more), the upper bound, so that a group Redis cannot measure is never reported as caught up;
* the group has no consumer group on the shard (no member ever owned it): the shard adds
  nothing. Its first owner starts from the shard's known state, not from the stream, so the
  stream is no backlog of that group's; counting it would scale a new group out for a few
  seconds' takeover and keep the replicas through the scale-down window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["GroupLags", "shard_group_lags", "summed_group_lags"]

GroupLags = Mapping[str, int]
"""Entries not yet acknowledged, by consumer group name."""


def shard_group_lags(groups: Sequence[Mapping[str, Any]], length: int) -> dict[str, int]:
    """The lag of every consumer group of one shard's stream, from its ``XINFO GROUPS`` reply
    and the stream's length (module docstring)."""
    lags: dict[str, int] = {}
    for group in groups:
        name = group["name"]
        undelivered, pending = group.get("lag"), int(group["pending"])
        lag = max(length, pending) if undelivered is None else int(undelivered) + pending
        lags[name.decode() if isinstance(name, bytes) else str(name)] = lag
    return lags


def summed_group_lags(shards: Iterable[GroupLags]) -> dict[str, int]:
    """Every group's lag over all of a resource's shards (a shard where the group does not
    exist adds nothing)."""
    total: dict[str, int] = {}
    for lags in shards:
        for group, lag in lags.items():
            total[group] = total.get(group, 0) + lag
    return total
