"""A processor's shard leases: one per shard of its group, or one group of them per shard.

:class:`~processor_svc.ownership.ShardOwnership` decides which shards to own; this module is
what it holds them with. Each shard's lease is a :class:`~common.lease.RedisLease` on the
group's ``ib:{R:S}:lease`` with epochs from ``ib:{R:S}:lease_epoch``; with co-sharded
resources, shard *N* is a :class:`~processor_svc.lease_group.LeaseGroup` of every one's shard
*N* lease (acquired, renewed and lost together).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import redis

from common.lease import LeaseStatus, RedisLease
from common.redis_layout import ResourceKeys
from common.replica_wait import ReplicaWait
from processor_svc.lease_group import LeaseGroup

__all__ = ["LeaseAttempt", "ShardLease", "shard_leases"]


class ShardLease(Protocol):
    """What the coordinator needs of a shard's lease: a :class:`~common.lease.RedisLease`, or a
    :class:`~processor_svc.lease_group.LeaseGroup` for several co-sharded resources."""

    @property
    def key(self) -> str: ...

    @property
    def holder(self) -> str: ...

    @property
    def duration(self) -> float: ...

    @property
    def max_call_seconds(self) -> float: ...

    def try_acquire_or_renew(self) -> LeaseStatus: ...

    def renew(self, epoch: int) -> LeaseStatus: ...

    def release(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class LeaseAttempt:
    """A lease call's outcome, and when the call started (a lower bound on the lease's start)."""

    status: LeaseStatus
    started: float


def shard_leases(
    client: redis.Redis,
    *,
    prefix: str,
    resources: Sequence[str],
    group: str,
    shard_count: int,
    member_id: str,
    duration: float,
    replica_wait: ReplicaWait,
) -> list[ShardLease]:
    """Shard *N*'s lease for every *N* below ``shard_count``: ``resources[0]``'s alone, or the
    :class:`~processor_svc.lease_group.LeaseGroup` of every resource's when there are several,
    each held by ``member_id`` in consumer group ``group``."""

    def lease(of: str, shard: int) -> RedisLease:
        keys = ResourceKeys(prefix, of).group(group).shard(shard)
        return RedisLease(
            client,
            key=keys.lease,
            epoch_key=keys.lease_epoch,
            holder=member_id,
            duration=duration,
            replica_wait=replica_wait,
        )

    return [
        lease(resources[0], shard)
        if len(resources) == 1
        else LeaseGroup([(of, lease(of, shard)) for of in resources])
        for shard in range(shard_count)
    ]
