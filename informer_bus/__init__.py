"""informer-bus for Python code: everything a handler, a controller or a subscriber imports.

``from informer_bus import Controller, HandlerContext, Lister, ...``: the names below are the
public surface (``docs/handlers.md`` shows them in use); the modules they come from are the
implementation and may move. The package is also the application layer -- the
``informer-bus`` command line and the tools around the services -- which sits above both
services and ``common``; the services never import it.
"""

from common.compact_store import CompactIndexer
from common.deltas import Delta, DeltaType
from common.handlers import (
    FilteringResourceEventHandler,
    ResourceEventHandler,
    ResourceEventHandlerFuncs,
    process_deltas,
)
from common.object_keys import (
    DeletedFinalStateUnknown,
    InvalidKeyError,
    Obj,
    meta_namespace_key,
    split_meta_namespace_key,
)
from common.priority_queue import LOW_PRIORITY, NORMAL_PRIORITY, PriorityQueue
from common.rate_limiters import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from common.store import Indexer
from common.workqueue import DelayingQueue, Queue, QueueShutDown, RateLimitingQueue
from informer_bus.kube_api import kube_api_client, kube_connection
from informer_bus.subscription import (
    FROM_BEGINNING,
    FROM_NOW,
    DurableSubscription,
    SubscribedDelta,
    SubscribeError,
    Subscription,
    subscribe,
    subscribe_durable,
)
from processor_svc.async_controller import AsyncController
from processor_svc.async_dispatch import AsyncResourceEventHandler
from processor_svc.controller import Controller
from processor_svc.handlers import (
    HandlerContext,
    Lister,
    Startable,
    Stoppable,
    load_handler,
    make_workqueue_factory,
)
from processor_svc.key_events import KeyEventHandler
from processor_svc.lister import ShardedLister
from processor_svc.predicates import (
    UpdatePredicate,
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
)
from processor_svc.watches import DeclarationError, For, Owns, Watches

__version__ = "0.1.0"

__all__ = [
    "FROM_BEGINNING",
    "FROM_NOW",
    "LOW_PRIORITY",
    "NORMAL_PRIORITY",
    "AsyncController",
    "AsyncResourceEventHandler",
    "BucketRateLimiter",
    "CompactIndexer",
    "Controller",
    "DeclarationError",
    "DelayingQueue",
    "DeletedFinalStateUnknown",
    "Delta",
    "DeltaType",
    "DurableSubscription",
    "FilteringResourceEventHandler",
    "For",
    "HandlerContext",
    "Indexer",
    "InvalidKeyError",
    "ItemExponentialFailureRateLimiter",
    "ItemFastSlowRateLimiter",
    "KeyEventHandler",
    "Lister",
    "MaxOfRateLimiter",
    "Obj",
    "Owns",
    "PriorityQueue",
    "Queue",
    "QueueShutDown",
    "RateLimiter",
    "RateLimitingQueue",
    "ResourceEventHandler",
    "ResourceEventHandlerFuncs",
    "ShardedLister",
    "Startable",
    "Stoppable",
    "SubscribeError",
    "SubscribedDelta",
    "Subscription",
    "UpdatePredicate",
    "Watches",
    "annotations_changed",
    "any_of",
    "default_controller_rate_limiter",
    "generation_changed",
    "kube_api_client",
    "kube_connection",
    "labels_changed",
    "load_handler",
    "make_workqueue_factory",
    "meta_namespace_key",
    "process_deltas",
    "split_meta_namespace_key",
    "subscribe",
    "subscribe_durable",
]
