"""The public surface: what users import from ``informer_bus`` (docs/handlers.md shows it).

Pinned by name, so removing or renaming one is a deliberate change to this list (and to the
docs), never a side effect of moving a module.
"""

from __future__ import annotations

import ast
import re

import informer_bus
from tests.support.paths import ROOT

PUBLIC = [
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


def test_the_exported_names_are_pinned_and_importable() -> None:
    assert informer_bus.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(informer_bus, name) is not None, name


def test_a_handler_sees_a_read_only_lister() -> None:
    for owner_only in ("attach", "detach", "mark_synced", "new_store"):
        assert not hasattr(informer_bus.Lister, owner_only), owner_only


_PRODUCT = ("common", "processor_svc", "reflector_svc", "apiserver_sim", "informer_bus")
_IMPORT = re.compile(
    r"^[ \t>]*(?:from[ \t]+(?P<module>[\w.]+)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#]+)"
    r"|import[ \t]+(?P<imported>[\w.]+))",
    re.M,
)


def surface_violations(text: str) -> list[str]:
    """Each import of the product in ``text`` that is not of its public surface: anything from
    ``common``, the services or the simulator, an ``informer_bus`` submodule other than the
    shipped examples, or a name ``informer_bus`` does not export."""
    problems: list[str] = []
    for match in _IMPORT.finditer(text):
        module = match.group("module") or match.group("imported")
        top = module.split(".")[0]
        if top not in _PRODUCT:
            continue
        if module == "informer_bus":
            names = match.group("names") or ""
            for alias in names.strip("()").replace("\n", " ").split(","):
                name = alias.split(" as ")[0].strip()
                if name and name not in PUBLIC:
                    problems.append(f"{match.group(0).strip()}: {name} is not exported")
        elif not module.startswith("informer_bus.examples"):
            problems.append(match.group(0).strip())
    return problems


def test_the_checker_finds_imports_outside_the_public_surface() -> None:
    text = """```python
from common.store import Indexer
from informer_bus.subscribe import subscribe
import processor_svc.controller
from informer_bus import (
    Controller,
    Secret,
)
from informer_bus import Delta  # fine
from informer_bus.examples.replica_checker import Shortfall
import orjson
```
"""
    assert surface_violations(text) == [
        "from common.store import Indexer",
        "from informer_bus.subscribe import subscribe",
        "import processor_svc.controller",
        "from informer_bus import (\n    Controller,\n    Secret,\n): Secret is not exported",
    ]


def test_docs_readme_and_examples_import_only_the_public_surface() -> None:
    """What a reader copies imports only ``informer_bus`` (and its shipped examples): every
    import in README.md, docs/ and examples/, in code blocks or not."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    documents += [path for path in sorted((ROOT / "examples").rglob("*")) if path.is_file()]
    assert len(documents) > 3
    problems = {
        str(path.relative_to(ROOT)): found
        for path in documents
        if "node_modules" not in path.parts
        and (found := surface_violations(path.read_text(errors="replace")))
    }
    assert problems == {}


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
