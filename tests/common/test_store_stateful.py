"""The indexed store against a brute-force model, over random sequences of writes.

The model is a plain ``key -> object`` dict; every index is recomputed from it from scratch
after each step. Names, namespaces and labels come from small pools so that writes collide,
objects move between index values, and values empty out. One optional index raises on
"poisoned" objects, to check that a failed write leaves the store exactly as it was.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from common.compact_store import CompactIndexer
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.store import (
    MUTATION_DETECTOR_ENV,
    NAMESPACE_INDEX,
    Indexer,
    IndexerConflictError,
    IndexFunc,
    IndexFuncError,
    IndexNotFoundError,
    meta_namespace_index_func,
)

LABEL_NAMES = ("app", "tier")
LABEL_VALUES = ("a", "b", "c")


def label_pairs(obj: Obj) -> list[str]:
    """Multi-valued: one value per label."""
    return [f"{name}={value}" for name, value in obj["metadata"].get("labels", {}).items()]


def label_values(obj: Obj) -> list[str]:
    """Multi-valued and may repeat a value (app=a, tier=a gives ["a", "a"])."""
    return list(obj["metadata"].get("labels", {}).values())


def refuses_poison(obj: Obj) -> list[str]:
    if obj["metadata"].get("poison"):
        raise ValueError("poisoned")
    return [obj["metadata"]["name"][0]]


INITIAL_INDEXERS: dict[str, IndexFunc] = {
    NAMESPACE_INDEX: meta_namespace_index_func,
    "labels": label_pairs,
}
OPTIONAL_INDEXERS: dict[str, IndexFunc] = {
    "label-values": label_values,
    "strict": refuses_poison,
}

resource_versions = st.integers(min_value=1, max_value=10**6).map(str)


@st.composite
def objects(draw: st.DrawFn) -> Obj:
    metadata: dict[str, Any] = {
        "name": draw(st.sampled_from(["web", "api", "db", "cache"])),
        "resourceVersion": draw(resource_versions),
    }
    namespace = draw(st.sampled_from([None, "", "shop", "data"]))
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = draw(
        st.dictionaries(st.sampled_from(LABEL_NAMES), st.sampled_from(LABEL_VALUES))
    )
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        metadata["poison"] = True
    return {"metadata": metadata}


def brute_force_index(model: dict[str, Obj], index_func: IndexFunc) -> dict[str, set[str]]:
    index: dict[str, set[str]] = {}
    for key, obj in model.items():
        for value in index_func(obj):
            index.setdefault(value, set()).add(key)
    return index


class IndexerMatchesModel(RuleBasedStateMachine):
    hands_out_copies = False
    """Whether reads return private copies (the compact store) or the stored objects."""

    def __init__(self) -> None:
        super().__init__()
        self.store = Indexer()
        self.model: dict[str, Obj] = {}
        self.indexers: dict[str, IndexFunc] = {}

    @initialize(detect_mutations=st.booleans())
    def start(self, detect_mutations: bool) -> None:
        # The detecting subclass must behave exactly like the plain store.
        self.store = Indexer(indexers=INITIAL_INDEXERS, detect_mutations=detect_mutations)
        self.indexers = dict(INITIAL_INDEXERS)

    def assert_same(self, found: list[Obj], expected: list[Obj]) -> None:
        if self.hands_out_copies:
            assert found == expected
            assert not {id(obj) for obj in found} & {id(obj) for obj in expected}
        else:
            assert [id(obj) for obj in found] == [id(obj) for obj in expected]

    def would_fail(self, objs: list[Obj]) -> bool:
        return "strict" in self.indexers and any(obj["metadata"].get("poison") for obj in objs)

    # --- writes ---

    @rule(obj=objects(), use_add=st.booleans())
    def write(self, obj: Obj, use_add: bool) -> None:
        write = self.store.add if use_add else self.store.update
        if self.would_fail([obj]):
            with pytest.raises(IndexFuncError):
                write(obj)
            return
        write(obj)
        self.model[meta_namespace_key(obj)] = obj

    @rule(obj=objects(), returning=st.booleans())
    def delete_by_object(self, obj: Obj, returning: bool) -> None:
        key = meta_namespace_key(obj)
        if returning:
            assert self.store.delete(obj) == self.model.get(key)
        else:
            self.store.discard(obj)  # as process_deltas deletes: nothing decoded or returned
        self.model.pop(key, None)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), with_stale_state=st.booleans())
    def delete_by_tombstone(self, data: st.DataObject, with_stale_state: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        stale = data.draw(objects()) if with_stale_state else None
        self.store.delete(DeletedFinalStateUnknown(key=key, obj=stale))
        del self.model[key]

    @rule(objs=st.lists(objects(), max_size=6), resource_version=resource_versions)
    def replace(self, objs: list[Obj], resource_version: str) -> None:
        relisted = {meta_namespace_key(obj): obj for obj in objs}  # a repeated key: last wins
        if self.would_fail(list(relisted.values())):
            with pytest.raises(IndexFuncError):
                self.store.replace(objs, resource_version)
            return
        self.store.replace(iter(objs), resource_version)
        self.model = relisted

    @rule(name=st.sampled_from(sorted(OPTIONAL_INDEXERS)))
    def add_indexer(self, name: str) -> None:
        if name in self.indexers:
            with pytest.raises(IndexerConflictError):
                self.store.add_indexers({name: OPTIONAL_INDEXERS[name]})
            return
        if name == "strict" and any(obj["metadata"].get("poison") for obj in self.model.values()):
            with pytest.raises(IndexFuncError):
                self.store.add_indexers({name: OPTIONAL_INDEXERS[name]})
            return
        self.store.add_indexers({name: OPTIONAL_INDEXERS[name]})
        self.indexers[name] = OPTIONAL_INDEXERS[name]

    # --- invariants ---

    @invariant()
    def same_objects(self) -> None:
        assert sorted(self.store.list_keys()) == sorted(self.model)
        assert len(self.store) == len(self.model)
        listed = {meta_namespace_key(obj): obj for obj in self.store.list()}
        self.assert_same([listed[key] for key in sorted(listed)], self.sorted_model())
        for key, obj in self.model.items():
            self.assert_same([self.store.get_by_key(key), self.store.get(obj)], [obj, obj])  # type: ignore[list-item]
            assert key in self.store

    @invariant()
    def same_indexers(self) -> None:
        assert self.store.get_indexers() == self.indexers
        assert self.store.list_index_func_values("no-such-index") == []
        with pytest.raises(IndexNotFoundError):
            self.store.index_keys("no-such-index", "a")

    @invariant()
    def indexes_match_brute_force(self) -> None:
        for name, index_func in self.indexers.items():
            expected = brute_force_index(self.model, index_func)
            assert self.store.list_index_func_values(name) == sorted(expected)
            for value, keys in expected.items():
                assert self.store.index_keys(name, value) == sorted(keys)
                found = self.store.by_index(name, value)
                self.assert_same(found, [self.model[key] for key in sorted(keys)])

    @invariant()
    def index_query_matches_brute_force(self) -> None:
        for name, index_func in self.indexers.items():
            expected = brute_force_index(self.model, index_func)
            for obj in self.model.values():
                sharing = set().union(*(expected[value] for value in index_func(obj)))
                found = self.store.index(name, obj)
                self.assert_same(found, [self.model[key] for key in sorted(sharing)])

    def sorted_model(self) -> list[Obj]:
        return [self.model[key] for key in sorted(self.model)]


IndexerMatchesModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def detector_chosen_by_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MUTATION_DETECTOR_ENV, raising=False)


class CompactIndexerMatchesModel(IndexerMatchesModel):
    """The compact store must keep every promise of the plain one, reading back copies."""

    hands_out_copies = True

    @initialize()
    def start(self) -> None:  # type: ignore[override]
        self.store = CompactIndexer(indexers=INITIAL_INDEXERS)
        self.indexers = dict(INITIAL_INDEXERS)


CompactIndexerMatchesModel.TestCase.settings = settings(
    IndexerMatchesModel.TestCase.settings, max_examples=60
)

TestIndexerMatchesModel = IndexerMatchesModel.TestCase
TestCompactIndexerMatchesModel = CompactIndexerMatchesModel.TestCase
