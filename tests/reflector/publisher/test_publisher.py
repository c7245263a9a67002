from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis
from redis.crc import key_slot

from common.deltas import DeltaType
from common.redis_layout import ShardKeys
from common.sharding import shard_for
from common.wire import FIELD, decode_envelope
from reflector_svc.publish_records import FencedError, PendingDelta, PublishResult, ResumePoint
from reflector_svc.publisher import ShardCheckpoint, ShardPublisher, _Call
from tests.reflector.publisher.support import (
    Entry,
    added,
    as_entry,
    deleted,
    delta,
    hash_tag,
    stream_entries,
    updated,
)

SHARDS = 4
KEYS = [f"ns-{i % 3}/pod-{i}" for i in range(24)]


def make(client: redis.Redis, shard_count: int = SHARDS) -> ShardPublisher:
    return ShardPublisher(client, prefix="ib", resource="pods", shard_count=shard_count)


def by_shard(deltas: Sequence[PendingDelta], shard_count: int = SHARDS) -> dict[int, list[Entry]]:
    result: dict[int, list[Entry]] = {shard: [] for shard in range(shard_count)}
    for pending in deltas:
        result[shard_for(pending.key, shard_count)].append(as_entry(pending))
    return result


def all_streams(client: redis.Redis, publisher: ShardPublisher) -> dict[int, list[Entry]]:
    return {keys.shard: stream_entries(client, keys) for keys in publisher.shards}


def first_batch() -> list[PendingDelta]:
    return [added(key, str(100 + i)) for i, key in enumerate(KEYS)]


def test_keys_spread_over_all_shards() -> None:
    # The tests below rely on every shard being touched by first_batch().
    assert {shard_for(key, SHARDS) for key in KEYS} == set(range(SHARDS))


def test_each_script_call_declares_only_keys_of_its_shard(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    publisher = make(redis_client)
    seen: list[_Call] = []
    execute = publisher._execute

    def recording(calls: Sequence[_Call]) -> list[object]:
        seen.extend(calls)
        return execute(calls)

    monkeypatch.setattr(publisher, "_execute", recording)
    publisher.fence(1)
    publisher.publish(1, first_batch(), checkpoint_rv="123")
    publisher.advance_checkpoints(1, "130")
    publisher.begin_relist(1)
    publisher.finish_relist(1, "140")
    # Five operations on every shard (a fresh server adds one NOSCRIPT re-run per script).
    assert (
        len({(call.shard, call.args[1] if len(call.keys) == 2 else "publish") for call in seen})
        == 5 * SHARDS
    )
    for call in seen:
        keys = ShardKeys("ib", "pods", call.shard)
        assert {hash_tag(key) for key in call.keys} == {f"pods:{call.shard}"}
        assert len({key_slot(key.encode()) for key in call.keys}) == 1
        assert set(call.keys) <= set(keys.all_keys())
    publish_calls = [call for call in seen if len(call.keys) == 5]
    assert {call.keys for call in publish_calls} == {
        (k.stream, k.versions, k.objects, k.checkpoint, k.moving) for k in publisher.shards
    }


def test_publish_keeps_order_within_each_shard_and_records_the_known_state(
    redis_client: redis.Redis,
) -> None:
    publisher = make(redis_client)
    batch = first_batch() + [updated(key, str(200 + i)) for i, key in enumerate(KEYS[:10])]
    batch += [deleted(KEYS[0], "300"), added(KEYS[0], "301"), updated(KEYS[1], "302")]
    result = publisher.publish(1, batch, checkpoint_rv="302")

    assert isinstance(result, PublishResult)
    assert (result.published, result.skipped) == (len(batch), 0)
    assert result.published_by_type == {
        DeltaType.ADDED: len(KEYS) + 1,
        DeltaType.UPDATED: 11,
        DeltaType.DELETED: 1,
    }
    assert all_streams(redis_client, publisher) == by_shard(batch)
    # The result's stream IDs are the stream's, in the same order.
    for shard, shard_result in result.shards.items():
        ids = [
            entry_id.decode() for entry_id, _ in redis_client.xrange(publisher.shards[shard].stream)
        ]
        assert list(shard_result.stream_ids) == ids

    expected_versions = {key: str(100 + i) for i, key in enumerate(KEYS)}
    expected_versions |= {key: str(200 + i) for i, key in enumerate(KEYS[:10])}
    expected_versions |= {KEYS[0]: "301", KEYS[1]: "302"}
    assert publisher.known_versions() == expected_versions
    last = publisher.last_objects([KEYS[0], KEYS[1], KEYS[20], "ns-9/unknown"])
    assert set(last) == {KEYS[0], KEYS[1], KEYS[20]}
    assert decode_envelope(last[KEYS[0]]).resource_version == "301"
    assert decode_envelope(last[KEYS[0]]).type is DeltaType.ADDED
    assert decode_envelope(last[KEYS[20]]).resource_version == "120"
    assert publisher.last_objects([]) == {}


def test_republishing_a_batch_publishes_nothing(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    batch = [*first_batch(), deleted(KEYS[3], "200"), updated(KEYS[4], "201")]
    publisher.publish(1, batch, checkpoint_rv="201")
    before = all_streams(redis_client, publisher)
    again = publisher.publish(1, batch, checkpoint_rv="201")
    assert (again.published, again.skipped) == (0, len(batch))
    assert all(
        stream_id is None for result in again.shards.values() for stream_id in result.stream_ids
    )
    # Without a checkpoint only the per-key rules apply: upserts of known versions are skipped.
    upserts = [d for d in batch if d.key != KEYS[3]]
    assert publisher.publish(1, upserts, checkpoint_rv=None).published == 0
    assert all_streams(redis_client, publisher) == before


def test_per_key_rules_without_a_checkpoint(redis_client: redis.Redis) -> None:
    """Relist chunks (checkpoint_rv=None) rely on the per-key rules alone."""
    publisher = make(redis_client)
    key, other = KEYS[0], KEYS[1]
    publisher.publish(1, [added(key, "50"), added(other, "60")], checkpoint_rv=None)
    result = publisher.publish(
        1,
        [
            updated(key, "49"),  # older: skipped
            updated(key, "50"),  # same: skipped
            deleted("ns-0/never-seen", "70"),  # unknown key: skipped
            deleted(other, "59"),  # older than what the shard knows: a stale deletion
            updated(key, "51"),  # newer: published
            delta(DeltaType.DELETED, other, "60", tombstone=True),  # tombstone at the known RV
            deleted(other, "61"),  # now unknown: skipped
        ],
        checkpoint_rv=None,
    )
    assert result.published == 2
    assert result.skipped == 5
    shard_key = shard_for(key, SHARDS)
    shard_other = shard_for(other, SHARDS)
    entries = stream_entries(redis_client, publisher.shards[shard_key])
    assert ("Updated", key, "51") in entries
    assert ("Updated", key, "49") not in entries
    other_entries = stream_entries(redis_client, publisher.shards[shard_other])
    assert other_entries.count(("Deleted", other, "60")) == 1
    tombstone = decode_envelope(
        redis_client.xrange(publisher.shards[shard_other].stream)[-1][1][FIELD]
    )
    assert tombstone.tombstone and tombstone.obj is not None
    assert publisher.known_versions() == {key: "51"}
    assert publisher.last_objects([other]) == {}
    assert redis_client.hexists(publisher.shards[shard_other].objects, other) == 0


def test_numeric_versions_compare_as_integers_exactly(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    key = KEYS[0]
    big = str(2**63 - 5)  # beyond a double's exact integers
    publisher.publish(1, [added(key, "9")], checkpoint_rv=None)
    assert publisher.publish(1, [updated(key, "10")], checkpoint_rv=None).published == 1
    assert publisher.publish(1, [updated(key, "010")], checkpoint_rv=None).published == 0
    assert publisher.publish(1, [updated(key, big)], checkpoint_rv=None).published == 1
    assert publisher.publish(1, [updated(key, str(2**63 - 6))], checkpoint_rv=None).published == 0
    assert publisher.publish(1, [updated(key, str(2**63 - 4))], checkpoint_rv=None).published == 1


def test_non_numeric_versions_fall_back_to_equality(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    key = KEYS[0]
    publisher.publish(1, [added(key, "abc")], checkpoint_rv=None)
    assert publisher.publish(1, [updated(key, "abc")], checkpoint_rv=None).published == 0
    assert publisher.publish(1, [updated(key, "abd")], checkpoint_rv=None).published == 1
    assert publisher.publish(1, [updated(key, "7")], checkpoint_rv=None).published == 1
    assert publisher.publish(1, [deleted(key, "x")], checkpoint_rv=None).published == 1


def test_checkpoints_move_with_touched_shards_and_never_back(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    only = KEYS[0]
    touched = shard_for(only, SHARDS)
    publisher.publish(1, [added(only, "10")], checkpoint_rv="12")
    checkpoints = publisher.read_checkpoints()
    assert checkpoints[touched] == ShardCheckpoint(
        rv="12", fence=1, synced_rv=None, relisting=False
    )
    assert all(cp.rv is None for shard, cp in enumerate(checkpoints) if shard != touched)

    publisher.publish(1, [updated(only, "11")], checkpoint_rv="11")  # skipped, rv stays 12
    assert publisher.read_checkpoints()[touched].rv == "12"
    publisher.advance_checkpoints(1, "20")
    assert [cp.rv for cp in publisher.read_checkpoints()] == ["20"] * SHARDS
    publisher.advance_checkpoints(1, "15")
    assert [cp.rv for cp in publisher.read_checkpoints()] == ["20"] * SHARDS
    publisher.publish(1, [], checkpoint_rv="30")  # nothing touched, nothing moves
    assert [cp.rv for cp in publisher.read_checkpoints()] == ["20"] * SHARDS


def test_checkpoint_rule_skips_replays_the_per_key_rule_would_repeat(
    redis_client: redis.Redis,
) -> None:
    """A replayed create+delete finds the key unknown; only the checkpoint says "seen"."""
    publisher = make(redis_client)
    key = KEYS[0]
    batch = [added(key, "10"), deleted(key, "11")]
    assert publisher.publish(1, batch, checkpoint_rv="11").published == 2
    again = publisher.publish(1, batch, checkpoint_rv="11")
    assert again.published == 0
    assert stream_entries(redis_client, publisher.shards[shard_for(key, SHARDS)]) == [
        ("Added", key, "10"),
        ("Deleted", key, "11"),
    ]
    # A later re-creation of the same key is new.
    assert publisher.publish(1, [added(key, "12")], checkpoint_rv="12").published == 1


def test_a_lower_epoch_is_fenced_and_writes_nothing(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    publisher.fence(3)
    assert [cp.fence for cp in publisher.read_checkpoints()] == [3] * SHARDS
    publisher.publish(3, first_batch(), checkpoint_rv="123")
    before = {keys.shard: _dump_shard(redis_client, keys) for keys in publisher.shards}

    with pytest.raises(FencedError) as info:
        publisher.publish(2, [updated(key, "500") for key in KEYS], checkpoint_rv="500")
    assert (info.value.epoch, info.value.fence, info.value.shard) == (2, 3, 0)
    for operation in (
        lambda: publisher.fence(2),
        lambda: publisher.advance_checkpoints(2, "600"),
        lambda: publisher.begin_relist(2),
        lambda: publisher.finish_relist(2, "600"),
    ):
        with pytest.raises(FencedError):
            operation()
    assert {keys.shard: _dump_shard(redis_client, keys) for keys in publisher.shards} == before


def test_a_higher_epoch_raises_the_fence(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    publisher.fence(1)
    publisher.fence(1)  # the same epoch again is fine
    key = KEYS[0]
    touched = shard_for(key, SHARDS)
    publisher.publish(4, [added(key, "10")], checkpoint_rv="10")  # a write raises it too
    fences = [cp.fence for cp in publisher.read_checkpoints()]
    assert fences[touched] == 4
    assert all(fence == 1 for shard, fence in enumerate(fences) if shard != touched)
    with pytest.raises(FencedError) as info:
        publisher.fence(3)
    assert info.value.shard == touched
    # Shards whose fence was lower took epoch 3: harmless, the fence only ever grows.
    publisher.fence(5)
    assert [cp.fence for cp in publisher.read_checkpoints()] == [5] * SHARDS
    with pytest.raises(FencedError):
        publisher.publish(4, [updated(key, "11")], checkpoint_rv="11")


def test_only_the_fenced_shard_refuses_a_batch(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    publisher.fence(1)
    fenced_shard = 2
    redis_client.hset(publisher.shards[fenced_shard].checkpoint, "fence", "9")
    batch = first_batch()
    with pytest.raises(FencedError) as info:
        publisher.publish(1, batch, checkpoint_rv="123")
    assert info.value.shard == fenced_shard
    streams = all_streams(redis_client, publisher)
    expected = by_shard(batch)
    assert streams[fenced_shard] == []
    assert {s: e for s, e in streams.items() if s != fenced_shard} == {
        s: e for s, e in expected.items() if s != fenced_shard
    }


@pytest.mark.parametrize("written", [0, 1, 3])
def test_crash_between_shard_writes_then_replay_publishes_each_delta_once(
    redis_client: redis.Redis, written: int
) -> None:
    publisher = make(redis_client)
    publisher.finish_relist(1, "99")  # a synced start: every shard at rv 99
    batch_one = first_batch()  # rv 100..123
    publisher.publish(1, batch_one, checkpoint_rv="123")
    key = KEYS[5]
    batch_two = [
        updated(KEYS[0], "200"),
        added("ns-0/fresh", "201"),
        deleted("ns-0/fresh", "202"),
        deleted(key, "203"),
        added(key, "204"),
        *[updated(k, str(205 + i)) for i, k in enumerate(KEYS[10:20])],
    ]
    groups: dict[int, list[PendingDelta]] = {}
    for pending in batch_two:
        groups.setdefault(publisher.shard_of(pending.key), []).append(pending)
    groups = dict(sorted(groups.items()))
    calls = publisher._publish_calls(1, groups, "214")
    publisher._execute(calls[:written])  # the process dies after `written` shard calls

    # Restart: resume from the lowest checkpoint and replay everything after it.
    resume = publisher.resume_point()
    assert resume == ResumePoint("214" if written == len(calls) else "123", False)
    replay = [
        d
        for d in batch_one + batch_two
        if int(d.resource_version) > int(resume.resource_version or 0)
    ]
    publisher.publish(1, replay[:7], checkpoint_rv=replay[6].resource_version)
    publisher.publish(1, replay[7:], checkpoint_rv=replay[-1].resource_version)
    assert all_streams(redis_client, publisher) == by_shard(batch_one + batch_two)
    assert publisher.resume_point() == ResumePoint("214", False)


def test_a_failing_shard_call_leaves_the_others_written_and_a_replay_fills_it(
    redis_client: redis.Redis,
) -> None:
    publisher = make(redis_client)
    publisher.fence(1)
    broken = publisher.shards[1]
    redis_client.delete(broken.checkpoint)
    redis_client.set(broken.checkpoint, "not a hash")  # the script fails before any write
    batch = first_batch()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE") as info:
        publisher.publish(1, batch, checkpoint_rv="123")
    assert any("shard 1 of pods" in note for note in info.value.__notes__)
    streams = all_streams(redis_client, publisher)
    assert streams[1] == []
    assert all(streams[s] == by_shard(batch)[s] for s in (0, 2, 3))

    redis_client.delete(broken.checkpoint)
    publisher.fence(1)
    again = publisher.publish(1, batch, checkpoint_rv="123")
    assert again.published == len(by_shard(batch)[1])
    assert all_streams(redis_client, publisher) == by_shard(batch)


def test_resume_point(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    assert publisher.resume_point() == ResumePoint(None, True)  # never listed
    publisher.begin_relist(1)
    assert all(cp.relisting for cp in publisher.read_checkpoints())
    assert publisher.resume_point() == ResumePoint(None, True)
    publisher.finish_relist(1, "500")
    assert (
        publisher.read_checkpoints()
        == [ShardCheckpoint(rv="500", fence=1, synced_rv="500", relisting=False)] * SHARDS
    )
    assert publisher.resume_point() == ResumePoint("500", False)

    publisher.publish(1, [updated(KEYS[0], "600")], checkpoint_rv="600")
    assert publisher.resume_point() == ResumePoint("500", False)  # the lowest wins
    redis_client.hset(publisher.shards[3].checkpoint, "rv", "1000")
    assert publisher.resume_point().resource_version == "500"  # as integers: "1000" > "500"

    publisher.begin_relist(1)  # a relist that never finished
    assert publisher.resume_point() == ResumePoint("500", True)
    publisher.finish_relist(1, "700")
    assert publisher.resume_point() == ResumePoint("700", False)
    assert [cp.synced_rv for cp in publisher.read_checkpoints()] == ["700"] * SHARDS

    redis_client.hdel(publisher.shards[2].checkpoint, "rv")
    assert publisher.resume_point() == ResumePoint(None, True)


def test_resume_point_with_opaque_versions(redis_client: redis.Redis) -> None:
    publisher = make(redis_client)
    publisher.finish_relist(1, "abc")
    assert publisher.resume_point() == ResumePoint("abc", False)
    redis_client.hset(publisher.shards[0].checkpoint, "rv", "abd")
    assert publisher.resume_point() == ResumePoint(None, True)


def test_relist_flow_with_tombstones(redis_client: redis.Redis) -> None:
    """What the reflector does after a 410: diff against known_versions, publish in chunks."""
    publisher = make(redis_client)
    publisher.fence(1)
    publisher.publish(1, first_batch(), checkpoint_rv="123")
    publisher.advance_checkpoints(1, "123")
    known = publisher.known_versions()
    assert known == {key: str(100 + i) for i, key in enumerate(KEYS)}

    publisher.begin_relist(1)
    vanished = KEYS[:3]
    last = publisher.last_objects(vanished)
    assert {key: decode_envelope(env).resource_version for key, env in last.items()} == {
        key: known[key] for key in vanished
    }
    diff = [delta(DeltaType.DELETED, key, known[key], tombstone=True) for key in vanished] + [
        updated(KEYS[10], "900"),
        added("ns-1/new", "901"),
    ]
    for start in range(0, len(diff), 2):  # chunks
        publisher.publish(1, diff[start : start + 2], checkpoint_rv=None)
    # A crash here and a second diff publishes nothing new.
    assert publisher.publish(1, diff, checkpoint_rv=None).published == 0
    assert publisher.resume_point().needs_relist
    publisher.finish_relist(1, "950")
    assert publisher.resume_point() == ResumePoint("950", False)
    expected = {key: str(100 + i) for i, key in enumerate(KEYS) if key not in vanished}
    expected |= {KEYS[10]: "900", "ns-1/new": "901"}
    assert publisher.known_versions() == expected


def test_lost_scripts_are_reloaded_without_a_script_exists_per_batch(
    redis_client: redis.Redis,
) -> None:
    publisher = make(redis_client)
    publisher.publish(1, first_batch(), checkpoint_rv="123")
    redis_client.script_flush()
    result = publisher.publish(1, [updated(KEYS[0], "200")], checkpoint_rv="200")
    assert result.published == 1
    redis_client.config_resetstat()
    for rv in range(300, 310):
        publisher.publish(1, [updated(KEYS[0], str(rv))], checkpoint_rv=str(rv))
    stats = redis_client.info("commandstats")
    assert "cmdstat_script|exists" not in stats and "cmdstat_script" not in stats
    assert stats["cmdstat_evalsha"]["calls"] == 10


@pytest.mark.parametrize("epoch", [-1, 1.0, True, "2"])
def test_epoch_must_be_a_non_negative_int(redis_client: redis.Redis, epoch: object) -> None:
    publisher = make(redis_client)
    with pytest.raises(ValueError, match="epoch must be an integer"):
        publisher.publish(epoch, first_batch(), checkpoint_rv=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch must be an integer"):
        publisher.fence(epoch)  # type: ignore[arg-type]


def test_shard_count_is_validated(redis_client: redis.Redis) -> None:
    with pytest.raises(ValueError, match="shard_count"):
        make(redis_client, shard_count=0)


def _dump_shard(client: redis.Redis, keys: ShardKeys) -> tuple[object, ...]:
    return (
        client.xrange(keys.stream),
        client.hgetall(keys.versions),
        client.hgetall(keys.objects),
        client.hgetall(keys.checkpoint),
    )


def test_a_tombstone_is_published_even_in_a_checkpointing_batch(redis_client: redis.Redis) -> None:
    """The checkpoint rule only skips upserts: a tombstone at the last known (old) version is
    never mistaken for a replay, whatever checkpoint the caller passes with it."""
    publisher = make(redis_client)
    key = KEYS[0]
    publisher.publish(1, [added(key, "10")], checkpoint_rv="20")
    tombstone = delta(DeltaType.DELETED, key, "10", tombstone=True)
    assert publisher.publish(1, [tombstone], checkpoint_rv="30").published == 1
    assert publisher.known_versions() == {}


def test_checkpoints_forget_the_moves_they_vouch_for(redis_client: redis.Redis) -> None:
    """An outgoing half's entry in ``moving`` lives until a checkpoint covers its move's RV:
    advancing to that RV says the incoming half is written, a finished relist says every
    object is where its state maps to."""
    publisher = make(redis_client)
    publisher.fence(1)
    key, other = KEYS[0], KEYS[1]
    publisher.publish(1, [added(key, "10"), added(other, "11")], checkpoint_rv="11")
    for pending, rv in ((key, "20"), (other, "30")):
        shard = shard_for(pending, SHARDS)
        args: list[str | bytes] = ["1", "1", "", "O3", pending, rv, deleted(pending, rv).envelope]
        publisher._run(
            [_Call(shard, publisher._publish_script, publisher._publish_keys[shard], args)]
        )

    def moving() -> dict[str, str]:
        return {
            k.decode(): v.decode().split(" ")[2]
            for keys in publisher.shards
            for k, v in redis_client.hgetall(keys.moving).items()
        }

    assert moving() == {key: "20", other: "30"}
    assert publisher.known_versions() == {}
    publisher.advance_checkpoints(1, "19")
    assert moving() == {key: "20", other: "30"}
    publisher.advance_checkpoints(1, "20")  # at the move's RV: its incoming half is written
    assert moving() == {other: "30"}
    publisher.finish_relist(1, "26")
    assert moving() == {}
