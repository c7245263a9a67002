"""A fresh change behind an initial list: the priority queue beside a FIFO queue (issue 37).

A controller (one worker, a reconcile of ``--reconcile-ms``) is handed an initial list of
``--backlog`` keys, as a start or a takeover hands it, then a fresh update of one more object.
For each queue it prints how many backlog keys were reconciled before the fresh change and how
long the change waited. The FIFO run waits for the whole backlog (about backlog x reconcile
time: 20 s at the defaults). docs/performance.md has the figure;
tests/processor/handler_api/test_priority.py holds the promise (before 10 % of the backlog).

    .venv/bin/python bench/priority_queue.py [--backlog 20000] [--reconcile-ms 1]
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from dataclasses import dataclass

from common.object_keys import Obj
from processor_svc.controller import Controller
from processor_svc.handlers import HandlerContext, make_workqueue_factory
from processor_svc.lister import ShardedLister

FRESH = "default/fresh"


def _pod(name: str, rv: str = "1") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv},
    }


class _Timed(Controller):
    workers = 1
    reconcile_seconds = 0.001

    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        self.lock = threading.Lock()
        self.reconciled = 0
        self.fresh_after: int | None = None
        self.fresh_at = 0.0
        self.done = threading.Event()

    def reconcile(self, key: str) -> None:
        if not self.done.is_set():
            time.sleep(self.reconcile_seconds)
        with self.lock:
            if key == FRESH and self.fresh_after is None:
                self.fresh_after = self.reconciled
                self.fresh_at = time.monotonic()
                self.done.set()
            self.reconciled += 1


@dataclass(frozen=True)
class Result:
    queue: str
    backlog_before: int
    """Backlog keys reconciled before the fresh change."""
    wait_seconds: float
    """From the fresh update's event to the end of its reconcile."""


def measure(*, backlog: int, reconcile_seconds: float, priority: bool) -> Result:
    lister = ShardedLister()
    store = lister.new_store()
    initial = [_pod(f"pod-{i:06}") for i in range(backlog)]
    fresh = _pod("fresh")
    for obj in (fresh, *initial):
        store.add(obj)
    lister.attach(0, store)
    lister.mark_synced(0)
    context = HandlerContext(
        lister=lister,
        workqueue_factory=make_workqueue_factory(priority=priority),
        logger=logging.getLogger("bench.priority_queue"),
        settings=None,
        resource="pods",
    )
    controller = _Timed(context)
    controller.reconcile_seconds = reconcile_seconds
    try:
        controller.start()
        for obj in initial:
            controller.on_add(obj, True)
        while not controller.reconciled:
            time.sleep(0.001)
        sent = time.monotonic()
        controller.on_update(fresh, _pod("fresh", rv="2"))
        controller.done.wait()
    finally:
        controller.stop()
    assert controller.fresh_after is not None
    name = "priority" if priority else "FIFO"
    return Result(name, controller.fresh_after, controller.fresh_at - sent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--reconcile-ms", type=float, default=1.0)
    args = parser.parse_args()
    print(f"initial list of {args.backlog:,} keys, {args.reconcile_ms:g} ms per reconcile")
    for priority in (True, False):
        result = measure(
            backlog=args.backlog, reconcile_seconds=args.reconcile_ms / 1000, priority=priority
        )
        share = result.backlog_before / args.backlog
        print(
            f"{result.queue:>8} queue: fresh change reconciled after {result.backlog_before:,} "
            f"backlog keys ({share:.1%}), {result.wait_seconds * 1000:,.1f} ms after its event"
        )


if __name__ == "__main__":
    main()
