"""The public surface: what users import from ``informer_bus`` (docs/handlers.md shows it).

Pinned by name, so removing or renaming one is a deliberate change to this list (and to the
docs), never a side effect of moving a module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import informer_bus

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = [
    "FROM_BEGINNING",
    "FROM_NOW",
    "AsyncController",
    "AsyncResourceEventHandler",
    "BucketRateLimiter",
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


def test_the_exported_names_are_pinned_and_importable() -> None:
    assert informer_bus.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(informer_bus, name) is not None, name


def test_a_handler_sees_a_read_only_lister() -> None:
    for owner_only in ("attach", "detach", "mark_synced", "new_store"):
        assert not hasattr(informer_bus.Lister, owner_only), owner_only


def test_the_handler_docs_import_only_the_public_surface() -> None:
    """Every ``import`` in docs/handlers.md's Python blocks takes informer-bus names from
    ``informer_bus`` and only names it exports (examples may import their own modules)."""
    text = (ROOT / "docs" / "handlers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    seen = set()
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                assert top not in ("common", "processor_svc", "reflector_svc"), node.module
                if node.module == "informer_bus":
                    seen |= {alias.name for alias in node.names}
    assert seen and seen <= set(PUBLIC), seen - set(PUBLIC)
