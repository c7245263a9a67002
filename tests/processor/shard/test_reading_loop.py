"""The reading loop (issue 35): every shard of a process on one thread, one wait for all.

Real redis-server; workers driven by one shared :class:`ReadingLoop` as the service does.
"""

from __future__ import annotations

import threading
import time

from processor_svc.reading_loop import ReadingLoop
from tests.processor.shard.support import Shard, delivered_and_acknowledged
from tests.reflector.publisher.support import added, updated
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


def _loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shard-worker")]


def test_a_read_linger_reads_a_trickle_in_one_batch_and_a_stop_does_not_wait_it_out(
    shard: Shard,
) -> None:
    loop = ReadingLoop(shard.client, block_ms=5000, linger_ms=1500, name="linger-loop")
    recorder = Recorder()
    try:
        with shard.running(("rec", recorder), loop=loop) as (worker, _, _):
            assert worker.wait_for_sync(10)
            time.sleep(0.3)  # idle: the loop waits on the stream (a timer's read never lingers)
            shard.publish(added("ns/a", "1"))
            time.sleep(0.5)  # within the linger: nothing is read yet
            assert recorder.events == []
            shard.publish(updated("ns/a", "2"))
            wait_until(lambda: len(recorder.events) == 2, what="both entries, one read")
            wait_until(lambda: delivered_and_acknowledged(shard), what="acknowledged")
            shard.publish(updated("ns/a", "3"))
            time.sleep(0.2)  # the loop lingers now
            started = time.monotonic()
            worker.stop(1)
            assert time.monotonic() - started < 1.0, "the stop waited out the linger"
    finally:
        loop.close()
    assert not loop.thread.is_alive()


def test_a_worker_on_the_shared_loop_starts_no_thread_of_its_own(shard: Shard) -> None:
    loop = ReadingLoop(shard.client, block_ms=5000, name="shared-loop")
    recorder = Recorder()
    before = {t.ident for t in threading.enumerate()}
    try:
        with shard.running(("rec", recorder), loop=loop) as (worker, _, _):
            assert worker.wait_for_sync(10)
            shard.publish(added("ns/a", "1"))
            wait_until(lambda: len(recorder.events) == 1, what="the entry")
            started = [t for t in threading.enumerate() if t.ident not in before]
            # The dispatcher's handler thread and the loop: no thread of the worker's own.
            assert sorted(t.name for t in started) == ["handler[pods:rec]", "shared-loop"], started
            assert _loop_threads() == []
    finally:
        loop.close()
