"""Moves between shards through the real publish script: a resource sharded by owner whose
objects change owners (the rules: ``reflector_svc/moves.py``, ``reflector_svc/placement.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
import redis

from common.deltas import DeltaType
from common.publication import ResourceLayout
from common.shard_routing import ShardKeyChoice
from common.sharding import shard_for
from common.wire import Move, decode_envelope, moved_in, moved_out
from reflector_svc.publish_records import ResumePoint
from reflector_svc.publisher import ShardPublisher, _Call
from tests.reflector.publisher.support import BY_OWNER, move_entries, owned
from tests.support.bus import Bus, duplicate_problems, known_state_problems, order_problems

SHARDS = 4
KEY = "ns/cm"


def make(client: redis.Redis, shard_key: ShardKeyChoice = BY_OWNER) -> ShardPublisher:
    return ShardPublisher(
        client, prefix="ib", resource="configmaps", shard_count=SHARDS, shard_key=shard_key
    )


def owners(count: int, *, avoid: Sequence[int] = ()) -> list[str]:
    """Widget names whose keys (in namespace ``ns``) hash to ``count`` different shards."""
    found: dict[int, str] = {}
    for n in range(1000):
        shard = shard_for(f"ns/w-{n}", SHARDS)
        if shard not in found and shard not in avoid:
            found[shard] = f"w-{n}"
        if len(found) == count:
            return list(found.values())
    raise AssertionError("not enough shards")


def shard_of_owner(owner: str) -> int:
    return shard_for(f"ns/{owner}", SHARDS)


def known_by(client: redis.Redis, publisher: ShardPublisher, key: str) -> dict[int, str]:
    """shard -> the version it knows of ``key``, over every shard."""
    found = {}
    for keys in publisher.shards:
        version = client.hget(keys.versions, key)
        if version is not None:
            found[keys.shard] = version.decode()
    return found


class Crash(Exception):
    """The process died."""


def crash_after(publisher: ShardPublisher, monkeypatch: pytest.MonkeyPatch, calls: int) -> None:
    """Let ``calls`` pipelined rounds of script calls through, then die before the next."""
    execute = publisher._execute
    left = [calls]

    def dying(batch: Sequence[_Call]) -> list[Any]:
        if left[0] == 0:
            raise Crash
        left[0] -= 1
        return execute(batch)

    monkeypatch.setattr(publisher, "_execute", dying)


def test_a_new_owner_moves_the_object_outgoing_half_first_then_the_incoming_half_naming_it(
    redis_client: redis.Redis,
) -> None:
    first, second = owners(2)
    old, new = shard_of_owner(first), shard_of_owner(second)
    publisher = make(redis_client)
    publisher.fence(1)
    publisher.publish(1, [owned(DeltaType.ADDED, KEY, "10", first)], checkpoint_rv="10")
    assert known_by(redis_client, publisher, KEY) == {old: "10"}

    result = publisher.publish(1, [owned(DeltaType.UPDATED, KEY, "11", second)], checkpoint_rv="11")
    assert (result.moves, result.published, result.skipped) == (1, 2, 0)
    assert result.published_by_type == {DeltaType.DELETED: 1, DeltaType.ADDED: 1}
    on_old = move_entries(redis_client, publisher.shards[old])
    on_new = move_entries(redis_client, publisher.shards[new])
    assert [entry[:4] for entry in on_old] == [
        ("Added", KEY, "10", None),
        ("Deleted", KEY, "10", Move(to_shard=new)),
    ]
    assert [entry[:4] for entry in on_new] == [
        ("Added", KEY, "11", Move(from_shard=old, from_id=on_old[1][4])),
    ]
    # The outgoing half carries the object's last state on the old shard (its old owner).
    outgoing = decode_envelope(redis_client.xrange(publisher.shards[old].stream)[-1][1][b"d"])
    assert outgoing.obj is not None
    assert outgoing.obj["metadata"]["ownerReferences"][0]["name"] == first
    # Exactly one shard knows it, with the incoming half as its known state.
    assert known_by(redis_client, publisher, KEY) == {new: "11"}
    incoming = redis_client.xrange(publisher.shards[new].stream)[-1][1][b"d"]
    assert redis_client.hget(publisher.shards[new].objects, KEY) == incoming
    # The old shard's checkpoint is not moved to the move's RV by the outgoing half's call.
    checkpoints = publisher.read_checkpoints()
    assert (checkpoints[old].rv, checkpoints[new].rv) == ("10", "11")

    # A deletion goes to where the object is, whatever its last object says.
    gone = publisher.publish(1, [owned(DeltaType.DELETED, KEY, "12", first)], checkpoint_rv="12")
    assert gone.published == 1 and gone.moves == 0
    assert move_entries(redis_client, publisher.shards[new])[-1][:3] == ("Deleted", KEY, "12")
    assert len(move_entries(redis_client, publisher.shards[old])) == 2
    assert known_by(redis_client, publisher, KEY) == {}


def test_a_key_that_moves_twice_in_one_batch_carries_the_earlier_halfs_state(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = owners(3)
    publisher = make(redis_client)
    publisher.publish(1, [owned(DeltaType.ADDED, KEY, "10", a)], checkpoint_rv="10")

    def no_second_fetch(shard: int, key: str) -> bytes | None:
        raise AssertionError(f"fetched {key} of shard {shard} alone")

    fetches: list[object] = []
    fetch = publisher._fetch_objects
    monkeypatch.setattr(publisher, "_known_state", no_second_fetch)
    monkeypatch.setattr(
        publisher, "_fetch_objects", lambda wanted: fetches.append(wanted) or fetch(wanted)
    )
    batch = [owned(DeltaType.UPDATED, KEY, "11", b), owned(DeltaType.UPDATED, KEY, "12", c)]
    result = publisher.publish(1, batch, checkpoint_rv="12")
    assert result.moves == 2
    assert fetches == [{shard_of_owner(a): [KEY]}], "one round trip, for the first move only"
    on_a, on_b, on_c = (
        move_entries(redis_client, publisher.shards[shard_of_owner(o)]) for o in (a, b, c)
    )
    assert [e[:4] for e in on_a] == [
        ("Added", KEY, "10", None),
        ("Deleted", KEY, "10", Move(to_shard=shard_of_owner(b))),
    ]
    assert [e[:4] for e in on_b] == [
        ("Added", KEY, "11", Move(from_shard=shard_of_owner(a), from_id=on_a[1][4])),
        ("Deleted", KEY, "11", Move(to_shard=shard_of_owner(c))),
    ]
    assert [e[:4] for e in on_c] == [
        ("Added", KEY, "12", Move(from_shard=shard_of_owner(b), from_id=on_b[1][4])),
    ]
    second_outgoing = decode_envelope(
        redis_client.xrange(publisher.shards[shard_of_owner(b)].stream)[-1][1][b"d"]
    )
    assert second_outgoing.obj is not None
    assert second_outgoing.obj["metadata"]["ownerReferences"][0]["name"] == b
    assert known_by(redis_client, publisher, KEY) == {shard_of_owner(c): "12"}


def test_a_sub_batch_that_ends_with_an_outgoing_half_checkpoints_only_the_events_before_it(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the halves: no checkpoint vouches for the move's RV, so the restarted
    reflector replays the event, and the move's pending entry gives it the outgoing half's id."""
    a, b, c = owners(3)
    publisher = make(redis_client)
    publisher.fence(1)
    publisher.publish(1, [owned(DeltaType.ADDED, KEY, "10", a)], checkpoint_rv="10")
    publisher.advance_checkpoints(1, "10")
    # Before the move: an object on shard c's shard, created and updated; after it, another.
    before = [owned(DeltaType.ADDED, "ns/x", "20", c), owned(DeltaType.UPDATED, "ns/x", "21", c)]
    move = owned(DeltaType.UPDATED, KEY, "22", b)
    after = [owned(DeltaType.ADDED, "ns/y", "23", c)]
    crash_after(publisher, monkeypatch, 1)  # the outgoing half's sub-batch runs, then death
    with pytest.raises(Crash):
        publisher.publish(1, [*before, move, *after], checkpoint_rv="23")
    checkpoints = [cp.rv for cp in publisher.read_checkpoints()]
    assert checkpoints[shard_of_owner(a)] == "21", "only up to the event before the move"
    assert checkpoints[shard_of_owner(c)] == "21"
    assert checkpoints[shard_of_owner(b)] == "10"
    assert known_by(redis_client, publisher, KEY) == {}, "the key is between the halves"

    restarted = make(redis_client)
    restarted.fence(2)
    resume = restarted.resume_point()
    assert resume == ResumePoint("10", False)
    result = restarted.publish(2, [*before, move, *after], checkpoint_rv="23")
    assert result.moves == 1
    on_a = move_entries(redis_client, publisher.shards[shard_of_owner(a)])
    on_b = move_entries(redis_client, publisher.shards[shard_of_owner(b)])
    assert [e[:4] for e in on_a] == [
        ("Added", KEY, "10", None),
        ("Deleted", KEY, "10", Move(to_shard=shard_of_owner(b))),
    ]
    assert [e[:4] for e in on_b] == [
        ("Added", KEY, "22", Move(from_shard=shard_of_owner(a), from_id=on_a[1][4])),
    ]
    on_c = move_entries(redis_client, publisher.shards[shard_of_owner(c)])
    assert [e[:3] for e in on_c] == [
        ("Added", "ns/x", "20"),
        ("Updated", "ns/x", "21"),
        ("Added", "ns/y", "23"),
    ]
    assert known_by(redis_client, publisher, KEY) == {shard_of_owner(b): "22"}
    # Replayed again (a second restart from further back): nothing new anywhere.
    third = make(redis_client)
    again = third.publish(3, [*before, move, *after], checkpoint_rv="23")
    assert (again.published, again.moves) == (0, 0)
    third.advance_checkpoints(3, "23")
    assert all(redis_client.hlen(keys.moving) == 0 for keys in publisher.shards)


def test_a_deletion_of_an_unknown_key_goes_to_the_shard_of_its_object(
    redis_client: redis.Redis,
) -> None:
    a, b = owners(2)
    publisher = make(redis_client)
    publisher.publish(1, [owned(DeltaType.ADDED, KEY, "10", a)], checkpoint_rv=None)
    # Somewhere else: the watch deletes an object whose addition this publisher never wrote.
    result = publisher.publish(
        1, [owned(DeltaType.DELETED, "ns/other", "11", b)], checkpoint_rv="11"
    )
    assert set(result.shards) == {shard_of_owner(b)}
    assert result.published == 0


def test_a_resource_sharded_by_key_reads_no_placement(redis_client: redis.Redis) -> None:
    """Sharded by key, a key names its shard: resuming and publishing read nothing more."""
    publisher = make(redis_client, ShardKeyChoice())
    redis_client.config_resetstat()
    publisher.resume_point()
    publisher.publish(1, [replace(owned(DeltaType.ADDED, KEY, "10", "w-1"), shard_key=None)],
                      checkpoint_rv="10")  # fmt: skip
    stats = redis_client.info("commandstats")
    assert not publisher.tracks_placement
    assert "cmdstat_hkeys" not in stats and "cmdstat_hgetall" not in stats
    assert known_by(redis_client, publisher, KEY) == {shard_for(KEY, SHARDS): "10"}


def test_a_relist_moves_unchanged_objects_a_new_shard_key_places_elsewhere(
    redis_client: redis.Redis,
) -> None:
    """From key to owner and back: known_versions says where each key is, misplaced() which
    unchanged objects the relist must move, and the move's incoming half repeats the RV."""
    (owner,) = owners(1, avoid=[shard_for(KEY, SHARDS)])
    by_key = make(redis_client, ShardKeyChoice())
    by_key.publish(1, [replace(owned(DeltaType.ADDED, KEY, "10", owner), shard_key=None)],
                   checkpoint_rv=None)  # fmt: skip
    by_key.finish_relist(1, "10")

    by_owner = make(redis_client)
    by_owner.record_layout(ResourceLayout(SHARDS, BY_OWNER, "ConfigMap", "v1", namespaced=True))
    assert by_owner.known_versions() == {KEY: "10"}
    assert by_owner.misplaced(KEY, f"ns/{owner}")
    assert not by_owner.misplaced(KEY, KEY)
    assert not by_owner.misplaced("ns/unknown", f"ns/{owner}")
    result = by_owner.publish(1, [owned(DeltaType.UPDATED, KEY, "10", owner)], checkpoint_rv=None)
    assert result.moves == 1
    assert known_by(redis_client, by_owner, KEY) == {shard_of_owner(owner): "10"}
    on_new = move_entries(redis_client, by_owner.shards[shard_of_owner(owner)])
    assert [e[:3] for e in on_new] == [("Added", KEY, "10")]
    by_owner.finish_relist(1, "10")

    back = make(redis_client, ShardKeyChoice())
    back.resume_point()
    assert not back.tracks_placement, "a key names its shard"
    assert back.recorded_layout() is not None  # by owner: keys may be elsewhere
    assert back.known_versions() == {KEY: "10"}
    assert back.tracks_placement, "but this one was left elsewhere by the owner shard key"
    assert back.misplaced(KEY, None)
    back.publish(1, [replace(owned(DeltaType.UPDATED, KEY, "10", owner), shard_key=None)],
                 checkpoint_rv=None)  # fmt: skip
    assert known_by(redis_client, back, KEY) == {shard_for(KEY, SHARDS): "10"}
    back.finish_relist(1, "10")
    assert back.known_versions() == {KEY: "10"}
    assert not back.tracks_placement, "nothing is misplaced any more"


def test_a_resource_sharded_by_key_looks_for_misplaced_keys_only_when_there_can_be_some(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sharded by key under a layout that says so, after a finished relist: a relist reads the
    known versions as it always did, without hashing every known key once more."""
    by_key = ShardKeyChoice()
    publisher = make(redis_client, by_key)
    publisher.record_layout(ResourceLayout(SHARDS, by_key, "Pod", "v1", namespaced=True))
    deltas = [
        replace(owned(DeltaType.ADDED, f"ns/p-{n}", "10", None), shard_key=None) for n in range(20)
    ]
    publisher.publish(1, deltas, checkpoint_rv=None)
    publisher.finish_relist(1, "10")
    checked: list[int] = []

    def leader() -> ShardPublisher:
        """A new leader's publisher, as the reflector starts it, counting stray checks."""
        fresh = make(redis_client, by_key)
        strays = fresh._strays
        monkeypatch.setattr(
            fresh, "_strays", lambda per_shard: checked.append(1) or strays(per_shard)
        )
        fresh.resume_point()
        fresh.recorded_layout()
        return fresh

    assert len(leader().known_versions()) == 20
    assert checked == [], "nothing can be elsewhere"
    publisher.begin_relist(2)  # a relist that does not finish ...
    again = leader()
    assert len(again.known_versions()) == 20
    assert checked == [1], "... may have been moving keys: they are checked"
    assert not again.tracks_placement


def test_the_bus_checks_follow_a_key_across_shards_and_catch_broken_moves(
    redis_client: redis.Redis,
) -> None:
    """``tests/support/bus.py`` for a resource sharded by owner: a correct move passes every
    check; a key known by two shards, an outgoing half without its incoming half and an
    incoming half naming another id do not."""
    first, second = owners(2)
    publisher = make(redis_client)
    publisher.record_layout(ResourceLayout(SHARDS, BY_OWNER, "ConfigMap", "v1", namespaced=True))
    publisher.publish(1, [owned(DeltaType.ADDED, KEY, "10", first)], checkpoint_rv="10")
    publisher.publish(1, [owned(DeltaType.UPDATED, KEY, "11", second)], checkpoint_rv="11")
    bus = Bus(redis_client, "configmaps", shard_count=SHARDS)
    by_key = bus.by_key()
    assert [(e.type, e.rv, e.shard) for e in by_key[KEY]] == [
        ("Added", "10", shard_of_owner(first)),
        ("Deleted", "10", shard_of_owner(first)),
        ("Added", "11", shard_of_owner(second)),
    ]
    assert duplicate_problems(by_key) == order_problems(by_key) == []
    assert known_state_problems(bus, by_key) == []

    # A copy left behind on the old shard.
    old = publisher.shards[shard_of_owner(first)]
    redis_client.hset(old.versions, KEY, "10")
    redis_client.hset(old.objects, KEY, b"stale")
    assert any("known by shards" in p for p in known_state_problems(bus, bus.by_key()))
    redis_client.hdel(old.versions, KEY)
    redis_client.hdel(old.objects, KEY)

    # An outgoing half whose incoming half never came, and one whose incoming half names
    # another stream id.
    other, third = "ns/other", "ns/third"
    publisher.publish(1, [owned(DeltaType.ADDED, other, "20", first)], checkpoint_rv="20")
    publisher.publish(1, [owned(DeltaType.ADDED, third, "21", first)], checkpoint_rv="21")
    to = shard_of_owner(second)
    for key, rv in ((other, "20"), (third, "21")):
        state = redis_client.hget(old.objects, key)
        assert state is not None
        out = moved_out(state, to, observed_at=1.0)
        args: list[str | bytes] = ["1", "1", "", f"O{to}", key, rv, out]
        publisher._run(
            [_Call(old.shard, publisher._publish_script, publisher._publish_keys[old.shard], args)]
        )
    arriving = owned(DeltaType.UPDATED, third, "22", second)
    bogus = moved_in(arriving.envelope, old.shard, "1-1")
    args = ["1", "1", "22", "U", third, "22", bogus]
    publisher._run([_Call(to, publisher._publish_script, publisher._publish_keys[to], args)])
    problems = order_problems(bus.by_key())
    assert any(
        p.startswith(f"{other}: the outgoing half") and "no incoming half" in p for p in problems
    )
    assert any(
        p.startswith(f"{third}: Added@22") and f"names {old.shard}/1-1" in p for p in problems
    )
