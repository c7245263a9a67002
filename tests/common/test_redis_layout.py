"""Key names parse back into the keys that spell them (``common.redis_layout.key_names``), and
nothing else parses: ``status`` and ``subscribe`` find shards by scanning the keyspace."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.redis_layout import (
    GroupKeys,
    GroupShardKeys,
    ResourceKeys,
    ShardKeys,
    parse_group_key,
    parse_resource_key,
    parse_shard_key,
)

_NAMES = st.text(
    st.characters(codec="utf-8", exclude_characters="{}", exclude_categories=("Z", "C")),
    min_size=1,
    max_size=20,
)


@given(prefix=_NAMES, resource=_NAMES, shard=st.integers(0, 10**6))
def test_every_shard_key_parses_back_to_its_shard(prefix: str, resource: str, shard: int) -> None:
    keys = ShardKeys(prefix, resource, shard)
    for name in keys.all_keys():
        assert parse_shard_key(prefix, name) == keys
        assert parse_resource_key(prefix, name) is None
        assert parse_group_key(prefix, name) is None


@given(prefix=_NAMES, resource=_NAMES)
def test_every_resource_key_parses_back_to_its_resource(prefix: str, resource: str) -> None:
    keys = ResourceKeys(prefix, resource)
    for name in keys.all_keys():
        assert parse_resource_key(prefix, name) == keys
        assert parse_shard_key(prefix, name) is None
        assert parse_group_key(prefix, name) is None


_GROUPS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", fullmatch=True)


@given(prefix=_NAMES, resource=_NAMES, shard=st.integers(0, 10**6), group=_GROUPS)
def test_every_group_key_parses_back_to_its_group(
    prefix: str, resource: str, shard: int, group: str
) -> None:
    shard_keys = GroupShardKeys(ShardKeys(prefix, resource, shard), group)
    for name in shard_keys.all_keys():
        assert parse_group_key(prefix, name) == shard_keys
        assert parse_shard_key(prefix, name) is None
    group_keys = GroupKeys(ResourceKeys(prefix, resource), group)
    for name in group_keys.all_keys():
        assert parse_group_key(prefix, name) == group_keys
        assert parse_resource_key(prefix, name) is None


@pytest.mark.parametrize(
    "name",
    [
        "ib:{pods:3}:group:processors:lease",  # the default group is spelled without a name
        "ib:{pods:3}:group::lease",
        "ib:{pods:3}:group:a b:lease",
        "ib:{pods:3}:group:audit:nope",
        "ib:{pods:3}:group:audit",
        "ib:{pods}:group:audit:lease",  # a shard key without a shard
        "ib:{pods}:deltas",
    ],
)
def test_other_names_are_no_group_key(name: str) -> None:
    assert parse_group_key("ib", name) is None


def test_a_resource_may_contain_colons_the_shard_is_after_the_last() -> None:
    assert parse_shard_key("ib", "ib:{a:b:3}:deltas") == ShardKeys("ib", "a:b", 3)


@pytest.mark.parametrize(
    "name",
    [
        "ib:{pods:3}:nope",  # unknown suffix
        "ib:{pods:03}:deltas",  # not how ShardKeys spells 3
        "ib:{pods:-1}:deltas",
        "ib:{pods:x}:deltas",
        "ib:{pods}:deltas",  # no shard number
        "ib:{:3}:deltas",  # no resource
        "ib:{po ds:3}:deltas",  # a name ShardKeys refuses
        "other:{pods:3}:deltas",  # another prefix
        "ib:pods:3:deltas",  # no hash tag
        "ib:{pods:3}deltas",
    ],
)
def test_other_names_are_no_shard_key(name: str) -> None:
    assert parse_shard_key("ib", name) is None


@pytest.mark.parametrize("name", ["ib:{pods}:nope", "ib:{}:leader", "x:{pods}:leader"])
def test_other_names_are_no_resource_key(name: str) -> None:
    assert parse_resource_key("ib", name) is None
