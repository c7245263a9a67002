"""Reference 4.1: object keys."""

from __future__ import annotations

import pytest

from common.object_keys import (
    DeletedFinalStateUnknown,
    InvalidKeyError,
    deletion_handling_meta_namespace_key,
    meta_namespace_key,
    split_meta_namespace_key,
)


def pod(name: str, namespace: str | None = "default") -> dict[str, object]:
    metadata: dict[str, object] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"metadata": metadata}


def test_4_1_namespaced_key_is_namespace_slash_name() -> None:
    assert meta_namespace_key(pod("web-1", "shop")) == "shop/web-1"


@pytest.mark.parametrize("namespace", [None, ""])
def test_4_1_cluster_scoped_key_is_the_name(namespace: str | None) -> None:
    assert meta_namespace_key(pod("node-7", namespace)) == "node-7"


def test_4_1_deletion_handling_key_returns_the_tombstones_key() -> None:
    tombstone = DeletedFinalStateUnknown("shop/web-1", None)
    assert deletion_handling_meta_namespace_key(tombstone) == "shop/web-1"
    assert deletion_handling_meta_namespace_key(pod("a", "b")) == "b/a"


@pytest.mark.parametrize(
    ("key", "expected"),
    [("web-1", ("", "web-1")), ("shop/web-1", ("shop", "web-1")), ("/x", ("", "x"))],
)
def test_4_1_split_key(key: str, expected: tuple[str, str]) -> None:
    assert split_meta_namespace_key(key) == expected


def test_4_1_split_key_with_more_than_two_parts_is_an_error() -> None:
    with pytest.raises(InvalidKeyError, match="unexpected key format"):
        split_meta_namespace_key("a/b/c")


@pytest.mark.parametrize(
    "bad",
    [{}, {"metadata": {}}, {"metadata": {"name": ""}}, {"metadata": {"name": 3}},
     {"metadata": {"name": "x", "namespace": 5}}, {"metadata": None}],
)  # fmt: skip
def test_4_1_objects_without_a_usable_name_are_rejected_clearly(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidKeyError, match=r"metadata\."):
        meta_namespace_key(bad)


def test_tombstone_is_a_value_with_key_and_possibly_no_object() -> None:
    assert DeletedFinalStateUnknown("k", None) == DeletedFinalStateUnknown("k", None)
    assert DeletedFinalStateUnknown("k", None).obj is None
    with pytest.raises(AttributeError):
        DeletedFinalStateUnknown("k", None).key = "other"  # type: ignore[misc]
