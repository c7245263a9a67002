"""bench/bench_handlers.py's key-only handler (issue 35: what the processor costs when a handler
reads nothing of the objects) takes each object's key and nothing else, and reports counts a
bench can wait on without a record per update."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from common.object_keys import DeletedFinalStateUnknown
from tests.support.paths import ROOT


@pytest.fixture
def handlers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the benches import each other as scripts
    module = importlib.import_module("bench_handlers")
    monkeypatch.setenv(module.DIR_ENV, str(tmp_path))
    return module


class Untouchable(Mapping[str, Any]):
    """An object a handler must not read: any access fails the test, whatever catches
    ``KeyError`` on the way (an ``AssertionError`` is no lookup miss)."""

    def __getitem__(self, key: str) -> Any:
        raise AssertionError(f"the handler read [{key!r}]")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the handler iterated the object")

    def __len__(self) -> int:
        raise AssertionError("the handler asked the object's length")


class KeyPathOnly(Untouchable):
    """A pod of which only ``metadata.name`` and ``metadata.namespace`` may be read: what
    ``meta_namespace_key`` reads (a lazy object will give the key from its header instead)."""

    def __init__(self, namespace: str, name: str, *, root: bool = True) -> None:
        self.fields = {"metadata": KeyPathOnly(namespace, name, root=False)} if root else {
            "namespace": namespace, "name": name}  # fmt: skip

    def __getitem__(self, key: str) -> Any:
        if key in self.fields:
            return self.fields[key]
        return super().__getitem__(key)


def pod(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "annotations": {"a": "1"}},
            "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}  # fmt: skip


def stats(directory: Path) -> dict[str, int]:
    [path] = directory.glob("stats-*.json")
    result: dict[str, int] = orjson.loads(path.read_bytes())
    return result


def test_it_counts_every_call_and_takes_keys_from_plain_dicts(
    handlers: ModuleType, tmp_path: Path
) -> None:
    handler = handlers.KeyOnly()
    before = handlers.handler_clock_ns()
    handler.on_add(pod("ns-01", "a"), True)
    handler.on_add(pod("ns-01", "b"), False)
    handler.on_update(pod("ns-01", "b"), pod("ns-02", "c"))
    assert handler.last_key == "ns-02/c"
    handler.on_update(pod("ns-01", "b"), pod("ns-01", "b"))
    handler.on_delete(DeletedFinalStateUnknown("ns-09/gone", None))
    assert handler.last_key == "ns-09/gone"
    after = handlers.handler_clock_ns()
    handler.stop()
    reported = stats(tmp_path)
    assert {k: reported[k] for k in ("initial_adds", "adds", "updates", "deletes")} == {
        "initial_adds": 1, "adds": 1, "updates": 2, "deletes": 1}  # fmt: skip
    assert before <= reported["last_update_ns"] <= after
    assert not list(tmp_path.glob("updates-*")), "no record per update: it has no stamp"


def test_it_reads_nothing_of_an_object_but_its_key(handlers: ModuleType, tmp_path: Path) -> None:
    handler = handlers.KeyOnly()
    handler.on_add(KeyPathOnly("ns-01", "a"), True)
    handler.on_add(KeyPathOnly("ns-01", "b"), False)
    handler.on_update(Untouchable(), KeyPathOnly("ns-03", "c"))  # old: never touched
    assert handler.last_key == "ns-03/c"
    handler.on_delete(KeyPathOnly("ns-04", "d"))
    assert handler.last_key == "ns-04/d"
    handler.stop()
    assert stats(tmp_path)["updates"] == 1


def test_the_peers_handler_reads_new_where_the_key_only_one_does_not(
    handlers: ModuleType,
) -> None:
    """The key-only row differs from the peers' handler's row by exactly that read."""
    handler = handlers.Trivial()
    try:
        with pytest.raises(AssertionError, match="the handler read"):
            handler.on_update(Untouchable(), KeyPathOnly("ns-03", "c"))
    finally:
        handler.stop()


def test_which_handlers_record_every_update(handlers: ModuleType) -> None:
    recording = {name: handlers.records_updates(f"bench_handlers:{name}")
                 for name in ("Trivial", "IoBound", "KeyOnly", "Null")}  # fmt: skip
    assert recording == {"Trivial": True, "IoBound": True, "KeyOnly": False, "Null": False}
    assert handlers.KeyOnly.threads == handlers.Trivial.threads == 1


def test_the_one_thread_a_handler_adds_is_what_the_bench_leaves_out(
    handlers: ModuleType,
) -> None:
    """The processor's thread count is judged without the bench handler's own threads."""
    before = threading.active_count()
    handler = handlers.KeyOnly()
    try:
        assert threading.active_count() - before == handlers.KeyOnly.threads
    finally:
        handler.stop()
