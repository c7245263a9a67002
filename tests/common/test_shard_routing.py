"""What an object is sharded by (``common.shard_routing``), and the resource spec's ``shardKey``."""

from __future__ import annotations

from typing import Any

import pytest

from common.object_keys import Obj
from common.resource_ids import ResourceSpec
from common.shard_routing import ShardKey, ShardKeyChoice, controller_reference, owner_key
from common.sharding import shard_for


def child(
    *, namespace: str | None = "shop", labels: dict[str, Any] | None = None, refs: object = None
) -> Obj:
    metadata: dict[str, Any] = {"name": "w1-config"}
    if namespace:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = labels
    if refs is not None:
        metadata["ownerReferences"] = refs
    return {"metadata": metadata}


def ref(name: str = "w1", *, controller: object = True) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "name": name, "uid": "u1",
            "controller": controller}  # fmt: skip


@pytest.mark.parametrize("text", ["key", "namespace", "owner", "label:app", "label:a.b/c-d"])
def test_every_choice_parses_and_spells_itself_back(text: str) -> None:
    assert str(ShardKeyChoice.parse(text)) == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "unknown shard key ''"),
        ("uid", "unknown shard key 'uid': expected key, namespace, owner or label:NAME"),
        ("Owner", "unknown shard key"),
        ("label", "unknown shard key"),
        ("label:", "'' is not a label name"),
        ("label:-x", "'-x' is not a label name"),
        ("label:a b", "is not a label name"),
    ],
)
def test_an_unknown_choice_is_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        ShardKeyChoice.parse(text)
    assert why in str(caught.value)
    assert "\n" not in str(caught.value)


def test_by_key_is_the_objects_own_key() -> None:
    assert ShardKeyChoice().shard_key(child(), "shop/w1-config") == ShardKey("shop/w1-config", None)


def test_by_namespace_is_the_namespace_and_a_cluster_scoped_object_its_own_key() -> None:
    choice = ShardKeyChoice.parse("namespace")
    assert choice.shard_key(child(), "shop/w1-config") == ShardKey("shop", None)
    assert choice.shard_key(child(namespace=None), "node-1") == ShardKey("node-1", None)


def test_by_owner_is_the_controlling_owners_key_in_the_childs_namespace() -> None:
    choice = ShardKeyChoice.parse("owner")
    refs = [ref("other", controller=False), ref("w1")]
    assert choice.shard_key(child(refs=refs), "shop/w1-config") == ShardKey("shop/w1", None)
    # The owner's key hashes to the owner's shard: that is the co-location.
    shard_key = choice.shard_key(child(refs=refs), "shop/w1-config").text
    assert shard_for(shard_key, 16) == shard_for("shop/w1", 16)


@pytest.mark.parametrize(
    "refs", [None, [], [ref(controller=False)], [ref(controller="true")], "junk", [{"name": ""}]]
)
def test_without_a_controlling_owner_an_object_is_sharded_by_its_own_key(refs: object) -> None:
    choice = ShardKeyChoice.parse("owner")
    assert choice.shard_key(child(refs=refs), "shop/w1-config") == ShardKey("shop/w1-config", None)


def test_by_label_is_the_value_and_a_missing_label_falls_back_to_the_key_and_says_so() -> None:
    choice = ShardKeyChoice.parse("label:team")
    assert choice.shard_key(child(labels={"team": "a"}), "shop/x") == ShardKey("a", None)
    for labels in (None, {}, {"other": "a"}, {"team": 3}):
        assert choice.shard_key(child(labels=labels), "shop/x") == ShardKey(
            "shop/x", "label_missing"
        )


def test_a_key_names_its_shard_only_when_the_choice_reads_the_key() -> None:
    assert ShardKeyChoice().shard_of_key("shop/a", 8) == shard_for("shop/a", 8)
    assert ShardKeyChoice.parse("namespace").shard_of_key("shop/a", 8) == shard_for("shop", 8)
    assert ShardKeyChoice.parse("namespace").shard_of_key("node-1", 8) == shard_for("node-1", 8)
    for text in ("owner", "label:app"):
        choice = ShardKeyChoice.parse(text)
        assert choice.shard_of_key("shop/a", 8) is None
        assert not choice.key_names_shard
        assert not choice.by_object_key


def test_controller_reference_and_owner_key() -> None:
    assert controller_reference(child(refs=[ref("w2")])) == ref("w2")
    assert controller_reference({"metadata": "junk"}) is None
    assert owner_key("shop/c", ref("w2")) == "shop/w2"
    assert owner_key("shop/c", ref("node-1"), owner_namespaced=False) == "node-1"
    assert owner_key("cluster-thing", ref("w2")) == "w2"


def test_a_resource_spec_carries_its_shard_key() -> None:
    spec = ResourceSpec.parse("configmaps?shardKey=owner")
    assert spec.shard_key == ShardKeyChoice("owner")
    assert spec.resource_id == "configmaps"  # the keys do not change with the choice
    assert str(spec) == "configmaps?shardKey=owner"
    assert ResourceSpec.parse("pods").shard_key.by_object_key
    assert str(ResourceSpec.parse("pods?shardKey=key")) == "pods"


def test_a_resource_spec_with_an_unknown_shard_key_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError) as caught:
        ResourceSpec.parse("configmaps?shardKey=uid")
    message = str(caught.value)
    assert "unknown shard key 'uid': expected key, namespace, owner or label:NAME" in message
    assert "\n" not in message
