"""informer-bus beside the Python readers people use today, on one workload, in one run
(issue 8: ``make bench``).

Not a test: timings on a shared machine are noisy, so nothing asserts them. Run it from the
repository root (it starts the API server simulator, a private redis-server on a free port and
every contender as a child process; it never touches a Redis that happens to run on the
machine)::

    .venv/bin/python bench/compare.py [--quick] [--json PATH] [--chart PATH.png]

Contenders, one at a time (so none competes with another for the cores), each in its own
process so that its peak RSS (``VmHWM``) is its own:

* ``kubernetes Watch (models)``: ``CoreV1Api.list_pod_for_all_namespaces`` paginated, then
  ``watch.Watch().stream`` from the list's resourceVersion; every object becomes a model;
* ``kubernetes SharedInformer``: ``kubernetes.informer.SharedInformer`` (one unpaginated LIST
  into its cache of models, then a watch);
* ``kopf`` (the pinned dev dependency): an in-process ``kopf.run`` operator, standalone and
  cluster-wide, with one async ``@kopf.on.event("pods")`` handler (kopf's default settings,
  except that it posts no k8s Events);
* ``bare urllib3+orjson``: paginated LIST decoding each page, then a watch loop decoding every
  line -- the practical limit of a Python reader that does nothing else;
* ``informer-bus``: one ``python -m reflector_svc`` child into the private Redis and 1, 2, then
  4 ``python -m processor_svc`` children (bench/pipeline.py's code).

Every contender calls the same handler (``bench_handlers:Trivial``: it counts, and records every
update's churn step, the simulator's commit stamp and its own CLOCK_MONOTONIC reading), on the
same pods, for three workloads:

* **initial sync** of ``--pods`` pods: a contender's own LIST (or watch) until it holds every
  object (the ones with event handlers: until the handler saw every object). informer-bus end
  to end: the reflector's list into Redis (from its "listing" to its "synced" log line), plus
  the processors' sync from that filled Redis (from their start-up until every processor is
  ready with a balanced shard assignment) -- the two run one after the other here, so the sum
  is an upper bound of a cold start;
* **watch burst** of ``--burst`` updates generated while the simulator holds the watch
  streams, then released at once; from the first burst update a handler saw to the last;
* **steady** churn at ``--steady-rate`` updates/s for ``--steady-seconds``: the latency of
  every update from its commit in the simulator to its handler call, p50/p99: the handler's
  clock minus the stamp the simulator wrote into the update as it committed it, both
  CLOCK_MONOTONIC (bench/pipeline.py explains why it cannot be negative; a negative one fails
  the run).

kopf batches the events of one object (``settings.batching.batch_window``, 0.1 s): an object
updated twice within the window may reach the handler once, with its newest state. Its burst and
steady rows count every update the API server sent (the cache ends up the same), wait for the
last one, and say how many the handler saw (``handled``).

Memory: peak RSS per process; Redis ``used_memory`` per cached pod after the reflector's list
(streams retain every delta: the initial list is in them); a processor's RSS growth per cached
pod during its sync. Both are compared with the JSON size of a pod as cached (managedFields
stripped, as the reflector does by default).

Targets (issue 8), as ratios measured in this run: informer-bus burst events/s >= 5x
SharedInformer, >= 3x kopf, >= 0.6x the bare loop; initial sync with 4 processors >= 5x faster
than SharedInformer; p99 latency at the steady rate <= 10 ms; processor memory per cached pod
<= 1.5x its JSON; Redis memory <= 2x the JSON of the cached objects plus the retained stream.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import os
import signal
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, cast

import orjson
import redis
import urllib3
from bench_handlers import Trivial
from harness import BenchError, start_simulator_and_redis
from inprocess_readers import BARE_READ_SIZE, bare_list, official_list
from kubernetes import client as kube_client
from kubernetes import watch as kube_watch
from kubernetes.informer import ADDED, MODIFIED, SharedInformer
from pipeline import (
    TRIVIAL,
    Group,
    ProcessorChild,
    burst,
    group_running,
    start_reflector,
    steady,
    wait_synced,
)
from reporting import machine
from run_control import progress, stop_on_signals, timeout_for, wait_for
from sim_control import Sim

from common.service_runner import fail
from informer_bus.apiserver_sim import SimulatorSettings
from reflector_svc.transform import build_transform
from tests.support.redis_server import RedisServer

PROGRAM = "bench/compare.py"

INFORMER_BUS = "informer-bus"
WATCH = "watch"
SHARED_INFORMER = "sharedinformer"
KOPF = "kopf"
BARE = "bare"
CONTENDERS = (BARE, WATCH, SHARED_INFORMER, KOPF)
"""The peers, by their ``--child`` / ``--skip`` name, in the order they run."""
LABELS = {
    BARE: "bare urllib3+orjson",
    WATCH: "kubernetes Watch (models)",
    SHARED_INFORMER: "kubernetes SharedInformer",
    KOPF: f"kopf {importlib.metadata.version('kopf')}",
}
CONFIGURATIONS = ((1, False), (2, False), (4, False), (1, True))
"""informer-bus runs: (processors, compact cache); the compact run is the memory target's."""

SYNC = "initial sync"
BURST = "watch burst"
STEADY = "steady"
WORKLOADS = (SYNC, BURST, STEADY)

BURST_TARGETS = {SHARED_INFORMER: 5.0, KOPF: 3.0, BARE: 0.6}
"""informer-bus burst events/s over the contender's, at least."""
SYNC_TARGETS = {SHARED_INFORMER: 5.0}
"""informer-bus initial sync (4 processors) events/s over the contender's, at least."""
SYNC_REFERENCE = 4
"""Processors of the informer-bus row initial-sync ratios are taken against (the issue's)."""
P99_TARGET_MS = 10.0
PROCESSOR_MEMORY_TARGET = 1.5
"""A processor's RSS growth per cached pod over the pod's JSON size, at most."""
REDIS_MEMORY_TARGET = 2.0
"""Redis used_memory over the JSON of the cached objects plus the retained stream, at most."""

DEFAULTS = {"pods": 100_000, "burst": 50_000, "steady_seconds": 30.0, "steady_rate": 1000.0}
QUICK = {"pods": 5_000, "burst": 5_000, "steady_seconds": 5.0, "steady_rate": 1000.0}
MB = 1 << 20
STRIP = build_transform(is_secret=False)  # the reflector's default: managedFields stripped


# ----------------------------------------------------------------------------- the children


def _say(message: str) -> None:
    """A JSON log line on stderr, the way the services write them (harness.ServiceChild)."""
    sys.stderr.buffer.write(orjson.dumps({"message": message}) + b"\n")
    sys.stderr.flush()


def _annotations_of(model: Any) -> dict[str, Any]:
    """What ``Trivial.on_update`` reads from a dict, taken from a kubernetes model."""
    return {"metadata": {"annotations": model.metadata.annotations}}


def _api(sim_url: str) -> kube_client.ApiClient:
    configuration = kube_client.Configuration()
    configuration.host = sim_url
    return kube_client.ApiClient(configuration)


def child_watch(sim_url: str, pods: int, handler: Trivial) -> None:
    api = _api(sim_url)
    _say(f"synced {official_list(api, pods)}")
    core = kube_client.CoreV1Api(api)
    listed = core.list_pod_for_all_namespaces(limit=1).metadata
    assert listed is not None
    # The client's watch and informer modules carry no annotations.
    stream = kube_watch.Watch().stream(  # type: ignore[no-untyped-call]
        core.list_pod_for_all_namespaces,
        resource_version=listed.resource_version,
        timeout_seconds=3600,
    )
    for event in stream:
        if event["type"] == "MODIFIED":
            handler.on_update({}, _annotations_of(event["object"]))


def child_shared_informer(sim_url: str, pods: int, handler: Trivial) -> None:
    # The client's informer module carries no annotations: an Any of it.
    informer: Any = SharedInformer(  # type: ignore[no-untyped-call]
        kube_client.CoreV1Api(_api(sim_url)).list_pod_for_all_namespaces
    )
    added = 0
    started = time.perf_counter()

    def on_added(obj: Any) -> None:
        nonlocal added
        handler.on_add(obj, True)
        added += 1
        if added == pods:
            _say(f"synced {time.perf_counter() - started}")

    informer.add_event_handler(ADDED, on_added)
    informer.add_event_handler(MODIFIED, lambda obj: handler.on_update({}, _annotations_of(obj)))
    informer.start()
    threading.Event().wait()  # until SIGTERM


def child_kopf(sim_url: str, pods: int, handler: Trivial) -> None:
    import kopf  # only this child pays for kopf's imports

    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # no k8s Event per log line: the bench measures events
    listed = 0
    started = time.perf_counter()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=sim_url, insecure=True)

    @kopf.on.event("pods", registry=registry)
    async def seen(type: str | None, body: kopf.Body, **_: Any) -> None:
        nonlocal listed
        # Trivial only reads ``["metadata"]`` of the object: kopf's Body mapping will do.
        obj = cast(dict[str, Any], body)
        if type is None:  # kopf's mark of an object listed at start-up
            handler.on_add(obj, True)
            listed += 1
            if listed == pods:
                _say(f"synced {time.perf_counter() - started}")
        elif type == "MODIFIED":
            handler.on_update({}, obj)

    kopf.run(registry=registry, settings=settings, standalone=True, clusterwide=True)


def child_bare(sim_url: str, pods: int, handler: Trivial) -> None:
    pool = urllib3.PoolManager(maxsize=2)
    _say(f"synced {bare_list(pool, sim_url, pods)}")
    rv = orjson.loads(pool.request("GET", f"{sim_url}/api/v1/pods?limit=1").data)["metadata"][
        "resourceVersion"
    ]
    resp = pool.request(
        "GET",
        f"{sim_url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=3600",
        preload_content=False,
        timeout=urllib3.Timeout(connect=10, read=None),
    )
    buffer = b""
    loads = orjson.loads
    while chunk := resp.read1(BARE_READ_SIZE):
        lines = (buffer + chunk).split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if line and (event := loads(line))["type"] == "MODIFIED":
                handler.on_update({}, event["object"])


CHILDREN: dict[str, Callable[[str, int, Trivial], None]] = {
    WATCH: child_watch,
    SHARED_INFORMER: child_shared_informer,
    KOPF: child_kopf,
    BARE: child_bare,
}


def _exit_now(signum: int, frame: FrameType | None) -> NoReturn:
    # The bench has read what it measures before it stops a child: nothing to drain, and a
    # reader blocked in a request (or kopf in its graceful stop) must not hold the run up.
    os._exit(0)


def run_child(args: argparse.Namespace) -> int:
    """One contender, in this process, until SIGTERM (started by :class:`ContenderChild`)."""
    signal.signal(signal.SIGTERM, _exit_now)
    handler = Trivial()
    try:
        CHILDREN[args.child](args.sim_url, args.pods, handler)
    except Exception as exc:
        _say(f"failed: {type(exc).__name__}: {exc}")
        return 1
    _say("ended")
    return 0


# ----------------------------------------------------------------------------- orchestration


class ContenderChild(ProcessorChild):
    """``python -m compare --child KIND``: a peer in its own process, reporting to the same
    files as the processors' handler (so :class:`pipeline.Group` reads both alike)."""

    def __init__(self, kind: str, sim_url: str, pods: int, data_dir: Path, log_path: Path) -> None:
        super().__init__("", TRIVIAL, kind, data_dir, log_path)  # its environment, bench paths
        self.label = LABELS[kind]
        self.args = [sys.executable, "-m", "compare", "--log-json", "--child", kind,
                     "--sim-url", sim_url, "--pods", str(pods)]  # fmt: skip
        self.stop_timeout = 10.0
        self.sync_seconds: float | None = None

    def on_message(self, message: str, arrived: float) -> None:
        if message.startswith("synced "):
            self.sync_seconds = float(message.split()[1])


class ContenderGroup(Group):
    """One contender child, read like a group of processors."""

    def __init__(self, child: ContenderChild, data_dir: Path, workdir: Path) -> None:
        super().__init__(0, TRIVIAL, "", data_dir=data_dir, workdir=workdir, tag=child.label)
        self.children = [child]


def memory_kb(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise BenchError(f"no {field_name} in /proc/{pid}/status")


def peak_rss_mb(pids: Sequence[int]) -> float:
    """The largest peak RSS (``VmHWM``) of ``pids``, in MiB."""
    return round(max(memory_kb(pid, "VmHWM") for pid in pids) / 1024, 1)


@dataclass
class Result:
    workload: str
    contender: str
    """A key of CONTENDERS or ``informer-bus/<n>``."""
    label: str
    events: int
    seconds: float
    peak_rss_mb: float
    latency: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / max(self.seconds, 1e-6)


def _ib(count: int, compact: bool = False) -> str:
    return f"{INFORMER_BUS}/{count}" + ("/compact" if compact else "")


def _ib_label(count: int, compact: bool = False) -> str:
    plural = "s" if count > 1 else ""
    return f"informer-bus, {count} processor{plural}" + (", compact cache" if compact else "")


def last_step_seen(group: Group, count: int, what: str) -> None:
    """Until the handler saw update ``count - 1`` of a churn: every other update is older, so
    a contender that coalesces events (kopf) has then caught up. Polled slowly: the times come
    from the handler's stamps, not from this loop."""
    deadline = time.monotonic() + timeout_for(count)
    while not any(update.step == count - 1 for update in group.updates()):
        group.check_alive()
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(0.5)


def contender_burst(sim: Sim, group: ContenderGroup, count: int, seed: int, kind: str) -> Result:
    group.mark()
    sim.burst(count, seed)
    what = f"{LABELS[kind]}'s burst"
    if kind == KOPF:
        last_step_seen(group, count, what)
    else:
        wait_for(
            lambda: group.updates_seen() >= count, what, timeout_for(count), alive=group.check_alive
        )
    times = [update.handled for update in group.updates()]
    if kind != KOPF and len(times) != count:
        raise BenchError(f"{LABELS[kind]} saw {len(times)} updates for a burst of {count}")
    pid = group.children[0].pid
    return Result(BURST, kind, LABELS[kind], count, max(1e-6, max(times) - min(times)),
                  peak_rss_mb([pid]), extra={"handled": len(times)})  # fmt: skip


def _steady_result(row: Any, contender: str, label: str, pids: Sequence[int]) -> Result:
    latency = {k: row.extra[k] for k in ("p50_ms", "p99_ms", "max_ms") if k in row.extra}
    extra = {k: row.extra[k] for k in ("handled", "rate_churned") if k in row.extra}
    return Result(STEADY, contender, label, row.events, row.seconds, peak_rss_mb(pids),
                  latency, extra)  # fmt: skip


def measure_contender(
    args: argparse.Namespace, sim: Sim, kind: str, workdir: Path, seeds: Iterator[int]
) -> list[Result]:
    label = LABELS[kind]
    data_dir = workdir / f"data-{kind}"
    data_dir.mkdir()
    child = ContenderChild(kind, sim.url, args.pods, data_dir, workdir / f"{kind}.log")
    group = ContenderGroup(child, data_dir, workdir)
    results: list[Result] = []
    progress(args, f"{label}: initial sync of {args.pods:,} pods")
    group.start()
    try:
        wait_for(
            lambda: child.sync_seconds is not None,
            f"{label}'s initial sync",
            timeout_for(args.pods),
            alive=child.check_alive,
        )
        assert child.sync_seconds is not None
        results.append(
            Result(SYNC, kind, label, args.pods, child.sync_seconds, peak_rss_mb([child.pid]))
        )
        sim.wait_watching(alive=child.check_alive)
        progress(args, f"{label}: burst of {args.burst:,} updates")
        results.append(contender_burst(sim, group, args.burst, next(seeds), kind))
        progress(args, f"{label}: {args.steady_rate:g} updates/s for {args.steady_seconds:g} s")
        row, _ = steady(
            sim, group, args.steady_rate, args.steady_seconds, next(seeds),
            coalescing=kind == KOPF,
        )  # fmt: skip
        results.append(_steady_result(row, kind, label, [child.pid]))
    finally:
        group.stop()
        sim.end_watches()
    return results


def pod_json_bytes(sim: Sim, sample: int = 500) -> float:
    """Mean JSON size of a pod as the reflector caches it (managedFields stripped)."""
    with urllib.request.urlopen(f"{sim.url}/api/v1/pods?limit={sample}", timeout=60) as resp:
        items = orjson.loads(resp.read())["items"]
    stripped = [STRIP(item) if STRIP is not None else item for item in items]
    return sum(len(orjson.dumps(item)) for item in stripped) / len(stripped)


def used_memory(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url, socket_timeout=60)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def measure_informer_bus(
    args: argparse.Namespace,
    sim: Sim,
    server: RedisServer,
    *,
    workdir: Path,
    stack: contextlib.ExitStack,
    seeds: Iterator[int],
) -> tuple[list[Result], dict[str, Any]]:
    empty_redis = used_memory(server.url)
    reflector = start_reflector(args, sim, server.url, workdir, stack)
    list_seconds = reflector.synced - reflector.listing
    redis_bytes = used_memory(server.url) - empty_redis
    json_bytes = pod_json_bytes(sim)
    assert server.process is not None
    others = {"reflector": reflector.pid, "redis": server.process.pid, "simulator": sim.process.pid}
    results: list[Result] = []
    processor_growth: dict[tuple[int, bool], float] = {}
    for count, compact in CONFIGURATIONS:
        label, contender = _ib_label(count, compact), _ib(count, compact)
        tag = f"t{count}" + ("c" if compact else "")
        progress(args, f"{label}: initial sync from the filled Redis")
        with group_running(
            count, TRIVIAL, server.url, workdir, tag, compact_cache=compact
        ) as group:
            pids = [child.pid for child in group.children]
            wait_for(lambda: all(c.url for c in group.children), "the processors' start", 120,
                     alive=group.check_alive)  # fmt: skip
            before = sum(memory_kb(pid, "VmRSS") for pid in pids)
            from_started, from_spawn = wait_synced(group, args.pods)
            after = sum(memory_kb(pid, "VmRSS") for pid in pids)
            processor_growth[count, compact] = (after - before) * 1024 / args.pods
            extra = {
                "reflector_list_seconds": round(list_seconds, 3),
                "processors_sync_seconds": round(from_started, 3),
                "processors_seconds_from_spawn": round(from_spawn, 3),
            }
            results.append(Result(SYNC, contender, label, args.pods, list_seconds + from_started,
                                  peak_rss_mb(pids), extra=extra))  # fmt: skip
            progress(args, f"{label}: burst of {args.burst:,} updates")
            seconds, cpu = burst(sim, group, args.burst, next(seeds), others)
            results.append(Result(BURST, contender, label, args.burst, seconds,
                                  peak_rss_mb(pids), extra=cpu))  # fmt: skip
            progress(args, f"{label}: {args.steady_rate:g} updates/s for {args.steady_seconds:g} s")
            row, _ = steady(sim, group, args.steady_rate, args.steady_seconds, next(seeds))
            results.append(_steady_result(row, contender, label, pids))
        reflector.check_alive()
    memory = {
        "pod_json_bytes": round(json_bytes, 1),
        "cached_pods": args.pods,
        "redis_used_memory_bytes": redis_bytes,
        "redis_bytes_per_pod": round(redis_bytes / args.pods, 1),
        "redis_stream_entries": args.pods,
        "processor_rss_growth_bytes_per_pod": round(processor_growth[1, False], 1),
        "compact_processor_rss_growth_bytes_per_pod": round(processor_growth[1, True], 1),
        "reflector_peak_rss_mb": peak_rss_mb([reflector.pid]),
        "redis_peak_rss_mb": peak_rss_mb([server.process.pid]),
    }
    return results, memory


def measure(args: argparse.Namespace, workdir: Path) -> tuple[list[Result], dict[str, Any]]:
    settings = SimulatorSettings(
        history_max_events=max(100_000, 2 * args.burst), history_max_age=3600.0
    )
    seeds = iter(range(100, 1_000_000))
    results: list[Result] = []
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"simulator at {sim.url}, redis-server at {server.url}")
        progress(args, f"populating {args.pods:,} pods")
        sim.populate(args.pods, seed=1)
        for kind in CONTENDERS:
            if kind not in args.skip:
                results += measure_contender(args, sim, kind, workdir, seeds)
        ours, memory = measure_informer_bus(
            args, sim, server, workdir=workdir, stack=stack, seeds=seeds
        )
    return ours + results, memory


# ----------------------------------------------------------------------------- the report


def reference(results: list[Result], workload: str) -> Result:
    """The informer-bus row the contenders of ``workload`` are compared with: 4 processors for
    the initial sync (the issue's target), otherwise the best informer-bus configuration."""
    ours = [r for r in results if r.workload == workload and r.contender.startswith(INFORMER_BUS)]
    if workload == SYNC:
        return next(r for r in ours if r.contender == _ib(SYNC_REFERENCE))
    if workload == STEADY:
        return min(ours, key=lambda r: r.latency["p99_ms"])
    return max(ours, key=lambda r: r.rate)


def rows(results: list[Result]) -> list[dict[str, Any]]:
    """One row per (workload, contender), informer-bus first, with ratios, target, verdict.

    ratio (events/s) = informer-bus events/s / the row's; p99_ratio and rss_ratio = the row's
    p99 latency / peak RSS over informer-bus' (how many times worse)."""
    out: list[dict[str, Any]] = []
    for workload in WORKLOADS:
        ref = reference(results, workload)
        for r in (r for r in results if r.workload == workload):
            ours = r.contender.startswith(INFORMER_BUS)
            target: float | None = None
            met: bool | None = None
            ratio = None if ours else round(ref.rate / r.rate, 3)
            if workload == BURST and not ours:
                target = BURST_TARGETS.get(r.contender)
            elif workload == SYNC and not ours:
                target = SYNC_TARGETS.get(r.contender)
            if target is not None and ratio is not None:
                met = ratio >= target
            if workload == STEADY and ours:
                target, met = P99_TARGET_MS, r.latency["p99_ms"] <= P99_TARGET_MS
            row: dict[str, Any] = {
                "workload": workload,
                "contender": r.contender,
                "label": r.label,
                "events": r.events,
                "seconds": round(r.seconds, 6),
                "events_per_s": round(r.rate, 1),
                "reference": ref.label,
                "ratio": ratio,
                "peak_rss_mb": r.peak_rss_mb,
                "rss_ratio": None if ours else round(r.peak_rss_mb / ref.peak_rss_mb, 2),
                **r.latency,
                "target": target,
                "target_kind": None if target is None else
                ("max p99 ms" if workload == STEADY else "min ratio"),
                "met": met,
                **r.extra,
            }  # fmt: skip
            if r.latency and not ours:
                row["p99_ratio"] = round(r.latency["p99_ms"] / ref.latency["p99_ms"], 2)
            out.append(row)
    return out


def memory_targets(memory: dict[str, Any]) -> list[dict[str, Any]]:
    json_bytes = memory["pod_json_bytes"]
    plain = memory["processor_rss_growth_bytes_per_pod"] / json_bytes
    processor = memory["compact_processor_rss_growth_bytes_per_pod"] / json_bytes
    # Per cached pod: its own JSON, and that of its share of the retained stream entries.
    retained = 1 + memory["redis_stream_entries"] / memory["cached_pods"]
    redis_ratio = memory["redis_bytes_per_pod"] / (json_bytes * retained)
    return [
        {"what": "processor RSS growth per cached pod / pod JSON, compact cache",
         "ratio": round(processor, 2), "target": PROCESSOR_MEMORY_TARGET,
         "met": processor <= PROCESSOR_MEMORY_TARGET},
        {"what": "processor RSS growth per cached pod / pod JSON, plain dicts (the default)",
         "ratio": round(plain, 2), "target": PROCESSOR_MEMORY_TARGET,
         "met": plain <= PROCESSOR_MEMORY_TARGET},
        {"what": "Redis used_memory / JSON of (cached pods + retained stream entries)",
         "ratio": round(redis_ratio, 2), "target": REDIS_MEMORY_TARGET,
         "met": redis_ratio <= REDIS_MEMORY_TARGET},
    ]  # fmt: skip


def notes(report: dict[str, Any]) -> list[str]:
    m, s = report["machine"], report["sizes"]
    return [
        f"{m['cores']} cores shared by the simulator, redis-server, the reflector, up to 4 "
        "processors and this process: on so few cores more processors mostly add contention "
        "for CPU-bound work.",
        "ratio = informer-bus events/s / the row's events/s (the reference is 4 processors for "
        "the initial sync, the best informer-bus row otherwise); in the steady rows it is the "
        "row's p99 over informer-bus' best p99. target: the minimum ratio (or the maximum p99) "
        "the issue asks for.",
        "initial sync: informer-bus = the reflector's list into Redis + the processors' sync "
        "from the filled Redis, measured one after the other; the bare loop and the Watch only "
        "list (no handler call per listed pod); SharedInformer and kopf until their handler saw "
        "every pod.",
        "watch burst: first to last update handled. kopf may coalesce the events of one object "
        "within its 0.1 s batch window; its rows count every update sent ('handled' in the JSON "
        "says how many its handler saw).",
        f"steady: {s['steady_rate']:g} updates/s for {s['steady_seconds']:g} s; latency = the "
        "handler call minus the commit stamp the simulator wrote into the update (one "
        "CLOCK_MONOTONIC for every process; bench/pipeline.py).",
        "peak RSS: VmHWM of the contender's process up to the end of that workload; "
        "informer-bus: the largest processor's (the reflector's and redis-server's are in the "
        "memory lines).",
    ]


def _fmt(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def print_table(report: dict[str, Any]) -> None:
    m, s, mem = report["machine"], report["sizes"], report["memory"]
    print(f"informer-bus beside its peers: {m['cores']} cores ({m['cpu'] or 'unknown cpu'}), "
          f"Python {m['python']}, {m['platform']}")  # fmt: skip
    print(f"sizes: {s['pods']:,} pods, bursts of {s['burst']:,} updates, steady "
          f"{s['steady_rate']:g}/s for {s['steady_seconds']:g} s\n")  # fmt: skip
    header = (f"{'workload':13} {'contender':30} {'events':>8} {'seconds':>8} {'events/s':>9} "
              f"{'ratio':>7} {'p50 ms':>7} {'p99 ms':>8} {'peak RSS':>9}  target")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in report["rows"]:
        ratio = r.get("p99_ratio") if r["workload"] == STEADY else r["ratio"]
        target = ""
        if r["target"] is not None:
            target = (f"p99 <= {r['target']:g} ms " if r["target_kind"] == "max p99 ms"
                      else f">= {r['target']:g}x ")  # fmt: skip
            target += "met" if r["met"] else "MISSED"
        print(f"{r['workload']:13} {r['label']:30} {r['events']:>8,} {r['seconds']:8.2f} "
              f"{r['events_per_s']:>9,.0f} {_fmt(ratio, '.2f') + ('x' if ratio else ''):>7} "
              f"{_fmt(r.get('p50_ms'), '.1f'):>7} {_fmt(r.get('p99_ms'), '.1f'):>8} "
              f"{r['peak_rss_mb']:>6,.0f} MB  {target}".rstrip())  # fmt: skip
    print(f"\nmemory: pod JSON (managedFields stripped) {mem['pod_json_bytes']:,.0f} B; Redis "
          f"{mem['redis_bytes_per_pod']:,.0f} B per cached pod (known state + 1 stream entry); "
          f"processor RSS growth {mem['processor_rss_growth_bytes_per_pod']:,.0f} B per pod "
          f"({mem['compact_processor_rss_growth_bytes_per_pod']:,.0f} B compact); "
          f"peak RSS reflector {mem['reflector_peak_rss_mb']:,.0f} MB, redis-server "
          f"{mem['redis_peak_rss_mb']:,.0f} MB")  # fmt: skip
    for t in report["memory_targets"]:
        print(f"  {t['what']}: {t['ratio']:.2f}x (<= {t['target']:g}x) "
              f"{'met' if t['met'] else 'MISSED'}")  # fmt: skip
    print()
    for note in report["notes"]:
        print(textwrap.fill(note, width=100, initial_indent="* ", subsequent_indent="  "))


def write_chart(report: dict[str, Any], path: Path) -> str:
    """A PNG of events/s (sync, burst) and steady p50/p99 per contender, with matplotlib when
    it is installed (it is no dependency of the project); the line to print either way."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        return (f"chart skipped: matplotlib is not installed (pip install matplotlib, then "
                f"{PROGRAM} --chart-from REPORT.json --chart {path})")  # fmt: skip
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")
    figure, axes = pyplot.subplots(1, 3, figsize=(16, 5.5))
    for axis, workload in zip(axes[:2], (SYNC, BURST), strict=True):
        chosen = [r for r in report["rows"] if r["workload"] == workload]
        colours = ["tab:blue" if r["contender"].startswith(INFORMER_BUS) else "tab:gray"
                   for r in chosen]  # fmt: skip
        axis.barh([r["label"] for r in chosen], [r["events_per_s"] for r in chosen],
                  color=colours)  # fmt: skip
        axis.set_xscale("log")
        axis.invert_yaxis()
        axis.set_title(f"{workload}: events/s (log scale, higher is better)")
    chosen = [r for r in report["rows"] if r["workload"] == STEADY]
    positions = range(len(chosen))
    axes[2].barh([p - 0.2 for p in positions], [r["p50_ms"] for r in chosen], height=0.4,
                 label="p50", color="tab:green")  # fmt: skip
    axes[2].barh([p + 0.2 for p in positions], [r["p99_ms"] for r in chosen], height=0.4,
                 label="p99", color="tab:red")  # fmt: skip
    axes[2].set_yticks(list(positions), [r["label"] for r in chosen])
    axes[2].set_xscale("log")
    axes[2].invert_yaxis()
    axes[2].legend()
    axes[2].set_title(f"steady {report['sizes']['steady_rate']:g}/s: latency ms (log)")
    s, m = report["sizes"], report["machine"]
    figure.suptitle(f"{s['pods']:,} pods, bursts of {s['burst']:,}; {m['cores']} cores, "
                    f"{m['cpu']}")  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    pyplot.close(figure)
    return f"chart written to {path}"


# ----------------------------------------------------------------------------- command line


class Parser(argparse.ArgumentParser):
    """A user mistake ends in one line and exit status 2, as for every informer-bus command."""

    def error(self, message: str) -> NoReturn:
        sys.exit(fail(PROGRAM, message))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = Parser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    sizes = parser.add_argument_group("sizes (defaults: the issue's)")
    sizes.add_argument("--pods", type=int, help=f"pods to sync (default {DEFAULTS['pods']:,})")
    sizes.add_argument("--burst", type=int, help=f"updates per burst ({DEFAULTS['burst']:,})")
    sizes.add_argument(
        "--steady-seconds",
        type=float,
        help=f"length of the steady churn ({DEFAULTS['steady_seconds']:g})",
    )
    sizes.add_argument(
        "--steady-rate",
        type=float,
        help=f"updates/s of the steady churn ({DEFAULTS['steady_rate']:g})",
    )
    sizes.add_argument(
        "--quick",
        action="store_true",
        help="5k pods, bursts of 5k, 5 s steady: a try in about 2 minutes",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=CONTENDERS,
        help="leave a contender out (repeatable)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the report here")
    parser.add_argument(
        "--chart", type=Path, metavar="PATH.png", help="also draw a PNG chart (needs matplotlib)"
    )
    parser.add_argument(
        "--chart-from",
        type=Path,
        metavar="REPORT.json",
        help="measure nothing: draw --chart from an earlier --json report",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    # A contender's own process (ContenderChild); not for users.
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--sim-url", help=argparse.SUPPRESS)
    parser.add_argument("--log-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for name, default in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, type(default)(default))
    if args.child is not None:
        return args
    if args.pods < 1 or args.burst < 1:
        parser.error("--pods and --burst must be at least 1")
    if args.steady_seconds <= 0 or args.steady_rate <= 0:
        parser.error("--steady-seconds and --steady-rate must be positive")
    if args.chart_from is not None:
        if args.chart is None:
            parser.error("--chart-from needs --chart PATH.png")
        if not args.chart_from.is_file():
            parser.error(f"--chart-from: no such file: {args.chart_from}")
    for path in (args.json, args.chart):
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"no such directory: {path.parent}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.child is not None:
        return run_child(args)
    if args.chart_from is not None:
        print(write_chart(orjson.loads(args.chart_from.read_bytes()), args.chart))
        return 0
    stop_on_signals()
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        try:
            results, memory = measure(args, Path(tmp))
        except BenchError as exc:
            print(f"{PROGRAM}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted; every child process was stopped", file=sys.stderr)
            return 130
    report: dict[str, Any] = {
        "machine": machine(),
        "sizes": {"pods": args.pods, "burst": args.burst, "steady_seconds": args.steady_seconds,
                  "steady_rate": args.steady_rate, "skipped": sorted(args.skip)},
        "versions": {name: importlib.metadata.version(name)
                     for name in ("kubernetes", "kopf", "urllib3", "orjson", "redis")},
        "rows": rows(results),
        "memory": memory,
        "memory_targets": memory_targets(memory),
    }  # fmt: skip
    report["notes"] = notes(report)
    print_table(report)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    if args.chart is not None:
        print(write_chart(report, args.chart))
    return 0


if __name__ == "__main__":
    sys.exit(main())
