"""The publishing thread: order kept, batches merged, progress only after success, errors
handed back to the reader, nothing published after a failure."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from common.deltas import DeltaType
from reflector_svc import pipeline as pipeline_module
from reflector_svc.pipeline import PublishPipeline
from reflector_svc.publish_records import PendingDelta


def delta(rv: int) -> PendingDelta:
    return PendingDelta(DeltaType.UPDATED, f"ns/p{rv}", str(rv), b"{}")


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str | None]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_on: str | None = None

    def publish(self, deltas: Sequence[PendingDelta], checkpoint_rv: str | None) -> None:
        self.entered.set()
        self.gate.wait(5)
        rvs = [d.resource_version for d in deltas]
        if self.fail_on in rvs:
            raise ConnectionError("redis went away")
        self.calls.append((rvs, checkpoint_rv))


def pipeline(sink: Sink, progress: list[str], batch_max: int = 10) -> PublishPipeline:
    return PublishPipeline(
        sink.publish, batch_max=batch_max, on_published=progress.append, name="test-publisher"
    )


def test_batches_queued_behind_a_slow_publish_are_merged_in_order() -> None:
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    sink.gate.clear()
    pipe.submit([delta(1)], checkpoint_rv="1", progress_rv="1")
    assert sink.entered.wait(5)  # the first batch is in flight; the next ones queue up
    for rv in (2, 3, 4):
        pipe.submit([delta(rv)], checkpoint_rv=str(rv), progress_rv=str(rv))
    sink.gate.set()
    pipe.flush()
    pipe.close()
    assert [rvs for rvs, _ in sink.calls] == [["1"], ["2", "3", "4"]]
    assert sink.calls[-1][1] == "4", "a merged batch checkpoints at its last event"
    assert progress == ["1", "4"]


def test_a_merged_batch_checkpoints_only_if_every_part_may() -> None:
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    sink.gate.clear()
    pipe.submit([delta(1)], checkpoint_rv="1", progress_rv="1")
    assert sink.entered.wait(5)
    pipe.submit([delta(2)], checkpoint_rv=None, progress_rv=None)  # a relist chunk
    pipe.submit([delta(3)], checkpoint_rv="3", progress_rv="3")
    sink.gate.set()
    pipe.close()
    assert sink.calls == [(["1"], "1"), (["2", "3"], None)]
    assert progress == ["1", "3"]


@pytest.mark.parametrize("bookmark_first", [True, False])
def test_a_bookmark_merged_with_watch_batches_keeps_their_checkpoint(bookmark_first: bool) -> None:
    """A bookmark's progress batch has no events: merged before or after watch batches it must
    not switch their checkpoint rule off (what skips a replay after a takeover)."""
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    sink.gate.clear()
    pipe.submit([delta(1)], checkpoint_rv="1", progress_rv="1")
    assert sink.entered.wait(5)
    if bookmark_first:
        pipe.submit([], checkpoint_rv=None, progress_rv="2")
    pipe.submit([delta(3)], checkpoint_rv="3", progress_rv="3")
    if not bookmark_first:
        pipe.submit([], checkpoint_rv=None, progress_rv="4")
    sink.gate.set()
    pipe.close()
    assert sink.calls == [(["1"], "1"), (["3"], "3")]
    assert progress == ["1", "3" if bookmark_first else "4"]


def test_merging_stops_at_batch_max() -> None:
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress, batch_max=3)
    sink.gate.clear()
    pipe.submit([delta(0)], checkpoint_rv=None, progress_rv=None)
    assert sink.entered.wait(5)
    for rv in range(1, 6):
        pipe.submit([delta(rv)], checkpoint_rv=str(rv), progress_rv=str(rv))
    sink.gate.set()
    pipe.close()
    assert [len(rvs) for rvs, _ in sink.calls] == [1, 3, 2]


def test_a_failure_stops_publishing_and_reaches_the_reader() -> None:
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    sink.fail_on = "2"
    pipe.submit([delta(1)], checkpoint_rv="1", progress_rv="1")
    pipe.flush()
    pipe.submit([delta(2)], checkpoint_rv="2", progress_rv="2")
    with pytest.raises(ConnectionError, match="redis went away"):
        pipe.flush()
    assert pipe.failed
    with pytest.raises(ConnectionError):
        pipe.submit([delta(3)], checkpoint_rv="3", progress_rv="3")
    pipe.close()
    assert sink.calls == [(["1"], "1")]
    assert progress == ["1"], "progress never passes a batch that was not published"


def test_submit_blocks_when_the_queue_is_full() -> None:
    sink, progress = Sink(), []
    pipe = PublishPipeline(
        sink.publish, batch_max=2, on_published=progress.append, name="test-publisher",
        max_queued_deltas=2,
    )  # fmt: skip
    sink.gate.clear()
    pipe.submit([delta(1), delta(2)], checkpoint_rv=None, progress_rv=None)
    assert sink.entered.wait(5)  # taken, in flight
    pipe.submit([delta(3), delta(4)], checkpoint_rv=None, progress_rv=None)  # fills the queue
    blocked = threading.Thread(
        target=pipe.submit, args=([delta(5)],), kwargs={"checkpoint_rv": None, "progress_rv": "5"}
    )
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive(), "the reader waits instead of queueing without bound"
    sink.gate.set()
    blocked.join(5)
    pipe.close()
    assert [rv for rvs, _ in sink.calls for rv in rvs] == ["1", "2", "3", "4", "5"]


# In a burst the reader says more is waiting: the publisher lets the queue fill (at most
# LINGER, made long here so that nothing depends on timing) and publishes fewer, larger batches.


def test_batches_of_a_burst_wait_for_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "LINGER", 60.0)
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    for rv in (1, 2):
        pipe.submit([delta(rv)], checkpoint_rv=str(rv), progress_rv=str(rv), more_waiting=True)
    pipe.submit([delta(3)], checkpoint_rv="3", progress_rv="3")  # caught up: publish now
    pipe.flush()
    pipe.close()
    assert sink.calls == [(["1", "2", "3"], "3")]
    assert progress == ["3"]


def test_a_burst_publishes_once_batch_max_is_queued(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline_module, "LINGER", 60.0)
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress, batch_max=3)
    for rv in (1, 2, 3):
        pipe.submit([delta(rv)], checkpoint_rv=str(rv), progress_rv=str(rv), more_waiting=True)
    assert sink.entered.wait(5)  # without a flush, and though more was said to be waiting
    pipe.flush()
    pipe.close()
    assert sink.calls == [(["1", "2", "3"], "3")]


@pytest.mark.parametrize("linger", [60.0, 0.01])
def test_more_that_never_comes_is_not_waited_for_forever(
    monkeypatch: pytest.MonkeyPatch, linger: float
) -> None:
    # A flush (60 s linger) or the linger's end (10 ms) publishes what a burst left queued.
    monkeypatch.setattr(pipeline_module, "LINGER", linger)
    sink, progress = Sink(), []
    pipe = pipeline(sink, progress)
    pipe.submit([delta(1)], checkpoint_rv="1", progress_rv="1", more_waiting=True)
    if linger < 1:
        assert sink.entered.wait(5)
    pipe.flush()
    pipe.close()
    assert sink.calls == [(["1"], "1")]
    assert progress == ["1"]
