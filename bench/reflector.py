"""Deltas/s into Redis of the informer-bus reflector, beside the readers it has to beat, all
reading the same simulated API server in one run (issue 4, "Benchmark").

Not a test: timings on a shared machine are noisy, so nothing asserts them. Run it from the
repository root (it starts the simulator as a child process and a private redis-server on a
free port; it never touches a Redis that happens to run on the machine)::

    .venv/bin/python bench/reflector.py [--pods 100000] [--burst 50000] [--json]

Two workloads, one reader at a time (so readers never compete for the two cores):

* **initial list** of ``--pods`` pods: from the first request until the reader holds every
  object;
* **watch burst** of ``--burst`` pod updates: the reader is synced and watching, the simulator
  holds its watch streams (a stall), generates the burst flat out, then lets go; timed from the
  first burst event the reader handled to the last. Every reader gets a fresh burst.

Readers:

* ``informer-bus reflector``: ``python -m reflector_svc`` as a child process (what users run),
  16 shards, into the private Redis. The list is timed from its "leading ... listing" log line
  to its "synced" line (interpreter start-up and imports excluded, as for the in-process
  readers; the wall time from spawn is reported too); the burst from the Redis stream IDs of
  the first and last burst entries (Redis' own millisecond clock). Counts are checked in Redis.
* ``bare urllib3+orjson``: paginated LIST (limit 500) decoding each page, and a watch loop
  decoding every line: the practical limit of a Python reader that publishes nothing.
* ``kubernetes client``: ``CoreV1Api.list_pod_for_all_namespaces`` paginated (models built)
  and ``watch.Watch().stream`` (models built).
* ``SharedInformer`` (``kubernetes.informer``): its initial list is ONE unpaginated LIST; timed
  until its ADDED handlers have seen every object (its cache is filled just before); the burst
  through its MODIFIED handlers.

The official client builds a model object per pod (~0.3 ms each): at the default sizes its two
readers take about two of the ~4 minutes, and SharedInformer's unpaginated LIST plus its cache
of 100k models peak at ~5.5 GB in this process. ``--slow-pods``/``--slow-burst`` measure them on
a smaller population and burst for quicker runs (rates are per object; the output says so).
In-process readers start from a frozen heap (``gc.freeze``), so none pays GC for objects the
bench or an earlier reader left; ``--py-spy DIR`` profiles the reflector child per workload.
Targets (issue 4): reflector >= 5x SharedInformer and >= 0.70x the bare loop, per workload.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import logging
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import redis
import urllib3
from harness import BenchError, ServiceChild, start_simulator_and_redis
from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.informer import ADDED, MODIFIED, SharedInformer

from informer_bus.apiserver_sim import SimulatorProcess, SimulatorSettings
from informer_bus.child_process import ChildProcess

SHARDS = 16
PAGE_SIZE = 500
PREFIX = "ib"
RESOURCE = "pods"

REFLECTOR = "informer-bus reflector"
BARE = "bare urllib3+orjson"
OFFICIAL = "kubernetes client (models)"
INFORMER = "kubernetes SharedInformer"
READERS = (REFLECTOR, BARE, OFFICIAL, INFORMER)
LIST = "initial list"
BURST = "watch burst"
WORKLOADS = (LIST, BURST)

TARGETS = {INFORMER: 5.0, BARE: 0.70}
"""Minimum of (reflector events/s) / (reader events/s), per workload."""

BARE_READ_SIZE = 256 << 10
"""Bytes per read of the bare watch loop: 128 KiB to 1 MiB measured alike (~70-85k events/s
here, about what the simulator writes); 64 KiB was slower."""


# ----------------------------------------------------------------------------- measurements


@dataclass
class Sizes:
    """Initial list and burst sizes of the fast readers, then of the official client's."""

    pods: int
    burst: int
    slow_pods: int
    slow_burst: int
    repeat: int


@dataclass
class Measurement:
    reader: str
    workload: str
    events: int
    seconds: float
    """Best (shortest) of ``runs``."""
    runs: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


class Tally:
    """Events handled so far by a reader thread: first and last arrival, done when complete."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.done = threading.Event()

    def add(self, count: int, arrived: float) -> None:
        if not count:
            return
        if not self.first:
            self.first = arrived
        self.count += count
        if self.count >= self.want and not self.done.is_set():
            self.last = time.perf_counter()
            self.done.set()

    @property
    def seconds(self) -> float:
        return max(1e-6, self.last - self.first)


def wait_for(
    done: Callable[[], bool], what: str, timeout: float, *, alive: Callable[[], None] | None = None
) -> None:
    """Poll ``done`` until true; ``alive`` raises when the thing waited for died."""
    deadline = time.monotonic() + timeout
    while not done():
        if alive is not None:
            alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


# ----------------------------------------------------------------------------- simulator


class Sim:
    """The simulator child plus the control calls this bench needs."""

    def __init__(self, process: SimulatorProcess) -> None:
        self.process = process
        self.url = process.url

    def populate(self, count: int, seed: int) -> None:
        if count > 0:
            self.process.populate(RESOURCE, count, seed=seed)

    def active_watches(self) -> int:
        return int(self.process.stats()["activeWatches"])

    def resource_version(self) -> str:
        return str(self.process.stats()["resourceVersion"])

    def wait_watching(self, alive: Callable[[], None] | None = None, timeout: float = 600) -> None:
        """Until one watch is open (the reader under test; no other watch is ever open)."""
        wait_for(lambda: self.active_watches() >= 1, "the reader's watch", timeout, alive=alive)

    def end_watches(self) -> None:
        """End every watch server-side and wait until the simulator has none open."""
        deadline = time.monotonic() + 30
        while self.active_watches() > 0:
            self.process.drop_watches()
            if time.monotonic() > deadline:
                raise BenchError("the simulator still has open watches")
            time.sleep(0.05)

    def burst(self, count: int, seed: int) -> None:
        """``count`` pod updates generated flat out while every watch stream is held, then
        released at once: readers see a burst as fast as the simulator can write it."""
        self.process.stall_watches(3600)
        try:
            stats = self.process.churn(
                rate=0, seconds=3600, seed=seed, mix={"update": 1.0}, maxEvents=count
            )
        finally:
            self.process.control("reset-faults")  # ends the stall
        if stats["events"] != count:
            raise BenchError(f"the simulator generated {stats['events']} of {count} updates")


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


def bare_watch_burst(sim: Sim, pool: urllib3.PoolManager, want: int, seed: int) -> float:
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

    with _reader_thread("bare-watch", read, sim, tally) as thread:
        sim.wait_watching(alive=_thread_alive(thread))
        sim.burst(want, seed)
        _wait_tally(tally, thread, "the bare watch loop")
    return tally.seconds


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

    with _reader_thread("official-watch", read, sim, tally) as thread:
        sim.wait_watching(alive=_thread_alive(thread))
        sim.burst(want, seed)
        _wait_tally(tally, thread, "watch.Watch().stream")
    return tally.seconds


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
        wait_for(added.done.is_set, "SharedInformer's initial list", _timeout(pods))
        list_seconds = added.last - started
        sim.wait_watching()
        sim.burst(burst, seed)
        wait_for(modified.done.is_set, "SharedInformer's burst", _timeout(burst))
    except BaseException:  # Ctrl-C or a failure: it may be deep in its LIST, do not wait
        _stop_informer(informer, sim, patience=1)
        raise
    _stop_informer(informer, sim, patience=10)
    if added.count != pods:
        raise BenchError(f"SharedInformer saw {added.count} ADDED, expected {pods}")
    return list_seconds, modified.seconds


def _timeout(events: int) -> float:
    """How long a reader may take for ``events`` before the bench gives up (>= 100/s)."""
    return 120 + events / 100


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

    wait_for(tally.done.is_set, what, _timeout(tally.want), alive=alive)


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


# ----------------------------------------------------------------------------- reflector


class ReflectorChild(ServiceChild):
    """``python -m reflector_svc`` into the private Redis; its log lines mark the moments the
    list starts and ends."""

    label = "reflector"

    def __init__(self, sim_url: str, redis_url: str, log_path: Path) -> None:
        flags = {
            "resource": RESOURCE, "kube-url": sim_url, "redis-url": redis_url,
            "prefix": PREFIX, "shard-count": SHARDS, "page-size": PAGE_SIZE,
            "http-host": "127.0.0.1", "http-port": 0, "identity": "bench", "log-level": "info",
            # Retention off: stream lengths must count every delta published in this run.
            "retention-min-entries": 10**9, "retention-max-entries": 10**9,
            "retention-interval": 86400,
        }  # fmt: skip
        super().__init__("reflector_svc", flags, log_path)
        self.listing = 0.0
        self.synced = 0.0
        self.synced_deltas = -1

    def on_message(self, message: str, arrived: float) -> None:
        if message.startswith(f"leading {RESOURCE} ") and message.endswith("listing"):
            self.listing = arrived
        elif message.startswith(f"{RESOURCE}: synced at rv ") and not self.synced:
            self.synced_deltas = int(message.rsplit("(", 1)[1].split(maxsplit=1)[0])
            self.synced = arrived


def stream_keys() -> list[str]:
    return [f"{PREFIX}:{{{RESOURCE}:{shard}}}:deltas" for shard in range(SHARDS)]


def stream_entries(client: redis.Redis) -> int:
    pipe = client.pipeline(transaction=False)
    for key in stream_keys():
        pipe.xlen(key)
    return sum(pipe.execute())


def last_ids(client: redis.Redis) -> list[bytes]:
    pipe = client.pipeline(transaction=False)
    for key in stream_keys():
        pipe.xrevrange(key, count=1)
    return [entries[0][0] if entries else b"0-0" for entries in pipe.execute()]


def _id_ms(stream_id: bytes) -> int:
    return int(stream_id.split(b"-")[0])


def burst_span(client: redis.Redis, before: list[bytes]) -> float:
    """Seconds from the first to the last stream entry after ``before`` (per-shard last IDs),
    by the millisecond timestamps Redis put in the IDs."""
    pipe = client.pipeline(transaction=False)
    for key, last in zip(stream_keys(), before, strict=True):
        pipe.xrange(key, min=b"(" + last, count=1)
        pipe.xrevrange(key, count=1)
    replies = pipe.execute()
    firsts = [_id_ms(first[0][0]) for first in replies[0::2] if first]
    lasts = [_id_ms(last[0][0]) for last in replies[1::2] if last]
    return max(1e-3, (max(lasts) - min(firsts)) / 1000)


def synced_shards(client: redis.Redis) -> int:
    pipe = client.pipeline(transaction=False)
    for shard in range(SHARDS):
        pipe.hget(f"{PREFIX}:{{{RESOURCE}:{shard}}}:checkpoint", "synced_rv")
    return sum(1 for rv in pipe.execute() if rv)


@dataclass
class ReflectorRun:
    list_seconds: float
    wall_seconds: float
    burst_seconds: float
    list_cpu_seconds: float
    """CPU (user + system) the reflector process used from spawn to synced."""
    burst_cpu_seconds: float
    """CPU the reflector process used from the burst's start until all of it was in Redis."""


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a (Linux) process has used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PySpy:
    """Optional: ``py-spy record`` attached to the reflector, one raw profile per workload
    (each round overwrites the previous round's)."""

    def __init__(self, out_dir: Path | None) -> None:
        self.out_dir = out_dir
        self.process: ChildProcess | None = None
        self.files: dict[str, Path] = {}

    def start(self, pid: int, name: str) -> None:
        if self.out_dir is None:
            return
        binary = Path(sys.executable).with_name("py-spy")
        out = self.out_dir / f"reflector-{name}.txt"
        self.files[name] = out
        command = [str(binary), "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
                   "--threads", "--nonblocking", "--output", str(out)]  # fmt: skip
        # SIGINT: py-spy writes its profile and exits.
        self.process = ChildProcess(command, stop_signal=signal.SIGINT).start()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(30)
        self.process = None


def reflector_run(
    sim: Sim, redis_url: str, sizes: Sizes, seed: int, *, log_path: Path, spy: PySpy
) -> ReflectorRun:
    """One fresh reflector on an empty Redis: its initial list, then one burst."""
    pods, burst = sizes.pods, sizes.burst
    client = redis.Redis.from_url(redis_url, socket_timeout=60)
    child = ReflectorChild(sim.url, redis_url, log_path)
    try:
        client.flushall()
        child.start()
        spy.start(child.pid, "list")
        wait_for(
            lambda: child.synced > 0,
            "the reflector's initial list",
            _timeout(pods),
            alive=child.check_alive,
        )
        spy.stop()
        list_cpu = cpu_seconds(child.pid)
        if not child.listing:
            raise BenchError(f"no 'leading ... listing' log line; log:\n{child.log_tail()}")
        entries, synced = stream_entries(client), synced_shards(client)
        if entries != pods or child.synced_deltas != pods or synced != SHARDS:
            raise BenchError(
                f"after the list: {entries} stream entries, {child.synced_deltas} deltas "
                f"logged, {synced}/{SHARDS} shards synced; expected {pods} pods"
            )
        sim.wait_watching(alive=child.check_alive)
        before = last_ids(client)
        cpu_before = cpu_seconds(child.pid)
        spy.start(child.pid, "burst")
        sim.burst(burst, seed)
        wait_for(
            lambda: stream_entries(client) >= pods + burst,
            "the reflector's burst",
            _timeout(burst),
            alive=child.check_alive,
        )
        burst_cpu = cpu_seconds(child.pid) - cpu_before
        spy.stop()
        if (entries := stream_entries(client)) != pods + burst:
            raise BenchError(f"{entries - pods} stream entries for a burst of {burst}")
        return ReflectorRun(
            list_seconds=child.synced - child.listing,
            wall_seconds=child.synced - child.spawned,
            burst_seconds=burst_span(client, before),
            list_cpu_seconds=list_cpu,
            burst_cpu_seconds=burst_cpu,
        )
    finally:
        spy.stop()
        child.stop()
        client.close()


# ----------------------------------------------------------------------------- the run


def measure(args: argparse.Namespace, sizes: Sizes, workdir: Path) -> list[Measurement]:
    """Every reader, one at a time, against one simulator child and one private Redis."""
    settings = SimulatorSettings(
        history_max_events=max(100_000, 2 * sizes.burst), history_max_age=3600.0
    )
    seeds = iter(range(100, 1_000_000))
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        _progress(args, f"simulator at {sim.url}, redis-server at {server.url}")
        # The official client's readers first (on a smaller population if asked) ...
        _progress(args, f"populating {sizes.slow_pods:,} pods")
        sim.populate(sizes.slow_pods, seed=1)
        results = measure_official(args, sizes, sim, stack, seeds)
        # ... then the bare loop and the reflector on the full one, taking turns.
        if sizes.pods > sizes.slow_pods:
            _progress(args, f"populating {sizes.pods - sizes.slow_pods:,} more pods")
            sim.populate(sizes.pods - sizes.slow_pods, seed=2)
        results += measure_fast(
            args, sizes, sim, redis_url=server.url, workdir=workdir, stack=stack, seeds=seeds
        )
    return results


def measure_official(
    args: argparse.Namespace,
    sizes: Sizes,
    sim: Sim,
    stack: contextlib.ExitStack,
    seeds: Iterator[int],
) -> list[Measurement]:
    """The official client's paginated LIST and Watch, and SharedInformer, on
    ``sizes.slow_pods``/``sizes.slow_burst``, ``args.slow_repeat`` rounds."""
    configuration = kube_client.Configuration()
    configuration.host = sim.url
    api = kube_client.ApiClient(configuration)
    stack.callback(api.close)
    lists: list[float] = []
    watches: list[float] = []
    informer_lists: list[float] = []
    informer_bursts: list[float] = []
    for attempt in range(args.slow_repeat):
        what = f"round {attempt + 1}/{args.slow_repeat}"
        _progress(args, f"{what}: kubernetes client, LIST of {sizes.slow_pods:,} pods")
        with frozen_heap():
            lists.append(official_list(api, sizes.slow_pods))
        _progress(args, f"{what}: kubernetes client, Watch of {sizes.slow_burst:,} updates")
        with frozen_heap():
            watches.append(official_watch_burst(sim, api, sizes.slow_burst, next(seeds)))
        sim.end_watches()
        _progress(args, f"{what}: SharedInformer, list then burst")
        with frozen_heap():
            list_seconds, burst_seconds = shared_informer(
                sim, api, sizes.slow_pods, sizes.slow_burst, next(seeds)
            )
        informer_lists.append(list_seconds)
        informer_bursts.append(burst_seconds)
        sim.end_watches()
    unpaginated = {"note": "one unpaginated LIST"}
    return [
        Measurement(OFFICIAL, LIST, sizes.slow_pods, min(lists), lists),
        Measurement(OFFICIAL, BURST, sizes.slow_burst, min(watches), watches),
        Measurement(INFORMER, LIST, sizes.slow_pods, min(informer_lists), informer_lists,
                    unpaginated),
        Measurement(INFORMER, BURST, sizes.slow_burst, min(informer_bursts), informer_bursts),
    ]  # fmt: skip


def measure_fast(
    args: argparse.Namespace,
    sizes: Sizes,
    sim: Sim,
    *,
    redis_url: str,
    workdir: Path,
    stack: contextlib.ExitStack,
    seeds: Iterator[int],
) -> list[Measurement]:
    """The bare loop and the reflector, taking turns for ``sizes.repeat`` rounds."""
    pool = urllib3.PoolManager(maxsize=2)
    stack.callback(pool.clear)
    spy = PySpy(args.py_spy)
    bare_lists: list[float] = []
    bare_bursts: list[float] = []
    runs: list[ReflectorRun] = []
    for attempt in range(sizes.repeat):
        what = f"round {attempt + 1}/{sizes.repeat}"
        _progress(args, f"{what}: bare loop, LIST of {sizes.pods:,} pods")
        with frozen_heap():
            bare_lists.append(bare_list(pool, sim.url, sizes.pods))
        _progress(args, f"{what}: bare loop, watch of {sizes.burst:,} updates")
        with frozen_heap():
            bare_bursts.append(bare_watch_burst(sim, pool, sizes.burst, next(seeds)))
        sim.end_watches()
        _progress(args, f"{what}: reflector, list then burst")
        log_path = workdir / f"reflector-{attempt}.log"
        runs.append(reflector_run(sim, redis_url, sizes, next(seeds), log_path=log_path, spy=spy))
        sim.end_watches()
    for name, path in spy.files.items():
        print_profile(name, path)
    best = min(runs, key=lambda run: run.list_seconds)
    wall = {
        "wall_seconds_from_spawn": round(best.wall_seconds, 3),
        "cpu_us_per_event": round(1e6 * best.list_cpu_seconds / sizes.pods, 2),
    }
    best_burst = min(runs, key=lambda run: run.burst_seconds)
    burst_cpu = {
        "cpu_us_per_event": round(1e6 * best_burst.burst_cpu_seconds / sizes.burst, 2),
        "cpu_us_per_event_runs": [
            round(1e6 * run.burst_cpu_seconds / sizes.burst, 2) for run in runs
        ],
    }
    return [
        Measurement(REFLECTOR, LIST, sizes.pods, best.list_seconds,
                    [run.list_seconds for run in runs], wall),
        Measurement(REFLECTOR, BURST, sizes.burst, best_burst.burst_seconds,
                    [run.burst_seconds for run in runs], burst_cpu),
        Measurement(BARE, LIST, sizes.pods, min(bare_lists), bare_lists),
        Measurement(BARE, BURST, sizes.burst, min(bare_bursts), bare_bursts),
    ]  # fmt: skip


def print_profile(name: str, path: Path, top: int = 20) -> None:
    """Where the reflector's sampled (non-idle) time went: self time per function, and the
    inclusive time of informer-bus' own functions, from py-spy's raw (collapsed) output."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")[1:]]
        if not frames:
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            if "reflector_svc/" in frame or "common/" in frame:
                inclusive[frame] += int(count)
    out = sys.stderr
    print(f"\npy-spy, reflector {name}: {total} samples ({path}); C code (orjson, the cyclic "
          "GC, socket calls) counts as the Python function that called it", file=out)  # fmt: skip
    print("  self time:", file=out)
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}", file=out)
    print("  inclusive, informer-bus functions:", file=out)
    for frame, count in inclusive.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}", file=out)


def _progress(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"... {text}", file=sys.stderr, flush=True)


def rows(results: list[Measurement]) -> list[dict[str, Any]]:
    """One row per (reader, workload), the reflector first, with ratio, target, verdict."""
    by_key = {(m.reader, m.workload): m for m in results}
    out: list[dict[str, Any]] = []
    for workload in WORKLOADS:
        ours = by_key[(REFLECTOR, workload)]
        for reader in READERS:
            m = by_key[(reader, workload)]
            ratio = ours.rate / m.rate
            target = TARGETS.get(reader)
            row: dict[str, Any] = {
                "reader": reader,
                "workload": workload,
                "events": m.events,
                "seconds": round(m.seconds, 6),
                "events_per_s": round(m.rate, 1),
                "ratio": None if reader == REFLECTOR else round(ratio, 3),
                "target_ratio": target,
                "met": None if target is None else ratio >= target,
                "runs_seconds": [round(s, 4) for s in m.runs],
                **m.extra,
            }
            if len(m.runs) > 1:
                row["median_seconds"] = round(statistics.median(m.runs), 4)
            out.append(row)
    return out


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def print_table(report: dict[str, Any]) -> None:
    m, s = report["machine"], report["sizes"]
    print(
        f"informer-bus reflector benchmark: {m['cores']} cores ({m['cpu'] or 'unknown cpu'}), "
        f"Python {m['python']}, {m['platform']}"
    )
    slow = f"best of {s['slow_repeat']}"
    if (s["slow_pods"], s["slow_burst"]) == (s["pods"], s["burst"]):
        print(
            f"sizes: initial list of {s['pods']:,} pods, watch burst of {s['burst']:,} "
            f"updates, for every reader; reflector and bare loop best of {s['repeat']}, "
            f"official client and SharedInformer {slow}"
        )
    else:
        print(
            f"sizes: initial list of {s['pods']:,} pods, watch burst of {s['burst']:,} "
            f"updates for the reflector and the bare loop (best of {s['repeat']});"
        )
        print(
            f"       {s['slow_pods']:,} pods and {s['slow_burst']:,} updates for the official "
            f"client and SharedInformer ({slow}); rates are per object"
        )
    print(
        f"reflector: python -m reflector_svc child process, {s['shards']} shards, LIST pages "
        f"of {s['page_size']}, into a private redis-server\n"
    )
    header = (
        f"{'reader':28} {'workload':13} {'events':>8} {'seconds':>8} {'events/s':>9} "
        f"{'ib ratio':>8}  target"
    )
    print(header)
    print("-" * len(header))
    for r in report["rows"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        target = "" if r["target_ratio"] is None else f">= {r['target_ratio']:.2f}x "
        verdict = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        print(
            f"{r['reader']:28} {r['workload']:13} {r['events']:>8,} {r['seconds']:8.2f} "
            f"{r['events_per_s']:>9,.0f} {ratio:>8}  {target}{verdict}"
        )
    print()
    for note in report["notes"]:
        print(textwrap.fill(note, width=100, initial_indent="* ", subsequent_indent="  "))


def notes(results: list[Measurement], sizes: Sizes, profiled: bool) -> list[str]:
    ours = next(m for m in results if m.reader == REFLECTOR and m.workload == LIST)
    burst = next(m for m in results if m.reader == REFLECTOR and m.workload == BURST)
    text = [
        "ib ratio = informer-bus reflector events/s / that reader's events/s, same workload; "
        "target = the minimum ratio issue 4 asks for.",
        "initial list: from the first request until the reader holds every object. The "
        "reflector: from its 'leading ... listing' log line to its 'synced' line (every delta "
        f"published, all {SHARDS} shard checkpoints synced; stream entries counted in Redis); "
        f"from spawn, with interpreter start-up and imports: "
        f"{ours.extra['wall_seconds_from_spawn']:.2f} s.",
        "reflector CPU per event (user + system of its process, every thread): initial list "
        f"{ours.extra['cpu_us_per_event']:.1f} us (from spawn), watch burst "
        f"{burst.extra['cpu_us_per_event']:.1f} us (best-rate round; all rounds: "
        f"{', '.join(f'{c:.1f}' for c in burst.extra['cpu_us_per_event_runs'])}).",
        "SharedInformer lists with ONE unpaginated LIST (that is how it works); timed until its "
        "ADDED handlers saw every pod.",
        "watch burst: the simulator holds the watch streams, generates the burst flat out, then "
        "lets go; timed from the first burst event a reader handled to the last (the reflector: "
        "the Redis stream-ID times of its first and last burst entry). The bare watch loop runs "
        "at about the simulator's own write speed.",
        "in-process readers (bare loop, official client, SharedInformer) start from a frozen "
        "heap (gc.collect + gc.freeze), so none pays GC for objects of the bench or of an "
        "earlier reader; the reflector child tunes its own GC (common.runtime), as every "
        "informer-bus service does.",
    ]
    if sizes.slow_pods != sizes.pods or sizes.slow_burst != sizes.burst:
        text.append(
            f"the official client and SharedInformer were measured on {sizes.slow_pods:,} pods "
            f"and {sizes.slow_burst:,} updates, the others on {sizes.pods:,} and "
            f"{sizes.burst:,}: rates are per object, so the ratios compare like with like (a "
            "SharedInformer holding more models would be slower per object, if anything)."
        )
    if profiled:
        text.append("py-spy sampled the reflector: its figures are slower than unprofiled.")
    return text


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000, help="initial list size")
    parser.add_argument("--burst", type=int, default=50_000, help="updates per watch burst")
    parser.add_argument(
        "--slow-pods",
        type=int,
        default=None,
        help="initial list size for the official client and SharedInformer (default: --pods)",
    )
    parser.add_argument(
        "--slow-burst",
        type=int,
        default=None,
        help="burst size for the official client and SharedInformer (default: --burst)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds of the bare loop and the reflector; the best counts",
    )
    parser.add_argument(
        "--slow-repeat",
        type=int,
        default=1,
        help="rounds of the official client and SharedInformer",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="record py-spy profiles of the reflector (raw format) into DIR",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    sizes = Sizes(
        pods=args.pods,
        burst=args.burst,
        slow_pods=args.pods if args.slow_pods is None else args.slow_pods,
        slow_burst=args.burst if args.slow_burst is None else args.slow_burst,
        repeat=args.repeat,
    )
    for name in ("pods", "burst", "slow_pods", "slow_burst", "repeat"):
        if getattr(sizes, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.slow_repeat < 1:
        parser.error("--slow-repeat must be at least 1")
    if sizes.slow_pods > sizes.pods or sizes.slow_burst > sizes.burst:
        parser.error("--slow-pods/--slow-burst cannot exceed --pods/--burst")
    if args.py_spy is not None:
        if not Path(sys.executable).with_name("py-spy").exists():
            parser.error("--py-spy needs py-spy in the venv: .venv/bin/pip install py-spy")
        args.py_spy.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)  # stop every child process, as on Ctrl-C
    # A shell starts background jobs with SIGINT ignored, and Python then keeps it ignored:
    # Ctrl-C (or a test's SIGINT) must stop the bench however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="bench-reflector-") as tmp:
        try:
            results = measure(args, sizes, Path(tmp))
        except BenchError as exc:
            print(f"bench/reflector.py: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted; every child process was stopped", file=sys.stderr)
            return 130
    report = {
        "machine": machine(),
        "sizes": {
            **sizes.__dict__,
            "slow_repeat": args.slow_repeat,
            "shards": SHARDS,
            "page_size": PAGE_SIZE,
        },
        "rows": rows(results),
        "notes": notes(results, sizes, args.py_spy is not None),
    }
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
