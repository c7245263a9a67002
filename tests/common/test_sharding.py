from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from hashlib import blake2b

import pytest
from redis.crc import key_slot

from common.redis_layout import DEFAULT_PREFIX, ResourceKeys, ShardKeys
from common.sharding import shard_for, shard_ranges
from tests.support.paths import ROOT

# Pinned answers: if any changes, every object in every deployed stream moves to another shard.
# Change them only together with a documented re-sharding migration.
KNOWN_SHARDS = {
    # key: (shard of 7, shard of 16, shard of 256)
    "ns-3/pod-12345": (2, 8, 120),
    "default/web-0": (0, 12, 92),
    "kube-system/coredns-7d9f8c6b5-x2x9k": (6, 12, 108),
    "node-17": (4, 10, 74),
    "": (5, 4, 228),
}


def realistic_keys(count: int = 100_000) -> list[str]:
    """Namespaced Pods spread over 40 namespaces, plus 10 % cluster-scoped nodes."""
    nodes = count // 10
    pods = [f"ns-{i % 40}/pod-{i}" for i in range(count - nodes)]
    return pods + [f"node-{i}" for i in range(nodes)]


@pytest.mark.parametrize(("key", "expected"), KNOWN_SHARDS.items())
def test_known_keys_keep_their_shards(key: str, expected: tuple[int, int, int]) -> None:
    assert (shard_for(key, 7), shard_for(key, 16), shard_for(key, 256)) == expected


def test_non_ascii_keys_hash_their_utf8_bytes() -> None:
    digest = blake2b("ns/ünïcode".encode(), digest_size=8).digest()
    assert shard_for("ns/ünïcode", 16) == int.from_bytes(digest, "little") % 16 == 4


def test_one_shard_takes_everything() -> None:
    assert {shard_for(key, 1) for key in realistic_keys(1000)} == {0}


def test_same_shards_in_processes_with_different_hash_seeds() -> None:
    keys = realistic_keys(2000)
    script = (
        "import json, sys\n"
        "from common.sharding import shard_for\n"
        "keys = json.load(sys.stdin)\n"
        "print(json.dumps({'hash': hash(keys[0]), 'shards': [shard_for(k, 16) for k in keys]}))\n"
    )
    results = []
    for seed in ("0", "4242"):
        completed = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(keys),
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        results.append(json.loads(completed.stdout))
    # The seeds really differ (the built-in hash would disagree)...
    assert results[0]["hash"] != results[1]["hash"]
    # ...and shard_for does not care.
    expected = [shard_for(key, 16) for key in keys]
    assert results[0]["shards"] == expected
    assert results[1]["shards"] == expected


@pytest.mark.parametrize("shard_count", [16, 7])
def test_realistic_keys_spread_evenly(shard_count: int) -> None:
    keys = realistic_keys()
    counts = Counter(shard_for(key, shard_count) for key in keys)
    expected = len(keys) / shard_count
    assert set(counts) == set(range(shard_count))
    worst = max(abs(n - expected) / expected for n in counts.values())
    assert worst <= 0.05, f"max deviation {worst:.2%} over {shard_count} shards"


def test_shard_keys_layout() -> None:
    keys = ShardKeys(DEFAULT_PREFIX, "pods", 7)
    assert keys.hash_tag == "{pods:7}"
    assert keys.stream == "ib:{pods:7}:deltas"
    assert keys.versions == "ib:{pods:7}:versions"
    assert keys.objects == "ib:{pods:7}:objects"
    assert keys.checkpoint == "ib:{pods:7}:checkpoint"
    assert keys.moving == "ib:{pods:7}:moving"
    assert keys.all_keys() == (
        keys.stream,
        keys.versions,
        keys.objects,
        keys.checkpoint,
        keys.moving,
    )


def test_the_default_group_keeps_the_key_names_it_had_before_groups() -> None:
    keys = ShardKeys(DEFAULT_PREFIX, "pods", 7).for_group()
    assert keys.group == "processors"
    assert keys.lease == "ib:{pods:7}:lease"
    assert keys.lease_epoch == "ib:{pods:7}:lease_epoch"
    assert keys.dead_letters == "ib:{pods:7}:dead"
    assert keys.initial_list == "ib:{pods:7}:initial_list"
    assert keys.expectations == "ib:{pods:7}:expectations"
    assert keys.held == "ib:{pods:7}:held"
    assert keys.all_keys() == (
        keys.lease,
        keys.lease_epoch,
        keys.dead_letters,
        keys.initial_list,
        keys.expectations,
        keys.held,
    )
    assert keys.lease_epoch not in keys.removable_keys()  # epochs never go backwards
    assert ResourceKeys(DEFAULT_PREFIX, "pods").group().members == "ib:{pods}:members"


def test_other_groups_keys_carry_their_name_under_the_shards_tag() -> None:
    keys = ShardKeys(DEFAULT_PREFIX, "pods", 7).for_group("audit")
    assert keys.stream == "ib:{pods:7}:deltas"  # the stream and known state are shared
    assert keys.objects == "ib:{pods:7}:objects"
    assert keys.lease == "ib:{pods:7}:group:audit:lease"
    assert keys.lease_epoch == "ib:{pods:7}:group:audit:lease_epoch"
    assert keys.dead_letters == "ib:{pods:7}:group:audit:dead"
    group = ResourceKeys(DEFAULT_PREFIX, "pods").group("audit")
    assert group.members == "ib:{pods}:group:audit:members"
    assert group.shard(7) == keys


@pytest.mark.parametrize("name", ["", "a:b", "{x}", "a b", "-x", "x" * 64, "é"])
def test_a_group_name_that_would_break_a_key_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="group name"):
        ShardKeys(DEFAULT_PREFIX, "pods", 0).for_group(name)
    with pytest.raises(ValueError, match="group name"):
        ResourceKeys(DEFAULT_PREFIX, "pods").group(name)


def test_resource_keys_layout() -> None:
    keys = ResourceKeys(DEFAULT_PREFIX, "deployments.apps")
    assert keys.hash_tag == "{deployments.apps}"
    assert keys.leader == "ib:{deployments.apps}:leader"
    assert keys.epoch == "ib:{deployments.apps}:epoch"
    assert keys.layout == "ib:{deployments.apps}:layout"
    assert keys.all_keys() == (keys.leader, keys.epoch, keys.layout)
    assert keys.shard(3) == ShardKeys("ib", "deployments.apps", 3)
    # One slot for the lease and the epoch, so one script can take both.
    assert len({key_slot(key.encode()) for key in keys.all_keys()}) == 1
    assert {_cluster_hash_tag(key) for key in keys.all_keys()} == {"deployments.apps"}


def _cluster_hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the content of the first ``{...}``, if non-empty."""
    match = re.search(r"\{([^}]*)\}", key)
    assert match is not None and match.group(1), f"{key} has no hash tag"
    return match.group(1)


@pytest.mark.parametrize("resource", ["pods", "deployments.apps", "apps/v1:replicasets"])
def test_keys_of_a_shard_share_one_slot_and_shards_differ(resource: str) -> None:
    tags = set()
    for shard in range(32):
        keys = ShardKeys("ib", resource, shard)
        # A group's keys are in the shard's slot too: its fenced scripts span both.
        names = [*keys.all_keys(), *keys.for_group().all_keys(), *keys.for_group("b").all_keys()]
        shard_tags = {_cluster_hash_tag(key) for key in names}
        assert shard_tags == {keys.hash_tag.strip("{}")}
        assert len({key_slot(key.encode()) for key in names}) == 1
        assert len(set(names)) == 17
        tags |= shard_tags
    assert len(tags) == 32


def test_for_key_uses_shard_for() -> None:
    keys = ShardKeys.for_key("ib", "pods", "ns-3/pod-12345", 16)
    assert keys == ShardKeys("ib", "pods", shard_for("ns-3/pod-12345", 16))


@pytest.mark.parametrize("shard_count", [0, -1, 1.5, "16", True, None])
def test_shard_count_must_be_a_positive_int(shard_count: object) -> None:
    with pytest.raises(ValueError, match="shard_count must be an integer >= 1"):
        shard_for("ns/a", shard_count)  # type: ignore[arg-type]


@pytest.mark.parametrize("resource", ["", "po ds", "pods\n", "a{b", "a}b", "{pods}", "\tpods"])
def test_resource_names_that_would_break_the_hash_tag_are_rejected(resource: str) -> None:
    with pytest.raises(ValueError, match="resource must be a non-empty string without braces"):
        ShardKeys("ib", resource, 0)
    with pytest.raises(ValueError, match="resource must be a non-empty string without braces"):
        ResourceKeys("ib", resource)


@pytest.mark.parametrize("prefix", ["", "i{b", "ib}", "i b"])
def test_bad_prefixes_are_rejected(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix must be a non-empty string"):
        ShardKeys(prefix, "pods", 0)
    with pytest.raises(ValueError, match="prefix must be a non-empty string"):
        ResourceKeys(prefix, "pods")


@pytest.mark.parametrize("shard", [-1, 1.0, True, "3"])
def test_shard_must_be_a_non_negative_int(shard: object) -> None:
    with pytest.raises(ValueError, match="shard must be an integer >= 0"):
        ShardKeys("ib", "pods", shard)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("shards", "text"),
    [([], ""), ([3], "3"), ([0, 1, 2, 3], "0-3"), ([7, 0, 1, 2, 3, 9, 10, 9], "0-3,7,9-10")],
)
def test_shard_ranges_are_short_enough_for_one_line(shards: list[int], text: str) -> None:
    assert shard_ranges(shards) == text
