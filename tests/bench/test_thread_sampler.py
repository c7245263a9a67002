"""bench/thread_sampler.py: the threads a process runs over a span, as a real child started
and ended them (issue 35 bounds a processor's threads; the bench reads the figure from here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.support.paths import ROOT

CHILD = r"""
import sys, threading
batches = []
while line := sys.stdin.readline():
    word, _, count = line.strip().partition(" ")
    if word == "start":
        release = threading.Event()
        started = [threading.Thread(target=release.wait) for _ in range(int(count))]
        for thread in started:
            thread.start()
        batches.append((release, started))
    elif word == "end":
        release, started = batches.pop()
        release.set()
        for thread in started:
            thread.join()
    print("ok", flush=True)
"""


@pytest.fixture
def sampling(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the benches import each other as scripts
    return importlib.import_module("thread_sampler")


class Child:
    """A Python process with one thread, which starts and ends threads when told to."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.process.pid

    def tell(self, command: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline() == "ok\n"

    def stop(self) -> None:
        self.process.kill()
        self.process.communicate()  # reaps it and closes the pipes


@pytest.fixture
def child() -> Iterator[Child]:
    started = Child()
    try:
        yield started
    finally:
        started.stop()


def looks(sampler: object, count: int = 3) -> None:
    """Until the sampler has looked ``count`` more times (whatever the machine's load)."""
    target = sampler.samples + count  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    while sampler.samples < target:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the sampler stopped looking"
        time.sleep(0.001)


def test_the_most_threads_at_once_and_every_thread_seen(sampling: ModuleType, child: Child) -> None:
    with sampling.ThreadSampler([child.pid], interval=0.002) as sampler:
        looks(sampler)
        child.tell("start 4")  # the main thread and 4 more
        looks(sampler)
        child.tell("end")
        looks(sampler)
        child.tell("start 2")  # 2 others, never beside the 4
        looks(sampler)
        child.tell("end")
        looks(sampler)
    assert sampler.peak() == 5  # not the last look's 1, not the 7 ever seen
    assert sampler.distinct() == 7
    assert sampler.threads[child.pid].peak == 5


def test_several_processes_each_counted_alone(sampling: ModuleType, child: Child) -> None:
    other = Child()
    try:
        child.tell("start 2")
        other.tell("start 5")
        with sampling.ThreadSampler([child.pid, other.pid], interval=0.002) as sampler:
            looks(sampler)
    finally:
        other.stop()
    assert (sampler.threads[child.pid].peak, sampler.threads[other.pid].peak) == (3, 6)
    assert sampler.peak() == 6  # the busiest one, never a sum


def test_a_process_that_exits_keeps_what_was_seen(sampling: ModuleType, child: Child) -> None:
    child.tell("start 3")
    with sampling.ThreadSampler([child.pid], interval=0.002) as sampler:
        looks(sampler)
        child.stop()
        looks(sampler)
    assert sampler.peak() == 4
