"""Two applications on one reflector, one of them with a view, each losing members to
``kill -9`` under churn: each group's handlers, taken together, converge exactly on that
group's truth (issue 33, "Deliver" 1 and 2).

Everything real: the simulator over HTTP, a private redis-server, a reflector process and the
processors as child processes recording every handler call
(:class:`tests.support.recording_handler.FileRecorder`, with what each object handed over
carried). Group ``a`` keeps everything (2 processors); group ``b`` keeps the pods labelled
``lane=b``, metadata only (``--label-selector lane=b --project metadata``, 2 processors). A
third of the pods start in ``b``'s view. The simulator churns (creations, updates, deletions)
while pods are relabelled in and out of ``b``'s view (a fifth of them or more); at two random
moments of the churn a random member of each group is killed with ``kill -9`` and a new member
started a moment later, so the others first take the dead member's shards over (after its
leases expire) and then hand half of them to the newcomer.

What an application that keeps its state outside the process ends up with is what all of its
group's handlers were told, whichever member told it: ``tests/support/held_objects.py`` merges
the calls of every member and restart in the order they happened and replays them per key.
After the churn, once everything is delivered and acknowledged, each group's handlers must hold
exactly the objects its view selects in the simulator, at their versions: no ghost (held, gone
or out of the view), none missing, every leave a deletion and every entry an add, no deletion
or update of a key never told about (a deletion of a key whose entry an owner read and
left unacknowledged at its kill or stop is at-least-once delivery: it cannot know whether its
handlers were called, so :class:`tests.support.group_pipeline.InFlight` samples those and they
are allowed); and no call of ``b``'s handlers (``on_add``,
``on_update``'s old and new, ``on_delete`` and a tombstone's last state) ever carries what its
projection removes (``spec``, ``status``, ``metadata.managedFields``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from apiserver_sim import ChurnStats, Simulator
from tests.support.group_pipeline import GroupPipeline, InFlight, Relabeler
from tests.support.handler_calls import Call
from tests.support.held_objects import Told, replay
from tests.support.redis_server import RedisServer

PODS = 1000
IN_VIEW = 1 / 3
"""The share of the pods labelled ``lane=b`` at the start."""
CHURN_SECONDS, CHURN_RATE = 16.0, 100.0
RELABEL_RATE = 30.0
"""Relabels per second: about 480 over the churn, so well over a fifth of the pods move."""
KILL_WINDOWS = ((2.0, 6.0), (8.0, 12.0))
"""Seconds into the churn between which each group loses a member (one kill per window)."""
VIEW = {"label_selector": "lane=b", "project": "metadata"}
METADATA = ("apiVersion", "kind", "metadata")
"""What ``--project metadata`` keeps (:func:`tests.support.recording_handler.parts_of`)."""
GROUPS = ("a", "b")

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def pipeline(
    redis_client: redis.Redis, redis_server: RedisServer, sim: Simulator, tmp_path: Path
) -> Iterator[GroupPipeline]:
    pipeline = GroupPipeline(redis_client, redis_server.url, sim, tmp_path)
    try:
        yield pipeline
    finally:
        pipeline.close()


def in_lane_b(sim: Simulator) -> dict[str, str]:
    """The pods group ``b``'s view selects now: key -> resourceVersion."""
    return {
        key: rv
        for key, rv in sim.ground_truth("pods").items()
        if (sim.get("pods", key)["metadata"].get("labels") or {}).get("lane") == "b"
    }


class Members:
    """The members of one group: started, killed and replaced (``<group>1``, ``<group>2``, ...)."""

    def __init__(self, pipeline: GroupPipeline, group: str, rng: random.Random) -> None:
        self.pipeline, self.group, self.rng = pipeline, group, rng
        self.view = VIEW if group == "b" else {}
        self.started = 0
        self.killed: list[str] = []

    def start(self) -> None:
        self.started += 1
        self.pipeline.start_member(self.group, f"{self.group}{self.started}", **self.view)

    def kill_one(self) -> None:
        victim = self.rng.choice(self.pipeline.live(self.group))
        victim.kill()
        self.killed.append(f"{victim.member_id} at {time.time():.3f}")


def churn_and_kill(
    sim: Simulator, members: dict[str, Members], rng: random.Random
) -> tuple[ChurnStats, Relabeler]:
    """Churn and relabel for :data:`CHURN_SECONDS`; meanwhile, in each group, a kill -9 at a
    random moment of each of :data:`KILL_WINDOWS` and its replacement 0.3-2 s later."""
    schedule: list[tuple[float, str, Members]] = []
    for group in members.values():
        for low, high in KILL_WINDOWS:
            at = rng.uniform(low, high)
            schedule += [(at, "kill", group), (at + rng.uniform(0.3, 2.0), "start", group)]
    schedule.sort(key=lambda step: step[0])
    relabels = Relabeler(sim, "lane", "b", rate=RELABEL_RATE, seed=rng.randrange(1 << 30))
    churn = sim.start_churn(rate=CHURN_RATE, seconds=CHURN_SECONDS, seed=rng.randrange(1 << 30))
    relabels.start()
    started = time.monotonic()
    try:
        for at, action, group in schedule:
            time.sleep(max(0.0, started + at - time.monotonic()))
            if action == "kill":
                assert churn.running, "a kill did not land in the churn"
                group.kill_one()
            else:
                group.start()
    finally:
        stats = churn.wait(CHURN_SECONDS + 30)
        relabels.stop()
    assert churn.error is None and stats is not None, churn.error
    return stats, relabels


def test_two_groups_converge_on_their_truths_through_kills_relabels_and_a_projection(
    sim: Simulator, pipeline: GroupPipeline
) -> None:
    rng = random.Random()
    sim.populate("pods", PODS, seed=33)
    for key in sorted(sim.ground_truth("pods")):
        lane = "b" if rng.random() < IN_VIEW else "other"
        sim.update("pods", key, {"metadata": {"labels": {"lane": lane}}})
    pipeline.start_reflector()
    members = {group: Members(pipeline, group, rng) for group in GROUPS}
    for group in members.values():
        group.start()
        group.start()
    pipeline.wait_settled(GROUPS)

    in_flight = InFlight(pipeline, GROUPS)
    in_flight.start()
    try:
        stats, relabels = churn_and_kill(sim, members, rng)
        pipeline.wait_settled(GROUPS)
    finally:
        in_flight.stop()
    assert stats.deletes > 100, stats
    moved = len(relabels.keys)
    assert moved >= PODS / 5 and relabels.moved_out > 0, (moved, relabels.moved_out)

    truths = {"a": sim.ground_truth("pods"), "b": in_lane_b(sim)}
    outside_b = truths["a"].keys() - truths["b"].keys()
    told: dict[str, Told] = {
        "a": replay(pipeline.calls("a"), truths["a"], maybe_told=in_flight.keys("a")),
        "b": replay(
            pipeline.calls("b"),
            truths["b"],
            outside_view=outside_b,
            maybe_told=in_flight.keys("b"),
            allowed_parts=METADATA,
        ),
    }
    reports = [
        told[group].report(
            f"group {group!r} ({len(truths[group])} objects in its view, killed "
            f"{', '.join(members[group].killed)})"
        )
        for group in GROUPS
    ]
    assert {group: told[group].counts() for group in GROUPS} == {"a": {}, "b": {}}, (
        f"churn {stats}, {moved} pods relabelled ({relabels.moved_in} in, "
        f"{relabels.moved_out} out of b)\n" + "\n".join(r for r in reports if r)
    )
    for group in members.values():
        assert len(group.killed) == len(KILL_WINDOWS)
    processes = [p for group in GROUPS for p in pipeline.members[group]]
    assert [p.log_path.name for p in processes if "Traceback" in p.log()] == []


def test_the_replay_merges_members_by_time_and_names_what_an_informer_never_shows() -> None:
    """The checks above can fail, and allow what at-least-once delivery does: a new owner's
    initial list re-adds what is held, a deletion handled but not acknowledged is repeated."""

    def call(member: str, seq: int, t: float, what: str, **flags: Any) -> Call:
        kind, key, rv = what.split()
        return Call(
            member=member, pid=hash(member) % 1000, seq=seq, t=t, end=t, kind=kind,
            initial=flags.get("initial", False), key=key, rv=rv, old_rv=flags.get("old", ""),
            tombstone=False, shard=0, holder=None, epoch=None, mine=True,
            parts=flags.get("parts", METADATA),
        )  # fmt: skip

    calls = [
        # p1 holds a and b, is killed; p2 takes over: a again in its initial list, b's deletion
        # repeated, c deleted unseen, d left the view unseen; then p2 adds a while it holds it,
        # updates e it never held (gone now, a ghost), and f, g are not at the truth's state.
        call("p1", 0, 1.0, "add a 1", initial=True),
        call("p1", 1, 1.1, "add b 2", initial=True),
        call("p1", 2, 1.2, "add d 3"),
        call("p1", 3, 1.3, "delete b 4", parts=(*METADATA, "spec")),
        call("p2", 0, 2.0, "delete b 4"),
        call("p2", 1, 2.1, "delete c 5"),
        call("p2", 2, 2.2, "add a 1", initial=True),
        call("p2", 3, 2.3, "update a 7", old="6"),
        call("p2", 4, 2.4, "add a 8"),
        call("p2", 5, 2.5, "update e 9", old="8"),
        call("p2", 6, 2.6, "add f 10"),
        call("p2", 7, 2.7, "delete h 11"),  # h's entry was in flight at p1's kill: allowed
    ]
    told = replay(reversed(calls), {"a": "8", "f": "11", "g": "12"}, outside_view={"d"},
                  maybe_told={"h"}, allowed_parts=METADATA)  # fmt: skip
    assert told.counts() == {
        "deleted_never_told": 1, "updated_never_told": 1, "updated_from_other_state": 1,
        "added_while_held": 1, "ghost": 1, "left_unseen": 1, "missing": 1, "stale": 1,
        "projection_leak": 1,
    }  # fmt: skip
    assert told.allowed == {"deleted_again": 1, "deleted_maybe_told": 1}
    assert [str(c) for c in told.problems["deleted_never_told"]["c"]] == [str(calls[5])]
    assert [c.seq for c in told.history["b"]] == [1, 3, 0]  # p1's two calls, then p2's
    report = told.report("group x")
    assert (
        report.startswith("group x: {'deleted_never_told': 1, ") and "  c: truth absent" in report
    )
