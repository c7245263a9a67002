"""Subscriptions: a resource's deltas as they reach the bus, for scripts, notebooks, tests and
asyncio programs (the command line, ``informer-bus subscribe``, is
:mod:`informer_bus.subscribe_command`).

Two products, one core (:mod:`~informer_bus.subscription.core`):

* :func:`subscribe` makes a bystander (:class:`Subscription`): plain ``XREAD`` from a start
  position, outside every consumer group, forgetting its place when it stops::

      from informer_bus import FROM_BEGINNING, subscribe

      with subscribe("redis://127.0.0.1:6390/0", "pods", start=FROM_BEGINNING) as deltas:
          for delta in deltas:
              print(delta.type, delta.key, delta.resource_version)

* :func:`subscribe_durable` makes a durable subscriber (:class:`DurableSubscription`): a
  consumer group of its own that acknowledges what the caller processed and resumes there::

      with subscribe_durable("redis://127.0.0.1:6390/0", "pods", "audit") as deltas:
          for delta in deltas:  # asking for the next delta acknowledges this one
              record(delta)

Making either talks to no Redis; it opens at the start of its ``with`` block (or the first
read). Both are read the same way with ``async with`` / ``async for`` over ``redis.asyncio``.
"""

from informer_bus.subscription.bystander import Subscription, subscribe
from informer_bus.subscription.delta import SubscribedDelta, UndecodableEntry
from informer_bus.subscription.durable import DurableSubscription, subscribe_durable
from informer_bus.subscription.options import (
    FROM_BEGINNING,
    FROM_NOW,
    VALID_TYPES,
    StopSignal,
    SubscribeError,
    check_start,
    parse_types,
    resource_id_of,
)

__all__ = [
    "FROM_BEGINNING",
    "FROM_NOW",
    "VALID_TYPES",
    "DurableSubscription",
    "StopSignal",
    "SubscribeError",
    "SubscribedDelta",
    "Subscription",
    "UndecodableEntry",
    "check_start",
    "parse_types",
    "resource_id_of",
    "subscribe",
    "subscribe_durable",
]
