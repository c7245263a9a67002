"""Shared builders for the controller-author API tests: listers, contexts and queues that
retry fast. Everything here is real: real Indexers, real queues, real threads."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from common.object_keys import Obj
from common.publication import ResourceLayout
from common.rate_limiters import ItemExponentialFailureRateLimiter, RateLimiter
from common.store import Indexer
from common.workqueue import MetricsProvider
from processor_svc.handlers import ExpectationStore, HandlerContext, make_workqueue_factory
from processor_svc.lister import ShardedLister

SOON = 5.0
"""Real seconds within which something that should happen promptly surely has."""


def fast_rate_limiter() -> RateLimiter[str]:
    return ItemExponentialFailureRateLimiter[str](0.001, 0.01)


def make_context(
    lister: ShardedLister,
    *,
    metrics: MetricsProvider | None = None,
    settings: object = None,
    resource: str = "pods",
    listers: Mapping[str, ShardedLister] | None = None,
    layouts: Mapping[str, ResourceLayout] | None = None,
    key_synced: Callable[[str], bool] | None = None,
    expectations: ExpectationStore | None = None,
    priority: bool = True,
) -> HandlerContext:
    """A context whose queues retry fast (1 ms doubling up to 10 ms), as tests need; priority
    queues unless ``priority=False`` (FIFO).

    ``listers`` are the other served resources'; ``layouts`` what their reflectors recorded
    (a resource missing there is not known yet; the mapping is read at each call)."""
    known: Mapping[str, ResourceLayout] = {} if layouts is None else layouts
    return HandlerContext(
        lister=lister,
        workqueue_factory=make_workqueue_factory(
            metrics, rate_limiter_factory=fast_rate_limiter, priority=priority
        ),
        logger=logging.getLogger("tests.processor_api"),
        settings=settings,
        resource=resource,
        listers=dict(listers or {}),
        layouts=known.get,
        key_synced=key_synced,
        expectations=expectations,
    )


def synced_lister(*objects: Obj) -> tuple[ShardedLister, Indexer]:
    """A lister with one synced shard (0) holding ``objects``."""
    lister = ShardedLister()
    store = lister.new_store()
    for obj in objects:
        store.add(obj)
    lister.attach(0, store)
    lister.mark_synced(0)
    return lister, store
