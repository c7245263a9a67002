"""The publish script (the source of truth, running in Redis) and
:func:`common.deltas.publish_is_skipped` (its Python statement) decide alike: random delta
sequences, with and without the replay rule and checkpoint moves (separately, as sub-batches
set them), outgoing halves of moves included, through the real Lua on a real redis-server and
through the Python rules, must publish the same deltas and leave the same known state,
checkpoint and pending moves."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.deltas import DeltaType, publish_is_skipped
from common.redis_layout import ShardKeys
from common.redis_layout.publish_scripts import parse_moving
from common.versions import compare_resource_versions, is_integer_version
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher, _Call

KEYS = ["ns/a", "ns/b", "ns/c"]
# Integers (some spelled with leading zeros), and opaque versions that compare only by equality.
versions = st.integers(0, 12).map(str) | st.sampled_from(["007", "7", "010", "x", "y", ""])
deltas = st.builds(
    lambda kind, key, rv: PendingDelta(kind, key, rv, f"{kind.value} {key} {rv}".encode()),
    st.sampled_from([DeltaType.ADDED, DeltaType.UPDATED, DeltaType.DELETED]),
    st.sampled_from(KEYS),
    versions,
)
Write = tuple[str, str, str]  # (script kind, key, rv)
# What the script is told to write: an upsert, a deletion, or the outgoing half of a move to
# shard 3 or 5 (a deletion that records itself as a pending move).
kinds = st.sampled_from(["U", "D", "O3", "O5"])
writes = st.tuples(kinds, st.sampled_from(KEYS), versions)
# One script call: a batch through publish() (its checkpoint; None: a relist chunk), or a
# sub-batch with the replay rule and the checkpoint move given separately ("": no move).
steps = st.lists(
    st.tuples(st.lists(deltas, max_size=6), st.none() | versions)
    | st.tuples(st.lists(writes, max_size=6), st.booleans(), st.just("") | versions),
    max_size=8,
)


def _is_int(rv: str | None) -> bool:
    return rv is not None and is_integer_version(rv)


class PythonShard:
    """One shard's known state, checkpoint and pending moves, moved by
    :func:`publish_is_skipped`."""

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}
        self.checkpoint: str | None = None
        self.moving: dict[str, tuple[int, str]] = {}

    def publish(self, batch: list[Write], replay: bool, checkpoint: str) -> list[bool]:
        if not batch:
            return []  # no script call: an empty batch touches no shard
        replay_below = self.checkpoint if replay else None
        published = []
        for kind, key, rv in batch:
            known = self.versions.get(key)
            delta_type = DeltaType.UPDATED if kind == "U" else DeltaType.DELETED
            skip = publish_is_skipped(delta_type, rv, known, replay_below=replay_below)
            published.append(not skip)
            if skip:
                continue
            if delta_type is DeltaType.DELETED:
                self.versions.pop(key, None)
                if kind.startswith("O"):
                    self.moving[key] = (int(kind[1:]), rv)
            else:
                self.versions[key] = rv
        if checkpoint and (
            not _is_int(self.checkpoint)
            or not _is_int(checkpoint)
            or compare_resource_versions(checkpoint, self.checkpoint or "") == 1
        ):
            self.checkpoint = checkpoint
        return published


@given(steps)
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
def test_the_lua_and_the_python_rules_publish_the_same_deltas(
    redis_client: redis.Redis,
    steps: list[tuple[list[PendingDelta], str | None] | tuple[list[Write], bool, str]],
) -> None:
    redis_client.flushall()
    lua = ShardPublisher(redis_client, prefix="rules", resource="pods", shard_count=1)
    python = PythonShard()
    for step in steps:
        if len(step) == 2:  # publish(): the replay rule and the checkpoint move go together
            batch, checkpoint_rv = step
            result = lua.publish(1, batch, checkpoint_rv=checkpoint_rv)
            by_lua = (
                [stream_id is not None for stream_id in result.shards[0].stream_ids]
                if batch
                else []
            )
            as_writes = [
                ("D" if d.type is DeltaType.DELETED else "U", d.key, d.resource_version)
                for d in batch
            ]
            expected = python.publish(as_writes, checkpoint_rv is not None, checkpoint_rv or "")
        else:
            writes, replay, checkpoint = step
            by_lua = []
            if writes:
                args: list[str | bytes] = ["1", "1" if replay else "0", checkpoint]
                for kind, key, rv in writes:
                    args += (kind, key, rv, f"{kind} {key} {rv}".encode())
                call = _Call(0, lua._publish_script, lua._publish_keys[0], args)
                by_lua = [bool(stream_id) for stream_id in lua._run([call])[0][1:]]
            expected = python.publish(writes, replay, checkpoint)
        assert by_lua == expected, step
    keys = ShardKeys("rules", "pods", 0)
    stored = {k.decode(): v.decode() for k, v in redis_client.hgetall(keys.versions).items()}
    assert stored == python.versions
    assert lua.read_checkpoints()[0].rv == python.checkpoint
    moving = {}
    for key, value in redis_client.hgetall(keys.moving).items():
        parsed = parse_moving(value.decode())
        assert parsed is not None, value
        moving[key.decode()] = (parsed[0], parsed[2])
    assert moving == python.moving
