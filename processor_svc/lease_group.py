"""Shard *N* of several co-sharded resources, owned as one: one lease per resource, held together.

A processor that serves a Widget controller's Widgets and the ConfigMaps they own (issue 15)
must hold a Widget's shard and the ConfigMap shard with the same number at the same time, or
it would reconcile Widgets without their ConfigMaps. Each shard is fenced by its own lease,
though, in its own Redis Cluster slot (``ib:{widgets:3}:lease``, ``ib:{configmaps:3}:lease``),
because the fenced read and acknowledge scripts of a shard check its lease in the same atomic
step, and a script cannot reach another slot. So shard *N* of the group is a
:class:`LeaseGroup` of those leases, which :class:`~processor_svc.ownership.ShardOwnership`
treats as one lease:

* **acquired all or nothing**: each member lease is first released if it is still ours from an
  ownership that ended (so every member gets a new epoch, as a single lease would) and then
  acquired, in resource order; if one is held by another member, the ones taken in this call
  are released again and the holder is reported, so two processors never each hold a part;
* **renewed together**: when any member lease is no longer ours with its epoch, the group is
  reported lost with that member's status (the caller ends the ownership of every resource's
  shard *N*, then releases the rest);
* **epochs per resource**: each resource's shard worker fences its writes with that resource's
  epoch (:meth:`epochs`); the group reports the first resource's epoch (its *home*) as its own,
  which is what the coordinator compares across its ownership periods.

The price is one Redis call per resource for each acquisition and renewal.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.lease import LeaseStatus, RedisLease

__all__ = ["LeaseGroup"]


class LeaseGroup:
    """The leases of shard *N* of several resources (``(resource, lease)`` pairs, the home
    resource first), held as one lease; see the module docstring. Not thread-safe: one
    coordinator thread uses it."""

    def __init__(self, leases: Sequence[tuple[str, RedisLease]]) -> None:
        if not leases:
            raise ValueError("a lease group needs at least one lease")
        holders = {lease.holder for _, lease in leases}
        if len(holders) != 1:
            raise ValueError(f"the leases of a group must share one holder, got {holders}")
        self._leases = tuple(leases)
        home = leases[0][1]
        self.key = home.key
        """The home resource's lease key: whose holder is the group's holder."""
        self.holder = home.holder
        self.duration = min(lease.duration for _, lease in leases)
        self.max_call_seconds = sum(lease.max_call_seconds for _, lease in leases)
        """One group call runs one call per member lease, one after the other."""
        self._epochs: dict[str, int] = {}

    def epochs(self) -> dict[str, int]:
        """Each resource's fencing epoch while the group is held (empty when it is not)."""
        return dict(self._epochs)

    def try_acquire_or_renew(self) -> LeaseStatus:
        """Acquire every member lease afresh (module docstring); only for a shard the caller
        does not own. Not held: the first member held by someone else is reported."""
        self._epochs = {}
        taken: list[RedisLease] = []
        held: dict[str, int] = {}
        status: LeaseStatus | None = None
        for resource, lease in self._leases:
            lease.release()  # ours from an ended ownership: a new one needs a new epoch
            status = lease.try_acquire_or_renew()
            if not status.held:
                for acquired in taken:
                    acquired.release()
                return status
            taken.append(lease)
            held[resource] = status.epoch
        assert status is not None
        self._epochs = held
        home_epoch = held[self._leases[0][0]]
        return LeaseStatus(held=True, epoch=home_epoch, holder=self.holder, ttl=status.ttl)

    def renew(self, epoch: int) -> LeaseStatus:
        """Renew every member with its own epoch (``epoch`` is the home's); the first member
        that is not held with it is reported and the group counts as lost."""
        epochs = self._epochs
        if not epochs or epochs[self._leases[0][0]] != epoch:
            return LeaseStatus(held=False, epoch=0, holder=None, ttl=0.0)
        ttl = float("inf")
        for resource, lease in self._leases:
            status = lease.renew(epochs[resource])
            if not status.held:
                return status
            ttl = min(ttl, status.ttl)
        return LeaseStatus(held=True, epoch=epoch, holder=self.holder, ttl=ttl)

    def release(self) -> bool:
        """Release every member that is ours; ``True`` if any was. A Redis error of one member
        is raised after the others were tried (the rest expire)."""
        self._epochs = {}
        released = False
        error: Exception | None = None
        for _, lease in self._leases:
            try:
                released = lease.release() or released
            except Exception as exc:  # the others are still worth releasing
                error = error or exc
        if error is not None:
            raise error
        return released

    def __repr__(self) -> str:
        return f"LeaseGroup({', '.join(resource for resource, _ in self._leases)}: {self.key!r})"
