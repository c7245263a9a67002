"""Which events wait behind fresh ones: the priority a controller queues a key at.

A takeover or a start delivers every object of a shard as the initial list, and a resync
replays every cached object; each queues a key. Queued at the priority of a fresh event, they
would make a change a user just made wait behind tens of thousands of keys. So, with
controller-runtime's rules (v0.23, its handlers' ``LowPriority``): an add of the initial list
and an update that changes nothing (a resync hands the same object twice; a relist can hand an
unchanged one) are :data:`~common.priority_queue.LOW_PRIORITY`; every other event, deletions
included, is :data:`~common.priority_queue.NORMAL_PRIORITY`. The controller and its
``Owns``/``Watches`` handlers all decide with these two functions.

:class:`KeyQueue` is how a controller reaches its queue with a priority: a
:class:`~common.priority_queue.PriorityQueue` (what ``make_workqueue_factory`` makes) takes it;
a FIFO queue of one's own factory ignores it.
"""

from __future__ import annotations

from common.object_keys import Obj
from common.priority_queue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue
from common.versions import resource_version
from common.workqueue import RateLimitingQueue

__all__ = ["KeyQueue", "add_priority", "update_priority"]


def add_priority(is_in_initial_list: bool) -> int:
    """The priority of an add: low for the initial list (a start, a takeover)."""
    return LOW_PRIORITY if is_in_initial_list else NORMAL_PRIORITY


def update_priority(old: Obj, new: Obj) -> int:
    """The priority of an update: low when nothing changed (a resync's ``old is new``, or one
    resourceVersion on both sides), else normal."""
    if old is new:
        return LOW_PRIORITY
    version = resource_version(new)
    return LOW_PRIORITY if version and version == resource_version(old) else NORMAL_PRIORITY


class KeyQueue:
    """A controller's queue of keys, each add with a priority (ignored by a FIFO queue)."""

    __slots__ = ("_prioritised", "queue")

    def __init__(self, queue: RateLimitingQueue[str]) -> None:
        self.queue = queue
        self._prioritised = queue if isinstance(queue, PriorityQueue) else None

    def add(self, key: str, priority: int = NORMAL_PRIORITY) -> None:
        if self._prioritised is not None:
            self._prioritised.add(key, priority)
        else:
            self.queue.add(key)

    def add_after(self, key: str, delay_seconds: float, priority: int = NORMAL_PRIORITY) -> None:
        if self._prioritised is not None:
            self._prioritised.add_after(key, delay_seconds, priority)
        else:
            self.queue.add_after(key, delay_seconds)

    def add_rate_limited(self, key: str, priority: int = NORMAL_PRIORITY) -> None:
        if self._prioritised is not None:
            self._prioritised.add_rate_limited(key, priority)
        else:
            self.queue.add_rate_limited(key)

    def get(self) -> tuple[str, int]:
        """The next key and its priority; raises ``QueueShutDown`` at the end."""
        if self._prioritised is not None:
            return self._prioritised.get_with_priority()
        return self.queue.get(), NORMAL_PRIORITY
