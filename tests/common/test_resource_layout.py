"""A resource's layout (``common.publication.ResourceLayout``): recorded by the reflector, read
by everyone with the publication, against a real redis-server."""

from __future__ import annotations

import pytest
import redis

from common.publication import ResourceLayout, read_publication, write_layout
from common.redis_layout import ResourceKeys
from common.shard_routing import ShardKeyChoice

LAYOUT = ResourceLayout(
    shard_count=8,
    shard_key=ShardKeyChoice.parse("owner"),
    kind="ConfigMap",
    api_version="v1",
    namespaced=True,
)


def test_a_recorded_layout_is_read_back_with_the_publication(redis_client: redis.Redis) -> None:
    assert (
        read_publication(redis_client, prefix="ib", resource="configmaps", shard_count=8).layout
        is None
    )
    write_layout(redis_client, prefix="ib", resource="configmaps", layout=LAYOUT)
    publication = read_publication(redis_client, prefix="ib", resource="configmaps", shard_count=8)
    assert publication.layout == LAYOUT
    assert not publication.complete  # a layout is no list
    # ... and the resource joins the list of those published (hints at mistyped resources).
    assert redis_client.hgetall("ib:resources") == {b"configmaps": b"v1"}


def test_the_api_group_comes_from_the_api_version() -> None:
    assert LAYOUT.group == ""
    widgets = ResourceLayout(8, ShardKeyChoice(), "Widget", "example.com/v1", True)
    assert widgets.group == "example.com"
    assert ResourceLayout.from_fields(widgets.to_fields()) == widgets


def test_an_unusable_layout_is_refused_in_one_line(redis_client: redis.Redis) -> None:
    key = ResourceKeys("ib", "configmaps").layout
    redis_client.hset(key, mapping={**LAYOUT.to_fields(), "shard_key": "uid"})
    with pytest.raises(ValueError, match=r"unusable resource layout .* unknown shard key 'uid'"):
        read_publication(redis_client, prefix="ib", resource="configmaps", shard_count=8)
    redis_client.hdel(key, "kind")
    with pytest.raises(ValueError, match="unusable resource layout"):
        ResourceLayout.from_fields(redis_client.hgetall(key))
