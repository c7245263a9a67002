"""The publish script (the source of truth, running in Redis) and
:func:`common.deltas.publish_is_skipped` (its Python statement) decide alike: random delta
sequences, with and without checkpoint moves, through the real Lua on a real redis-server and
through the Python rules, must publish the same deltas and leave the same known state."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.deltas import DeltaType, compare_resource_versions, publish_is_skipped
from common.redis_layout import ShardKeys
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher

KEYS = ["ns/a", "ns/b", "ns/c"]
# Integers (some spelled with leading zeros), and opaque versions that compare only by equality.
versions = st.integers(0, 12).map(str) | st.sampled_from(["007", "7", "010", "x", "y", ""])
deltas = st.builds(
    lambda kind, key, rv: PendingDelta(kind, key, rv, f"{kind.value} {key} {rv}".encode()),
    st.sampled_from([DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED]),
    st.sampled_from(KEYS),
    versions,
)
# A batch, and the checkpoint it moves the shard to (None: a relist chunk, no checkpoint).
batches = st.lists(st.tuples(st.lists(deltas, max_size=6), st.none() | versions), max_size=8)


def _is_int(rv: str | None) -> bool:
    return rv is not None and rv.isascii() and rv.isdigit()


class PythonShard:
    """One shard's known state and checkpoint, moved by :func:`publish_is_skipped`."""

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}
        self.checkpoint: str | None = None

    def publish(self, batch: list[PendingDelta], checkpoint_rv: str | None) -> list[bool]:
        if not batch:
            return []  # no script call: an empty batch touches no shard
        replay_below = self.checkpoint if checkpoint_rv is not None else None
        published = []
        for delta in batch:
            known = self.versions.get(delta.key)
            skip = publish_is_skipped(
                delta.type, delta.resource_version, known, replay_below=replay_below
            )
            published.append(not skip)
            if skip:
                continue
            if delta.type is DeltaType.DELETED:
                self.versions.pop(delta.key, None)
            else:
                self.versions[delta.key] = delta.resource_version
        if checkpoint_rv is not None and (
            not _is_int(self.checkpoint)
            or not _is_int(checkpoint_rv)
            or compare_resource_versions(checkpoint_rv, self.checkpoint or "") == 1
        ):
            self.checkpoint = checkpoint_rv
        return published


@given(batches)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_the_lua_and_the_python_rules_publish_the_same_deltas(
    redis_client: redis.Redis, steps: list[tuple[list[PendingDelta], str | None]]
) -> None:
    redis_client.flushall()
    lua = ShardPublisher(redis_client, prefix="rules", resource="pods", shard_count=1)
    python = PythonShard()
    for batch, checkpoint_rv in steps:
        result = lua.publish(1, batch, checkpoint_rv=checkpoint_rv)
        by_lua = (
            [stream_id is not None for stream_id in result.shards[0].stream_ids] if batch else []
        )
        assert by_lua == python.publish(batch, checkpoint_rv), (batch, checkpoint_rv)
    keys = ShardKeys("rules", "pods", 0)
    stored = {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.versions).items()}
    assert stored == python.versions
    assert lua.read_checkpoints()[0].rv == python.checkpoint
