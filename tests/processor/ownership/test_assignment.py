"""Shard assignment: exactly one owner, balanced within one, fewest moves, deterministic."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor_svc.assignment import assign_shards, moves

names = st.sampled_from([f"p{i}" for i in range(7)])


@st.composite
def situations(draw: st.DrawFn) -> tuple[int, list[str], dict[int, str | None]]:
    shard_count = draw(st.integers(1, 40))
    members = draw(st.lists(names, min_size=1, max_size=7, unique=True))
    owners = st.one_of(st.none(), names)
    current = {shard: draw(owners) for shard in range(shard_count)}
    return shard_count, members, current


@given(situations())
def test_every_shard_has_exactly_one_live_owner_and_load_differs_by_at_most_one(
    situation: tuple[int, list[str], dict[int, str | None]],
) -> None:
    shard_count, members, current = situation
    target = assign_shards(shard_count, members, current)
    assert sorted(target) == list(range(shard_count))
    assert set(target.values()) <= set(members)
    load = Counter(target.values())
    counts = [load.get(member, 0) for member in members]
    assert max(counts) - min(counts) <= 1


@given(situations())
def test_moves_are_the_fewest_any_balanced_assignment_can_make(
    situation: tuple[int, list[str], dict[int, str | None]],
) -> None:
    shard_count, members, current = situation
    target = assign_shards(shard_count, members, current)
    # Lower bound: every shard not owned by a live member must move, and each live member
    # must give up what it holds beyond the largest quota it could get.
    base, extra = divmod(shard_count, len(members))
    held = Counter(owner for owner in current.values() if owner in members)
    orphaned = sum(1 for owner in current.values() if owner not in members)
    # The `extra` largest holders may keep base + 1; everyone else keeps at most base.
    ranked = sorted(held.values(), reverse=True) + [0] * len(members)
    excess = sum(
        max(0, count - (base + 1 if rank < extra else base))
        for rank, count in enumerate(ranked[: len(members)])
    )
    assert moves(current, target) == orphaned + excess


@given(situations())
def test_assignment_is_stable_once_reached(
    situation: tuple[int, list[str], dict[int, str | None]],
) -> None:
    shard_count, members, current = situation
    target = assign_shards(shard_count, members, current)
    assert assign_shards(shard_count, list(reversed(members)), target) == target


def test_a_join_moves_only_what_balance_requires() -> None:
    before = assign_shards(16, ["a", "b"], {})
    after = assign_shards(16, ["a", "b", "c"], before)
    assert moves(before, after) == 5  # c takes 5; a and b keep 5 or 6 of their 8
    assert Counter(after.values()) == Counter({"a": 6, "b": 5, "c": 5})


def test_a_leave_moves_only_the_departed_members_shards() -> None:
    before = assign_shards(16, ["a", "b", "c"], {})
    after = assign_shards(16, ["a", "b"], before)
    departed = sum(1 for owner in before.values() if owner == "c")
    assert moves(before, after) == departed


def test_no_members_no_assignment_and_bad_shard_count() -> None:
    assert assign_shards(4, [], {0: "a"}) == {}
    with pytest.raises(ValueError, match="shard_count"):
        assign_shards(0, ["a"], {})
