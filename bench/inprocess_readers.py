"""The in-process readers the reflector has to beat: a bare urllib3+orjson loop, the official
client's paginated LIST and ``watch.Watch().stream``, and ``SharedInformer``.

Each is timed from its first request (a list) or first burst event (a watch) until it has handled
every object; a reader thread that fails before that ends the run with a
:class:`~harness.BenchError`, and every watch is ended server-side afterwards, so a reader that is
blocked in a read never outlives its measurement. Run them inside :func:`frozen_heap`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import urllib3
from harness import BenchError
from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.informer import ADDED, MODIFIED, SharedInformer
from reflector_child import PAGE_SIZE
from run_control import timeout_for, wait_for
from sim_control import Sim

BARE_READ_SIZE = 256 << 10
"""Bytes per read of the bare watch loop: 128 KiB to 1 MiB measured alike (~70-85k events/s
here, about what the simulator writes); 64 KiB was slower."""


class Tally:
    """Events handled so far by a reader thread: first and last arrival, done when complete;
    and the CPU the reader's thread used in between (``add`` runs on that thread), which is
    what the reflector's CPU per event is compared with in the same run."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.cpu_first = 0.0
        self.cpu_seconds = 0.0
        self.done = threading.Event()

    def add(self, count: int, arrived: float) -> None:
        if not count:
            return
        if not self.first:
            self.first = arrived
            self.cpu_first = time.thread_time()
        self.count += count
        if self.count >= self.want and not self.done.is_set():
            self.last = time.perf_counter()
            self.cpu_seconds = time.thread_time() - self.cpu_first
            self.done.set()

    @property
    def seconds(self) -> float:
        return max(1e-6, self.last - self.first)


# ----------------------------------------------------------------------------- bare loop


def bare_list(pool: urllib3.PoolManager, url: str, want: int) -> float:
    started = time.perf_counter()
    token = ""
    items = 0
    while True:
        query = f"limit={PAGE_SIZE}" + (f"&continue={token}" if token else "")
        resp = pool.request("GET", f"{url}/api/v1/pods?{query}")
        if resp.status != 200:
            raise BenchError(f"bare LIST: HTTP {resp.status}: {resp.data[:200]!r}")
        doc = orjson.loads(resp.data)
        items += len(doc["items"])
        token = doc["metadata"].get("continue", "")
        if not token:
            break
    seconds = time.perf_counter() - started
    if items != want:
        raise BenchError(f"bare LIST returned {items} pods, expected {want}")
    return seconds


def bare_watch_burst(
    sim: Sim, pool: urllib3.PoolManager, want: int, seed: int
) -> tuple[float, float]:
    """Seconds of the burst, and the CPU seconds the reading thread used over it."""
    rv = sim.resource_version()
    resp = pool.request(
        "GET",
        f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=3600",
        preload_content=False,
        timeout=urllib3.Timeout(connect=10, read=600),
    )
    tally = Tally(want)

    def read() -> None:
        buffer = b""
        loads = orjson.loads
        try:
            while not tally.done.is_set():
                chunk = resp.read1(BARE_READ_SIZE)
                if not chunk:
                    return
                arrived = time.perf_counter()
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                count = 0
                for line in lines:
                    if line and loads(line)["type"] != "BOOKMARK":
                        count += 1
                tally.add(count, arrived)
        finally:
            resp.close()  # the watch is still open: never reuse its connection
            resp.release_conn()

    seconds = _burst_through("bare-watch", read, sim, tally, seed=seed, what="the bare watch loop")
    return seconds, tally.cpu_seconds


# ----------------------------------------------------------------------------- official client


def official_list(api: Any, want: int) -> float:
    core = kube_client.CoreV1Api(api)
    started = time.perf_counter()
    token = None
    items = 0
    while True:
        page = core.list_pod_for_all_namespaces(limit=PAGE_SIZE, _continue=token)
        items += len(page.items)
        token = page.metadata._continue
        if not token:
            break
    seconds = time.perf_counter() - started
    if items != want:
        raise BenchError(f"the official client listed {items} pods, expected {want}")
    return seconds


def official_watch_burst(sim: Sim, api: Any, want: int, seed: int) -> float:
    core = kube_client.CoreV1Api(api)
    rv = sim.resource_version()
    tally = Tally(want)
    watcher = kube_watch.Watch()

    def read() -> None:
        stream = watcher.stream(
            core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=3600
        )
        try:
            for event in stream:
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    tally.add(1, time.perf_counter())
                    if tally.done.is_set():
                        return
        finally:
            watcher.stop()
            stream.close()

    return _burst_through(
        "official-watch", read, sim, tally, seed=seed, what="watch.Watch().stream"
    )


def shared_informer(sim: Sim, api: Any, pods: int, burst: int, seed: int) -> tuple[float, float]:
    """Seconds of its initial list (until N ADDED) and of a burst (until M MODIFIED)."""
    core = kube_client.CoreV1Api(api)
    informer = SharedInformer(core.list_pod_for_all_namespaces)
    added, modified = Tally(pods), Tally(burst)
    informer.add_event_handler(ADDED, lambda obj: added.add(1, time.perf_counter()))
    informer.add_event_handler(MODIFIED, lambda obj: modified.add(1, time.perf_counter()))
    started = time.perf_counter()
    informer.start()
    try:
        wait_for(added.done.is_set, "SharedInformer's initial list", timeout_for(pods))
        list_seconds = added.last - started
        sim.wait_watching()
        sim.burst(burst, seed)
        wait_for(modified.done.is_set, "SharedInformer's burst", timeout_for(burst))
    except BaseException:  # Ctrl-C or a failure: it may be deep in its LIST, do not wait
        _stop_informer(informer, sim, patience=1)
        raise
    _stop_informer(informer, sim, patience=10)
    if added.count != pods:
        raise BenchError(f"SharedInformer saw {added.count} ADDED, expected {pods}")
    return list_seconds, modified.seconds


def _stop_informer(informer: SharedInformer, sim: Sim, *, patience: float) -> None:
    """``SharedInformer.stop`` joins its thread, which may be blocked in a request: end the
    watches server-side until it returns. Its log of the interrupted watch is muted."""
    logger = logging.getLogger("kubernetes.informer")  # its module logger's parent
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    stopper = threading.Thread(target=informer.stop, name="informer-stop", daemon=True)
    stopper.start()
    deadline = time.monotonic() + patience
    while stopper.is_alive() and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            sim.process.drop_watches()
        stopper.join(0.2)
    if not stopper.is_alive():
        logger.setLevel(level)
    # else: interrupted in its LIST (or in building models from it, which nothing can cut
    # short): a daemon thread, it ends with the bench (the simulator stops first).


def _burst_through(
    name: str, read: Callable[[], None], sim: Sim, tally: Tally, *, seed: int, what: str
) -> float:
    """Seconds of one burst of ``tally.want`` updates through ``read`` (a watch loop run in a
    thread): the burst starts once its watch is open."""
    with _reader_thread(name, read, sim, tally) as thread:
        sim.wait_watching(alive=_thread_alive(thread))
        sim.burst(tally.want, seed)
        _wait_tally(tally, thread, what)
    return tally.seconds


@contextlib.contextmanager
def _reader_thread(
    name: str, target: Callable[[], None], sim: Sim, tally: Tally
) -> Iterator[threading.Thread]:
    """Run ``target`` in a thread; afterwards (or on Ctrl-C) end the watches and join it.
    An error of the thread before ``tally`` was complete becomes a :class:`BenchError`."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:
            if not tally.done.is_set():
                errors.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                sim.process.drop_watches()
            thread.join(0.2)
    if errors:
        raise BenchError(f"{name}: {type(errors[0]).__name__}: {errors[0]}") from errors[0]


def _thread_alive(thread: threading.Thread) -> Callable[[], None]:
    def check() -> None:
        if not thread.is_alive():
            raise BenchError(f"{thread.name} ended before the burst")

    return check


def _wait_tally(tally: Tally, thread: threading.Thread, what: str) -> None:
    def alive() -> None:
        if not thread.is_alive() and not tally.done.is_set():
            raise BenchError(f"{what} ended after {tally.count} of {tally.want} events")

    wait_for(tally.done.is_set, what, timeout_for(tally.want), alive=alive)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Measure an in-process reader from a clean slate: collect, then freeze every object
    that exists (the bench's own, earlier readers' leftovers), so that the cyclic GC of the
    reader under test only ever traverses what that reader allocates."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
    gc.collect()  # not when interrupted: a reader thread may still be building objects
