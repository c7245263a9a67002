"""What a user sees of a real reflector's output: simulator -> reflector -> Redis -> subscribe."""

from __future__ import annotations

from common.deltas import DeltaType
from common.wire import decode_envelope
from informer_bus.subscription import FROM_BEGINNING, subscribe
from tests.support.subscribe_cli import (
    SHARDS,
    Deadline,
    Pipeline,
    as_rows,
    id_order,
    json_lines,
    printed_rows,
    run_subscribe,
)


def test_from_beginning_prints_every_delta_on_the_streams(pipeline: Pipeline) -> None:
    pipeline.churn(updates=5, deletions=3)
    on_the_bus = pipeline.bus.all_entries()
    assert len(on_the_bus) == 30 + 5 + 3

    result = run_subscribe(
        pipeline.reflector.settings.redis.url,
        "pods", "--from-beginning", "--count", str(len(on_the_bus)),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert sorted(printed_rows(result.stdout)) == sorted(as_rows(on_the_bus))
    # Everything fits in one read, so the shards are merged in entry-ID order.
    ids = [row[1] for row in printed_rows(result.stdout)]
    assert ids == sorted(ids, key=id_order)
    by_id = {(entry.shard, entry.stream_id): entry for entry in on_the_bus}
    for line in json_lines(result.stdout):
        entry = by_id[line["shard"], line["id"]]
        assert line["stream"] == pipeline.bus.shards[entry.shard].stream
        assert line["object"] == decode_envelope(entry.raw).obj
        assert line["uid"] == entry.envelope.uid
        assert line["tombstone"] is entry.tombstone
        assert line["observedAt"] == entry.envelope.observed_at


def test_the_python_iterator_follows_live_changes_in_order(pipeline: Pipeline) -> None:
    key = sorted(pipeline.sim.ground_truth("pods"))[0]
    with subscribe(pipeline.reflector.settings.redis.url, "pods", stop=Deadline(15)) as deltas:
        assert deltas.shard_count == SHARDS
        updated = pipeline.sim.update("pods", key, {"metadata": {"labels": {"v": "2"}}})
        pipeline.sim.delete("pods", key)
        seen = [next(deltas), next(deltas)]

    assert [(d.type, d.key) for d in seen] == [(DeltaType.UPDATED, key), (DeltaType.DELETED, key)]
    assert seen[0].resource_version == str(updated.rv)
    assert seen[0].obj is not None
    assert seen[0].obj["metadata"]["labels"]["v"] == "2"
    assert seen[0].namespace == key.partition("/")[0]
    # from-beginning over the same streams ends with the same two deltas for that key
    with subscribe(
        pipeline.reflector.settings.redis.url, "pods", start=FROM_BEGINNING,
        stop=Deadline(1.0), block_ms=100,
    ) as everything:  # fmt: skip
        history = [(d.type, d.entry_id) for d in everything if d.key == key]
    assert history[-2:] == [(d.type, d.entry_id) for d in seen]
