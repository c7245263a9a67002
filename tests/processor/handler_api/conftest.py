"""Shared builders for the controller-author API tests: objects, listers, contexts, waiting.

Everything here is real: real Indexers, real queues, real threads. The ``controllers`` fixture
stops every controller a test started, so a failing assertion cannot leak worker threads into
the next test (the root conftest would then fail that one too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from common.object_keys import Obj
from common.publication import ResourceLayout
from common.rate_limiters import ItemExponentialFailureRateLimiter, RateLimiter
from common.store import Indexer
from common.workqueue import MetricsProvider
from processor_svc.controller import Controller
from processor_svc.handlers import ExpectationStore, HandlerContext, make_workqueue_factory
from processor_svc.lister import ShardedLister

SOON = 5.0
"""Real seconds within which something that should happen promptly surely has."""


def pod(
    name: str,
    namespace: str = "default",
    *,
    phase: str | None = "Running",
    rv: str = "1",
    labels: dict[str, str] | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
        "status": {} if phase is None else {"phase": phase},
    }
    if labels:
        obj["metadata"]["labels"] = labels
    return obj


def deployment(
    name: str, namespace: str = "default", *, desired: Any = 3, ready: Any = 3, rv: str = "1"
) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
        "spec": {"replicas": desired},
        "status": {"readyReplicas": ready},
    }


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
) -> HandlerContext:
    """A context whose queues retry fast (1 ms doubling up to 10 ms), as tests need.

    ``listers`` are the other served resources'; ``layouts`` what their reflectors recorded
    (a resource missing there is not known yet; the mapping is read at each call)."""
    known: Mapping[str, ResourceLayout] = {} if layouts is None else layouts
    return HandlerContext(
        lister=lister,
        workqueue_factory=make_workqueue_factory(metrics, rate_limiter_factory=fast_rate_limiter),
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


@pytest.fixture
def controllers() -> Iterator[list[Controller]]:
    """Append controllers here; each is stopped (and its threads joined) after the test."""
    started: list[Controller] = []
    yield started
    for controller in started:
        controller.stop()
