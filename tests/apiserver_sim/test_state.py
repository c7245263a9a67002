"""The store's byte layout and in-place updates (what makes churn and the live watch fast):
results must be exactly what a full decode / mutate / encode would have stored."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from apiserver_sim import CONFIGMAPS, NAMESPACES, PODS, ClusterState
from apiserver_sim.fixtures import make_object
from apiserver_sim.load import churn, populate
from apiserver_sim.revision import encode_object
from apiserver_sim.selectors import FieldSelector, LabelSelector

NO_LABELS = LabelSelector.parse(None)


@pytest.mark.parametrize(
    "obj",
    [
        make_object(PODS, random.Random(1), 7, "ns-00"),
        make_object(CONFIGMAPS, random.Random(1), 7, "ns-00"),  # no status
        {"metadata": {"name": "bare"}, "data": {"a": "1"}},  # no kind/apiVersion
        {"kind": "X", "metadata": {"name": "x"}, "status": None},
        {"status": {"phase": "Active"}, "apiVersion": "v1", "metadata": {"name": "first"}},
    ],
    ids=["pod", "configmap", "bare", "null-status", "status-first"],
)
def test_encode_object_layout(obj: dict[str, Any]) -> None:
    raw, (meta_start, meta_end, status_start) = encode_object(obj)
    assert orjson.loads(raw) == obj
    assert orjson.loads(raw[meta_start:meta_end]) == obj["metadata"]
    head = [k for k in ("kind", "apiVersion") if k in obj] + ["metadata"]
    middle = [k for k in obj if k not in ("kind", "apiVersion", "metadata", "status")]
    tail = ["status"] if "status" in obj else []
    assert list(orjson.loads(raw)) == head + middle + tail  # the apiserver's member order
    if "status" in obj:
        assert orjson.loads(raw[status_start:-1]) == obj["status"]
    else:
        assert status_start == 0


def _full_update(state: ClusterState, key: str, phase: str | None) -> dict[str, Any]:
    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["annotations"] = {"x": "1"}
        obj["metadata"]["labels"]["tier"] = "cache"
        if phase is not None:
            obj["status"]["phase"] = phase
        return obj

    return state.update(PODS, key, mutate).decode()


@pytest.mark.parametrize("phase", [None, "Failed"])
def test_update_parts_equals_a_full_update(phase: str | None) -> None:
    fast, slow = ClusterState(), ClusterState()
    for state in (fast, slow):
        populate(state, PODS, 3, seed=4)
    key = slow.sorted_keys(PODS)[1]
    expected = _full_update(slow, key, phase)

    def meta(m: dict[str, Any]) -> None:
        m["annotations"] = {"x": "1"}
        m["labels"]["tier"] = "cache"

    def status(s: dict[str, Any]) -> None:
        s["phase"] = phase

    stored = fast.update_parts(PODS, key, meta, status if phase else None)
    assert stored.decode() == expected
    assert stored.rv == int(expected["metadata"]["resourceVersion"]) == fast.resource_version
    assert stored.labels["tier"] == "cache"
    assert stored.fields == slow.get(PODS, key).fields
    assert stored.type == "MODIFIED" and stored.prev is not None
    # the layout stays valid for the next in-place update
    assert orjson.loads(stored.raw[stored.meta_start : stored.meta_end]) == expected["metadata"]
    assert stored.decode_status() == expected["status"]
    if phase:
        found = fast.list_page(
            PODS, None, snapshot_rv=None, after_key=None, limit=0, labels=NO_LABELS,
            fields=FieldSelector.parse("status.phase=Failed", PODS),
        )  # fmt: skip
        assert key in [o.key for o in found.items]


def test_update_parts_refuses_renames_and_leaves_state_alone() -> None:
    state = ClusterState()
    populate(state, PODS, 1, seed=1)
    (key,) = state.sorted_keys(PODS)
    before = state.resource_version
    with pytest.raises(ValueError, match="rename"):
        state.update_parts(PODS, key, lambda m: m.update(name="other"))
    assert state.resource_version == before
    assert state.get(PODS, key).rv == before


def test_objects_without_status_skip_the_status_edit() -> None:
    state = ClusterState()
    populate(state, CONFIGMAPS, 1, seed=1)
    (key,) = state.sorted_keys(CONFIGMAPS)
    calls: list[Any] = []
    stored = state.update_parts(CONFIGMAPS, key, lambda m: m.update(labels={"a": "b"}),
                                calls.append)  # fmt: skip
    assert calls == []
    assert stored.decode()["metadata"]["labels"] == {"a": "b"}
    assert "status" not in stored.decode()


def test_delete_keeps_final_state_and_snapshots() -> None:
    state = ClusterState()
    populate(state, NAMESPACES, 2, seed=1)
    key = state.sorted_keys(NAMESPACES)[0]
    live = state.get(NAMESPACES, key)
    snapshot = state.resource_version
    gone = state.delete(NAMESPACES, key)
    assert gone.type == "DELETED" and gone.rv == snapshot + 1
    assert {**gone.decode(), "metadata": {}} == {**live.decode(), "metadata": {}}
    assert gone.decode()["metadata"]["resourceVersion"] == str(gone.rv)

    def listed(rv: int | None) -> list[str]:
        page = state.list_page(
            NAMESPACES, None, snapshot_rv=rv, after_key=None, limit=0, labels=NO_LABELS,
            fields=FieldSelector.parse(None, NAMESPACES),
        )  # fmt: skip
        return [o.key for o in page.items]

    assert key in listed(snapshot)
    assert key not in listed(None)


def test_compaction_unchains_history() -> None:
    """Revisions point at their predecessor only while in the log, so an object that keeps
    changing does not keep its whole history alive."""
    state = ClusterState(history_max_events=10)
    populate(state, PODS, 5, seed=1)
    churn(state, PODS, rate=0, seconds=10, seed=2, mix={"update": 1.0}, max_events=200)
    for key in state.sorted_keys(PODS):
        chain, revision = 0, state.get(PODS, key)
        while revision.prev is not None:
            chain, revision = chain + 1, revision.prev
        assert chain <= 10  # ~40 updates each
    assert state.history_size == 10
