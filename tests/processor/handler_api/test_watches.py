"""A controller's declared resources (``processor_svc.watches``): For, Owns, Watches -- what the
class declares, what each resource's events queue, and a running controller across them."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import ResourceEventHandler, process_deltas
from common.object_keys import DeletedFinalStateUnknown, Obj
from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from common.store import Indexer
from processor_svc.controller import Controller
from processor_svc.handlers import (
    DeclaresResources,
    HandlerContext,
    ResourceUse,
    ServesResources,
)
from processor_svc.lister import ShardedLister
from processor_svc.predicates import generation_changed
from processor_svc.watches import DeclarationError, For, Owns, Watches
from tests.support.controllers import make_context, synced_lister
from tests.support.waiting import wait_until

WIDGETS = "widgets.example.com"
WIDGET_LAYOUT = ResourceLayout(
    shard_count=4,
    shard_key=ShardKeyChoice(),
    kind="Widget",
    api_version="example.com/v1",
    namespaced=True,
)


def widget(name: str, namespace: str = "shop", *, rv: str = "1", generation: int = 1) -> Obj:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "generation": generation,
        },
    }


def owner(
    name: str,
    *,
    kind: str = "Widget",
    api_version: str = "example.com/v2",  # the group is what matters, not the version
    controller: bool = True,
    uid: str | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}" if uid is None else uid,
        "controller": controller,
    }


def config_map(
    name: str,
    namespace: str = "shop",
    *,
    owners: Iterable[dict[str, Any]] = (),
    rv: str = "1",
    app: str | None = None,
) -> Obj:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "resourceVersion": rv}
    if owners:
        metadata["ownerReferences"] = list(owners)
    if app is not None:
        metadata["labels"] = {"app": app}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


def namespace(name: str, *, rv: str = "1", team: str = "a") -> Obj:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": {"team": team}}}


def by_app(obj: Obj) -> list[str]:
    app = (obj["metadata"].get("labels") or {}).get("app")
    return [app] if app else []


class WidgetOperator(Controller):
    """The brief's operator: Widgets own ConfigMaps; a namespace event touches its Widgets."""

    workers = 1

    def widgets_in_namespace(self, obj: Obj) -> list[str]:
        return self.widgets.index_keys("namespace", obj["metadata"]["name"])

    widgets = For(WIDGETS)
    config_maps = Owns("configmaps", indexers={"by_app": by_app})
    namespaces = Watches("namespaces", map_to=widgets_in_namespace, replicate=True)

    def __init__(self, context: HandlerContext, **options: Any) -> None:
        super().__init__(context, **options)
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str | None, list[str]]] = []

    def reconcile(self, key: str) -> None:
        found = self.widgets.get_by_key(key)
        version = None if found is None else found["metadata"]["resourceVersion"]
        name = key.partition("/")[2]
        children = self.config_maps.index_keys("by_app", name)
        with self.lock:
            self.seen.append((key, version, children))

    def reconciled(self) -> list[tuple[str, str | None, list[str]]]:
        with self.lock:
            return list(self.seen)


Stores = dict[str, Indexer]


def served(*resources: str) -> tuple[dict[str, ShardedLister], Stores]:
    """One synced single-store lister per resource, and the stores behind them."""
    listers: dict[str, ShardedLister] = {}
    stores: Stores = {}
    for resource in resources:
        listers[resource], stores[resource] = synced_lister()
    return listers, stores


def operator_context(
    listers: dict[str, ShardedLister],
    *,
    layouts: dict[str, ResourceLayout] | None = None,
) -> HandlerContext:
    """The context a processor serving ``listers`` (the Widgets' first) would give."""
    others = {resource: lister for resource, lister in listers.items() if resource != WIDGETS}
    return make_context(
        listers[WIDGETS],
        resource=WIDGETS,
        listers=others,
        layouts={WIDGETS: WIDGET_LAYOUT} if layouts is None else layouts,
    )


def queued(controller: Controller) -> set[str]:
    """Take every key waiting in a controller's queue (its workers are not started)."""
    keys = set()
    while controller.queue.len():
        key = controller.queue.get()
        controller.queue.done(key)
        keys.add(key)
    return keys


@pytest.fixture
def operator(controllers: list[Controller]) -> tuple[WidgetOperator, Stores]:
    """A WidgetOperator whose workers are not started: tests read its queue."""
    listers, stores = served(WIDGETS, "configmaps", "namespaces")
    controller = WidgetOperator(operator_context(listers))
    controllers.append(controller)
    return controller, stores


def handler(controller: Controller, resource: str) -> ResourceEventHandler:
    return controller.resource_handlers()[resource]


# --- what a class declares ---------------------------------------------------------------------


def test_a_class_declares_its_resources_the_primary_first() -> None:
    assert isinstance(WidgetOperator, DeclaresResources)
    assert list(WidgetOperator.declared_resources()) == [
        ResourceUse(WIDGETS),
        ResourceUse("configmaps"),
        ResourceUse("namespaces", replicate=True),
    ]
    assert isinstance(WidgetOperator.widgets, For)  # on the class: the declaration
    assert WidgetOperator.config_maps.resource == "configmaps"

    class PrimaryLast(Controller):
        extra = Owns("secrets")
        main = For("deployments.apps")

        def reconcile(self, key: str) -> None: ...

    assert [use.resource for use in PrimaryLast.declared_resources()] == [
        "deployments.apps",
        "secrets",
    ]


def test_on_an_instance_each_declaration_is_its_resources_lister(
    operator: tuple[WidgetOperator, Stores],
) -> None:
    controller, _ = operator
    context = controller.context
    assert controller.widgets is context.lister_for(WIDGETS) is controller.lister
    assert controller.config_maps is context.lister_for("configmaps")
    assert controller.namespaces is context.lister_for("namespaces")
    assert controller.resource == WIDGETS
    with pytest.raises(AttributeError, match="declared resource"):
        controller.widgets = context.lister  # type: ignore[misc]
    assert isinstance(controller, ServesResources)
    handlers = controller.resource_handlers()
    assert list(handlers) == [WIDGETS, "configmaps", "namespaces"]
    assert handlers[WIDGETS] is controller  # the primary's events: the controller itself
    assert all(isinstance(h, ResourceEventHandler) for h in handlers.values())


def test_a_controller_without_declarations_is_the_handler_of_the_context_resource(
    controllers: list[Controller],
) -> None:
    class Plain(Controller):
        def reconcile(self, key: str) -> None: ...

    lister, _ = synced_lister()
    controller = Plain(make_context(lister, resource="deployments.apps"))
    controllers.append(controller)
    assert Plain.declared_resources() == ()
    assert controller.resource == "deployments.apps"
    assert controller.lister is lister
    assert controller.resource_handlers() == {"deployments.apps": controller}


def test_declared_indexers_are_on_the_resources_lister(
    operator: tuple[WidgetOperator, Stores], controllers: list[Controller]
) -> None:
    controller, stores = operator
    assert controller.config_maps.get_indexers()["by_app"] is by_app
    stores["configmaps"].add(config_map("c1", app="w"))
    assert controller.config_maps.index_keys("by_app", "w") == ["shop/c1"]
    # A second controller of the same class in the same processor reuses the index.
    again = WidgetOperator(controller.context)
    controllers.append(again)

    class Rival(Controller):
        widgets = For(WIDGETS)
        config_maps = Owns("configmaps", indexers={"by_app": lambda obj: []})

        def reconcile(self, key: str) -> None: ...

    with pytest.raises(DeclarationError, match="index 'by_app' of 'configmaps' is already"):
        Rival(controller.context)


def test_a_subclass_inherits_the_declarations_and_may_replace_one() -> None:
    class Narrower(WidgetOperator):
        namespaces = Watches("namespaces", map_to=lambda controller, obj: [])  # not replicated

    class WithoutNamespaces(WidgetOperator):
        namespaces = None  # type: ignore[assignment]

    assert [(u.resource, u.replicate) for u in Narrower.declared_resources()] == [
        (WIDGETS, False),
        ("configmaps", False),
        ("namespaces", False),
    ]
    assert [u.resource for u in WithoutNamespaces.declared_resources()] == [WIDGETS, "configmaps"]


def test_mistakes_are_one_line_errors() -> None:
    def define(**declarations: Any) -> type[Controller]:
        body: dict[str, Any] = {"reconcile": lambda self, key: None, **declarations}
        return type("Broken", (Controller,), body)

    cases = {
        "declares 2 For": {"a": For("widgets"), "b": For("gadgets")},
        "Owns\\('configmaps'\\) needs a For": {"c": Owns("configmaps")},
        "Watches\\('nodes'\\) needs a For": {"n": Watches("nodes", map_to=lambda c, o: [])},
        "declares 'configmaps' twice \\(c and d\\)": {
            "w": For("widgets"),
            "c": Owns("configmaps"),
            "d": Watches("configmaps", map_to=lambda c, o: []),
        },
    }
    for message, declarations in cases.items():
        with pytest.raises(DeclarationError, match=message) as caught:
            define(**declarations)
        assert "\n" not in str(caught.value)
    with pytest.raises(DeclarationError, match="map_to must be a function"):
        Watches("nodes", map_to=None)  # type: ignore[arg-type]
    with pytest.raises(DeclarationError, match="needs a resource id"):
        For("")


def test_a_declared_resource_the_processor_does_not_serve_is_an_error_when_built(
    controllers: list[Controller],
) -> None:
    listers, _ = served(WIDGETS, "configmaps")  # no namespaces
    with pytest.raises(DeclarationError) as caught:
        WidgetOperator(operator_context(listers))
    assert str(caught.value) == (
        "WidgetOperator.namespaces = Watches('namespaces'): this processor does not serve "
        "'namespaces' (it serves configmaps, widgets.example.com)"
    )


# --- For: the primary's events -----------------------------------------------------------------


def test_the_primarys_updates_pass_its_predicates_and_the_class_predicates(
    controllers: list[Controller],
) -> None:
    def labels_differ(old: Obj, new: Obj) -> bool:
        return old["metadata"].get("labels") != new["metadata"].get("labels")

    class Filtered(Controller):
        predicates = (labels_differ,)
        widgets = For(WIDGETS, predicates=(generation_changed,))

        def reconcile(self, key: str) -> None: ...

    listers, _ = served(WIDGETS)
    controller = Filtered(operator_context(listers))
    controllers.append(controller)
    old = widget("w")
    respec = widget("w", rv="2", generation=2)
    relabelled_respec = {**respec, "metadata": {**respec["metadata"], "labels": {"a": "b"}}}
    controller.on_update(old, respec)  # the For's predicate passes, the class's does not
    controller.on_update(old, widget("w", rv="2"))  # neither
    assert queued(controller) == set()
    controller.on_update(old, relabelled_respec)
    controller.on_add(widget("x"), False)
    controller.on_delete(DeletedFinalStateUnknown("shop/y", None))
    assert queued(controller) == {"shop/w", "shop/x", "shop/y"}


# --- Owns: a child's events queue its owner ----------------------------------------------------


def test_a_child_queues_its_controlling_owner_when_it_is_a_primary(
    operator: tuple[WidgetOperator, Stores],
) -> None:
    controller, _ = operator
    children = handler(controller, "configmaps")
    children.on_add(config_map("w1-config", owners=[owner("w1")]), False)
    assert queued(controller) == {"shop/w1"}
    ignored = [
        config_map("orphan"),
        config_map("deployed", owners=[owner("d", kind="Deployment", api_version="apps/v1")]),
        config_map("other-group", owners=[owner("w2", api_version="other.example.org/v1")]),
        config_map("core-group", owners=[owner("w3", api_version="v1")]),
        config_map("not-controller", owners=[owner("w4", controller=False)]),
    ]
    for obj in ignored:
        children.on_add(obj, False)
        children.on_update(obj, obj)
        children.on_delete(obj)
    assert queued(controller) == set()
    # The controlling reference among several is the one followed.
    both = config_map("both", owners=[owner("w5", controller=False), owner("w6")])
    children.on_add(both, True)
    assert queued(controller) == {"shop/w6"}


def test_a_reowned_child_queues_both_owners_whatever_the_predicates(
    controllers: list[Controller],
) -> None:
    class Strict(Controller):
        widgets = For(WIDGETS)
        config_maps = Owns("configmaps", predicates=(lambda old, new: False,))

        def reconcile(self, key: str) -> None: ...

    listers, _ = served(WIDGETS, "configmaps")
    controller = Strict(operator_context(listers))
    controllers.append(controller)
    children = handler(controller, "configmaps")
    before = config_map("c", owners=[owner("w1")])
    children.on_update(before, config_map("c", owners=[owner("w1")], rv="2"))
    assert queued(controller) == set()  # same owner: the predicate filters it
    children.on_update(before, config_map("c", owners=[owner("w2")], rv="2"))
    assert queued(controller) == {"shop/w1", "shop/w2"}
    children.on_update(before, config_map("c", rv="3"))  # released
    assert queued(controller) == {"shop/w1"}
    children.on_update(config_map("c"), config_map("c", owners=[owner("w3")], rv="4"))  # adopted
    assert queued(controller) == {"shop/w3"}


def test_a_deleted_child_and_a_tombstone_queue_the_last_owner(
    operator: tuple[WidgetOperator, Stores],
) -> None:
    controller, _ = operator
    children = handler(controller, "configmaps")
    children.on_delete(config_map("c1", owners=[owner("w1")]))
    assert queued(controller) == {"shop/w1"}
    tombstone = DeletedFinalStateUnknown("shop/c2", config_map("c2", owners=[owner("w2")]))
    children.on_delete(tombstone)
    assert queued(controller) == {"shop/w2"}
    children.on_delete(DeletedFinalStateUnknown("shop/c3", None))  # nothing tells its owner
    assert queued(controller) == set()


def test_a_cluster_scoped_primary_is_queued_by_name(controllers: list[Controller]) -> None:
    listers, _ = served(WIDGETS, "configmaps", "namespaces")
    cluster_scoped = ResourceLayout(4, ShardKeyChoice(), "Widget", "example.com/v1", False)
    controller = WidgetOperator(operator_context(listers, layouts={WIDGETS: cluster_scoped}))
    controllers.append(controller)
    handler(controller, "configmaps").on_add(config_map("c", owners=[owner("global")]), False)
    assert queued(controller) == {"global"}


def test_before_the_primarys_layout_is_known_only_a_cached_owner_with_that_uid_is_queued(
    controllers: list[Controller],
) -> None:
    listers, stores = served(WIDGETS, "configmaps", "namespaces")
    layouts: dict[str, ResourceLayout] = {}  # the Widgets' reflector has recorded nothing yet
    controller = WidgetOperator(operator_context(listers, layouts=layouts))
    controllers.append(controller)
    children = handler(controller, "configmaps")
    stores[WIDGETS].add(widget("w1"))
    children.on_add(config_map("a", owners=[owner("w1")]), False)
    children.on_add(config_map("b", owners=[owner("w1", uid="uid-of-a-namesake")]), False)
    children.on_add(config_map("c", owners=[owner("w2")]), False)  # not cached (yet)
    children.on_add(config_map("d", owners=[owner("w1", kind="Deployment", uid="")]), False)
    assert queued(controller) == {"shop/w1"}
    # Once known, the kind and group decide, without reading the cache.
    layouts[WIDGETS] = WIDGET_LAYOUT
    children.on_add(config_map("c", owners=[owner("w2")]), False)
    children.on_add(config_map("d", owners=[owner("w1", kind="Deployment")]), False)
    assert queued(controller) == {"shop/w2"}


def test_the_owners_predicates_filter_updates_that_keep_the_owner(
    controllers: list[Controller],
) -> None:
    class DataOnly(Controller):
        widgets = For(WIDGETS)
        config_maps = Owns(
            "configmaps", predicates=(lambda old, new: old.get("data") != new.get("data"),)
        )

        def reconcile(self, key: str) -> None: ...

    listers, _ = served(WIDGETS, "configmaps")
    controller = DataOnly(operator_context(listers))
    controllers.append(controller)
    children = handler(controller, "configmaps")
    old = config_map("c", owners=[owner("w")])
    children.on_update(old, config_map("c", owners=[owner("w")], rv="2"))
    assert queued(controller) == set()
    children.on_update(old, {**config_map("c", owners=[owner("w")], rv="3"), "data": {"k": "v"}})
    assert queued(controller) == {"shop/w"}


# --- Watches: map_to names the keys ------------------------------------------------------------


def test_a_watched_resource_queues_what_map_to_names(
    operator: tuple[WidgetOperator, Stores],
) -> None:
    controller, stores = operator
    for name, ns in (("w1", "shop"), ("w2", "shop"), ("w3", "lab")):
        stores[WIDGETS].add(widget(name, ns))
    namespaces = handler(controller, "namespaces")
    namespaces.on_add(namespace("shop"), True)  # map_to is a method: it reads self.widgets
    assert queued(controller) == {"shop/w1", "shop/w2"}
    namespaces.on_delete(DeletedFinalStateUnknown("lab", namespace("lab")))
    assert queued(controller) == {"lab/w3"}
    namespaces.on_delete(DeletedFinalStateUnknown("gone", None))
    assert queued(controller) == set()


def test_an_update_queues_the_keys_of_the_old_and_the_new_object(
    controllers: list[Controller],
) -> None:
    calls: list[str] = []

    def team_widgets(controller: Controller, obj: Obj) -> list[str]:
        calls.append(obj["metadata"]["resourceVersion"])
        return [f"team/{obj['metadata']['labels']['team']}"]

    class Teams(Controller):
        widgets = For(WIDGETS)
        namespaces = Watches(
            "namespaces",
            map_to=team_widgets,
            predicates=(lambda old, new: old["metadata"] != new["metadata"],),
        )

        def reconcile(self, key: str) -> None: ...

    listers, _ = served(WIDGETS, "namespaces")
    controller = Teams(operator_context(listers))
    controllers.append(controller)
    namespaces = handler(controller, "namespaces")
    namespaces.on_update(namespace("n", team="a"), namespace("n", rv="2", team="b"))
    assert queued(controller) == {"team/a", "team/b"}
    same = namespace("n", rv="2", team="b")
    namespaces.on_update(same, same)  # filtered by the predicate: not even mapped
    assert queued(controller) == set()
    assert calls == ["2", "1"]


# --- a running controller across its resources ------------------------------------------------


def test_a_running_operator_reconciles_a_widget_when_its_children_change(
    controllers: list[Controller],
) -> None:
    listers, stores = served(WIDGETS, "configmaps", "namespaces")
    controller = WidgetOperator(operator_context(listers))
    controllers.append(controller)
    handlers = controller.resource_handlers()
    controller.start()

    def deliver(resource: str, delta: Delta) -> None:
        process_deltas(handlers[resource], stores[resource], [delta], is_in_initial_list=False)

    deliver(WIDGETS, Delta(DeltaType.ADDED, widget("w")))
    wait_until(lambda: controller.reconciled() == [("shop/w", "1", [])])
    deliver("configmaps", Delta(DeltaType.ADDED, config_map("c", owners=[owner("w")], app="w")))
    wait_until(lambda: controller.reconciled()[1:] == [("shop/w", "1", ["shop/c"])])
    deliver("configmaps", Delta(DeltaType.DELETED, config_map("c", owners=[owner("w")])))
    wait_until(lambda: controller.reconciled()[2:] == [("shop/w", "1", [])])


def test_a_reconcile_waits_for_the_child_and_the_status_it_wrote(
    controllers: list[Controller],
) -> None:
    """The reconcile creates the Widget's ConfigMap (rv 7) and writes its status (rv 2): the
    Widget is not reconciled again until both caches show them."""

    class Writer(WidgetOperator):
        def reconcile(self, key: str) -> None:
            super().reconcile(key)
            if len(self.reconciled()) == 1:
                self.expect_version(key, "7", resource="configmaps", object_key="shop/w-config")
                self.expect_version(key, "2")

    listers, stores = served(WIDGETS, "configmaps", "namespaces")
    controller = Writer(operator_context(listers))
    controllers.append(controller)
    handlers = controller.resource_handlers()
    controller.start()

    def deliver(resource: str, delta: Delta) -> None:
        process_deltas(handlers[resource], stores[resource], [delta], is_in_initial_list=False)

    deliver(WIDGETS, Delta(DeltaType.ADDED, widget("w")))
    wait_until(lambda: len(controller.reconciled()) == 1)
    # Another namespace's event queues the Widget while neither write is cached: held back.
    deliver("namespaces", Delta(DeltaType.ADDED, namespace("shop")))
    child = config_map("w-config", owners=[owner("w")], rv="7", app="w")
    deliver("configmaps", Delta(DeltaType.ADDED, child))  # queues the Widget: still held back
    wait_until(lambda: len(controller.barrier.expectations("shop/w")) == 1)
    assert len(controller.reconciled()) == 1
    deliver(WIDGETS, Delta(DeltaType.UPDATED, widget("w", rv="2")))  # the status write
    wait_until(lambda: len(controller.reconciled()) == 2)
    assert controller.reconciled()[1] == ("shop/w", "2", ["shop/w-config"])  # both cached
