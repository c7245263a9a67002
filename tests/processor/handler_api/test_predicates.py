"""Update predicates (``processor_svc.predicates``) and a controller that filters with them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from common.deltas import Delta, DeltaType
from common.handlers import process_deltas
from common.object_keys import Obj
from processor_svc.controller import Controller
from processor_svc.predicates import (
    annotations_changed,
    any_of,
    generation_changed,
    labels_changed,
)
from tests.support.controllers import make_context, synced_lister
from tests.support.waiting import wait_until


def widget(rv: str, *, generation: int | None = 1, **metadata: Any) -> Obj:
    meta: dict[str, Any] = {"name": "w", "namespace": "ns", "resourceVersion": rv, **metadata}
    if generation is not None:
        meta["generation"] = generation
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": meta}


def test_each_predicate_passes_exactly_its_kind_of_change() -> None:
    base = widget("1", labels={"a": "1"}, annotations={"x": "1"})
    status_only = widget("2", labels={"a": "1"}, annotations={"x": "1"})
    spec = widget("3", generation=2, labels={"a": "1"}, annotations={"x": "1"})
    relabelled = widget("4", labels={"a": "2"}, annotations={"x": "1"})
    annotated = widget("5", labels={"a": "1"}, annotations={"x": "2"})
    table = {
        generation_changed: [False, True, False, False],
        labels_changed: [False, False, True, False],
        annotations_changed: [False, False, False, True],
    }
    for predicate, expected in table.items():
        got = [predicate(base, new) for new in (status_only, spec, relabelled, annotated)]
        assert got == expected, predicate.__name__
    # Nothing tells a spec change from a status one without a generation: it passes.
    assert generation_changed(widget("1", generation=None), widget("2", generation=None))
    # An absent map is an empty one.
    assert not labels_changed(widget("1"), widget("2", labels={}))
    either = any_of(generation_changed, labels_changed)
    assert [either(base, new) for new in (status_only, spec, relabelled)] == [False, True, True]
    with pytest.raises(ValueError, match="at least one"):
        any_of()


class Counting(Controller):
    workers = 1
    predicates = (generation_changed,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reconciled: list[str] = []

    def reconcile(self, key: str) -> None:
        obj = self.lister.get_by_key(key)
        self.reconciled.append("gone" if obj is None else obj["metadata"]["resourceVersion"])


def test_a_controller_queues_only_the_updates_its_predicates_pass(
    controllers: list[Controller],
) -> None:
    lister, store = synced_lister()
    controller = Counting(make_context(lister))
    controllers.append(controller)
    controller.start()
    process_deltas(controller, store, [Delta(DeltaType.ADDED, widget("1"))], False)
    wait_until(lambda: controller.reconciled == ["1"])
    process_deltas(controller, store, [Delta(DeltaType.UPDATED, widget("2"))], False)  # status
    time.sleep(0.2)
    assert controller.reconciled == ["1"]
    process_deltas(controller, store, [Delta(DeltaType.UPDATED, widget("3", generation=2))], False)
    wait_until(lambda: controller.reconciled == ["1", "3"])
    process_deltas(controller, store, [Delta(DeltaType.DELETED, widget("3", generation=2))], False)
    wait_until(lambda: controller.reconciled == ["1", "3", "gone"])
    # The constructor's argument wins over the class attribute.
    other = Counting(make_context(lister), predicates=())
    controllers.append(other)
    assert other.predicates == ()
