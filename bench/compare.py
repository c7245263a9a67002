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
  4 ``python -m processor_svc`` children (bench/pipeline.py's code); and, for issue 35, 1
  processor whose handler reads nothing of an object but its key (``bench_handlers:KeyOnly``,
  ``informer-bus, 1 processor, key-only``): bursts only, right after the 1-processor rows.

Every contender calls the same handler (``bench_handlers:Trivial``: it counts, and records every
update's churn step, the simulator's commit stamp and its own CLOCK_MONOTONIC reading), on the
same pods, for three workloads:

* **initial sync** of ``--pods`` pods: a contender's own LIST (or watch) until it holds every
  object (the ones with event handlers: until the handler saw every object). informer-bus: its
  **cold start**, the reflector and 4 processors spawned together on an empty Redis, until the
  handlers saw every pod and every processor is ready with its share of the shards (what a
  user waits for);
* **warm restart** (informer-bus only): 1, 2 and 4 processors restarted on the filled Redis,
  no API LIST, from their start-up line until all are ready with a balanced assignment; its
  yardstick is the bare reader's LIST. Each configuration restarts ``--rounds`` times, and
  bursts and churns (below) as many times: its rows are the rounds with the median CPU per
  event, because per-wake-up costs make a single round 10-25 % noisy on this machine. Every
  peer bursts and churns ``--rounds`` times too, its rows the median round (in runs 15 to 17
  their single bursts moved by up to 25 %). The bare reader, every ratio's yardstick, runs
  ``--bare-runs`` times (5 by default: one just before each other contender and one at the
  very end), bursts and churns ``--rounds`` times in each run, and its rows are the median
  of all of them (runs 13 and 14, with one burst per run, put 4 burst rows apart by 30 %: the
  yardstick's median moved by 19 %);
* **watch burst** of ``--burst`` updates generated while the simulator holds the watch
  streams, then released at once; from the first burst update a handler saw to the last (the
  key-only handler records no update: from the release to its last call). While informer-bus'
  processors burst, a thread looks at each one's ``/proc/<pid>/task`` every 5 ms: the most
  threads it ran at once (``threads`` in the JSON, the bench handler's one flusher included
  in ``peak`` and left out of the target);
* **steady** churn at ``--steady-rate`` updates/s for ``--steady-seconds``: the latency of
  every update from its commit in the simulator to its handler call, p50/p99: the handler's
  clock minus the stamp the simulator wrote into the update as it committed it, both
  CLOCK_MONOTONIC (bench/pipeline.py explains why it cannot be negative; a negative one fails
  the run).

kopf batches the events of one object (``settings.batching.batch_window``, 0.1 s): an object
updated twice within the window may reach the handler once, with its newest state. Its burst and
steady rows count every update the API server sent (the cache ends up the same), wait for the
last one and a quiet second after it (another object's batch may still be open), and say how
many the handler saw (``handled``).

Memory: peak RSS per process; Redis ``used_memory`` per cached pod after the reflector's list
(streams retain every delta: the initial list is in them); a processor's RSS growth per cached
pod during its sync. Both are compared with the JSON size of a pod as cached (managedFields
stripped, as the reflector does by default).

**CPU per event** (issue 16): user + system CPU of every process (``/proc``) over exactly each
workload's span, divided by its events: each peer's process; informer-bus' reflector,
redis-server and each processor; the simulator's beside them. It is the headline: on a shared
2-core machine events/s move 2-3x between runs, CPU per event does not.

Targets, as ratios measured in this run, the last section of the output (PASS or MISS;
``targets`` in the JSON, each with its issue). Issue 35, every figure the median of its
rounds, CPU per event over the bare reader's in the same workload: the processor's on the
burst with 1 processor, key-only handler <= 1.0x, handler reading ``new`` (``Trivial``) <=
1.8x; informer-bus in all <= 7x; SharedInformer's CPU per burst event >= 3x informer-bus' in
all; steady: the processor's <= 2x the bare reader's steady figure, informer-bus in all <= 0.6x
SharedInformer's, p99 <= 10 ms; burst events/s >= 5x SharedInformer's; cold start (4
processors) >= 5x faster than SharedInformer's initial sync; the processor owning all 16 shards
runs at most 6 threads (a 10 % view's <= 0.25x is ``bench/group_views.py``'s). Issue 16's that
issue 35 does not restate: reflector <= 1.5x, redis-server <= 1x, processor <= 1.5x, in all <=
4x; SharedInformer's >= 4x ours; steady p99 <= 3x the bare reader's; warm restart no slower
than the bare reader's LIST. Issue 8's, in the rows: burst events/s >= 5x SharedInformer, >= 3x
kopf, >= 0.6x the bare loop; initial sync with 4 processors >= 5x faster than SharedInformer;
p99 at the steady rate <= 10 ms; processor memory per cached pod <= 1.5x its JSON; Redis memory
<= 2x the JSON of the cached objects plus the retained stream.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import redis
from bench_handlers import Reporting
from compare_cli import parse
from compare_contenders import BARE, CONTENDERS, KOPF, LABELS, run_child
from compare_report import (
    BURST,
    PROGRAM,
    STEADY,
    SYNC,
    WARM,
    Result,
    informer_bus_key,
    informer_bus_label,
    key_only_key,
    key_only_label,
    median_burst,
    median_round,
    median_rounds,
    memory_targets,
    notes,
    print_table,
    rows,
    write_chart,
)
from compare_targets import print_targets, targets
from harness import BenchError, start_simulator_and_redis
from pipeline_workloads import burst, coalesced_to, steady
from proc_stats import CpuSpan, memory_kb, peak_rss_mb, process_cpu_seconds
from processor_group import KEY_ONLY, TRIVIAL, Group, ProcessorChild, group_running, wait_synced
from profiling import PySpy, RedisCommandCosts, print_command_costs
from reflector_child import ReflectorChild
from reporting import machine
from run_control import measure_in, progress, timeout_for, wait_for
from sim_control import Sim
from thread_sampler import ThreadSampler

from apiserver_sim import SimulatorSettings
from processor_svc.settings import COMPACT, PLAIN
from reflector_svc.transform import build_transform
from tests.support.redis_server import RedisServer

CONFIGURATIONS = ((1, COMPACT), (2, COMPACT), (4, COMPACT), (1, PLAIN))
"""informer-bus runs: (processors, cache); the default (compact) cache, and 1 processor with the
plain one beside it for the memory and CPU it trades."""
COLD_START_PROCESSORS = 4

STRIP = build_transform(is_secret=False)  # the reflector's default: managedFields stripped


# ----------------------------------------------------------------------------- orchestration


class ContenderChild(ProcessorChild):
    """``python -m compare --child KIND``: a peer in its own process, reporting to the same
    files as the processors' handler (so :class:`processor_group.Group` reads both alike)."""

    def __init__(self, kind: str, sim_url: str, pods: int, data_dir: Path, log_path: Path) -> None:
        super().__init__("", TRIVIAL, kind, data_dir, log_path)  # its environment, bench paths
        self.label = LABELS[kind]
        self.args = [sys.executable, "-m", "compare", "--log-json", "--child", kind,
                     "--sim-url", sim_url, "--pods", str(pods)]  # fmt: skip
        self.stop_timeout = 10.0
        self.sync_seconds: float | None = None
        self.sync_cpu_seconds = 0.0

    def on_message(self, message: str, arrived: float) -> None:
        if message == "started":
            self.cpu_at_started = process_cpu_seconds(self.pid)
        elif message.startswith("synced "):
            self.sync_cpu_seconds = process_cpu_seconds(self.pid) - self.cpu_at_started
            self.sync_seconds = float(message.split()[1])


class ContenderGroup(Group):
    """One contender child, read like a group of processors."""

    def __init__(self, child: ContenderChild, data_dir: Path, workdir: Path) -> None:
        super().__init__(0, TRIVIAL, "", data_dir=data_dir, workdir=workdir, tag=child.label)
        self.children = [child]


def contender_burst(
    sim: Sim, group: ContenderGroup, count: int, seed: int, kind: str, *, pids: dict[str, list[int]]
) -> Result:
    group.mark()
    with sim.burst_held(count, seed):
        span = CpuSpan(pids)
    what = f"{LABELS[kind]}'s burst"
    if kind == KOPF:
        coalesced_to(group, count - 1, what)
    else:
        wait_for(
            lambda: group.updates_seen() >= count, what, timeout_for(count), alive=group.check_alive
        )
    cpu = span.per_event_us(count)
    times = [update.handled for update in group.updates()]
    if kind != KOPF and len(times) != count:
        raise BenchError(f"{LABELS[kind]} saw {len(times)} updates for a burst of {count}")
    pid = group.children[0].pid
    return Result(BURST, kind, LABELS[kind], count, max(1e-6, max(times) - min(times)),
                  peak_rss_mb([pid]), extra={"handled": len(times)}, cpu=cpu)  # fmt: skip


def measure_steady(
    args: argparse.Namespace,
    sim: Sim,
    group: Group,
    seed: int,
    *,
    key: tuple[str, str],
    pids: dict[str, list[int]],
    coalescing: bool = False,
) -> Result:
    """The steady churn, and the CPU per update of every process in ``pids`` over it."""
    span = CpuSpan(pids)
    row, _ = steady(sim, group, args.steady_rate, args.steady_seconds, seed, coalescing=coalescing)
    cpu = span.per_event_us(row.events)
    latency = {k: row.extra[k] for k in ("p50_ms", "p99_ms", "max_ms") if k in row.extra}
    extra = {k: row.extra[k] for k in ("handled", "rate_churned") if k in row.extra}
    peak = peak_rss_mb([child.pid for child in group.children])
    return Result(STEADY, *key, row.events, row.seconds, peak, latency, extra, cpu)


def measure_contender(
    args: argparse.Namespace,
    sim: Sim,
    kind: str,
    workdir: Path,
    seeds: Iterator[int],
    *,
    run: int = 1,
) -> list[Result]:
    """A peer's three workloads, its burst and churn ``--rounds`` times each, every round a
    result (:func:`median_rounds` picks the rows); ``run``: which of the bare reader's runs."""
    label = LABELS[kind]
    shown = label + (f" (run {run} of {args.bare_runs})" if kind == BARE else "")
    name = f"{kind}-{run}"
    data_dir = workdir / f"data-{name}"
    data_dir.mkdir()
    child = ContenderChild(kind, sim.url, args.pods, data_dir, workdir / f"{name}.log")
    group = ContenderGroup(child, data_dir, workdir)
    results: list[Result] = []
    progress(args, f"{shown}: initial sync of {args.pods:,} pods")
    group.start()
    try:
        wait_for(
            lambda: child.sync_seconds is not None,
            f"{shown}'s initial sync",
            timeout_for(args.pods),
            alive=child.check_alive,
        )
        assert child.sync_seconds is not None
        sync_cpu = {"contender": round(child.sync_cpu_seconds / args.pods * 1e6, 1)}
        results.append(Result(SYNC, kind, label, args.pods, child.sync_seconds,
                              peak_rss_mb([child.pid]), cpu=sync_cpu))  # fmt: skip
        sim.wait_watching(alive=child.check_alive)
        pids = {"contender": [child.pid], "simulator": [sim.process.pid]}
        rounds = args.rounds
        for round_ in range(1, rounds + 1):
            progress(args, f"{shown}: burst of {args.burst:,} updates{of(round_, rounds)}")
            results.append(contender_burst(sim, group, args.burst, next(seeds), kind, pids=pids))
        for round_ in range(1, rounds + 1):
            progress(args, f"{shown}: {args.steady_rate:g} updates/s for "
                           f"{args.steady_seconds:g} s{of(round_, rounds)}")  # fmt: skip
            results.append(measure_steady(args, sim, group, next(seeds), key=(kind, label),
                                          pids=pids, coalescing=kind == KOPF))  # fmt: skip
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


def all_handled(group: Group) -> int:
    """Pods the group's handlers were given as adds (initial list or later), from their
    counters: what a cold start waits for."""
    counts = group.counts()
    return counts.get("initial_adds", 0) + counts.get("adds", 0)


def cold_start(
    args: argparse.Namespace,
    sim: Sim,
    server: RedisServer,
    *,
    workdir: Path,
    stack: contextlib.ExitStack,
) -> tuple[ReflectorChild, Result]:
    """The reflector and COLD_START_PROCESSORS processors started together on an empty Redis,
    timed from their spawn until the handlers have seen every pod and every processor is ready
    with its share of the shards: what a user waits for, the reflector listing while the
    processors consume. The handlers' count alone cannot end it: a shard handed over during
    the start is listed again, so the count can pass the pods before every pod was seen (the
    moment it does is ``handled_seconds``). The reflector stays up for the rest of the run."""
    label = informer_bus_label(COLD_START_PROCESSORS) + ", cold start"
    progress(args, f"{label}: reflector and processors started together, {args.pods:,} pods")
    data_dir = workdir / "data-cold"
    data_dir.mkdir()
    group = Group(COLD_START_PROCESSORS, TRIVIAL, server.url, data_dir=data_dir,
                  workdir=workdir, tag="cold")  # fmt: skip
    reflector = ReflectorChild(sim.url, server.url, workdir / "reflector.log")
    stack.callback(reflector.stop)
    assert server.process is not None
    spawned = time.monotonic()
    reflector.start()
    try:
        group.start()
        pids = {"reflector": [reflector.pid], "redis": [server.process.pid],
                "processors": [child.pid for child in group.children],
                "simulator": [sim.process.pid]}  # fmt: skip
        pids |= {f"processor-{i}": [child.pid] for i, child in enumerate(group.children)}
        span = CpuSpan(pids)  # the children were just forked: from spawn, imports included

        def alive() -> None:
            reflector.check_alive()
            group.check_alive()

        wait_for(lambda: all_handled(group) >= args.pods, "the cold start's handlers",
                 timeout_for(args.pods) + 60, alive=alive)  # fmt: skip
        handled_at = time.monotonic()
        wait_for(group.balanced, "the cold start's shard assignment", 120, alive=alive)
        ready_at = time.monotonic()
        cpu = span.per_event_us(args.pods)
        seconds = ready_at - spawned
        peak = peak_rss_mb([child.pid for child in group.children])
        handled = all_handled(group)
    finally:
        group.stop()
    extra = {
        "reflector_list_seconds": round(reflector.synced - reflector.listing, 3)
        if reflector.synced
        else None,
        "handled": handled,  # more than the pods: a shard was handed over and listed again
        "handled_seconds": round(handled_at - spawned, 3),
    }
    result = Result(SYNC, informer_bus_key(COLD_START_PROCESSORS), label, args.pods, seconds,
                    peak, extra=extra, cpu=cpu)  # fmt: skip
    wait_for(lambda: reflector.synced > 0, "the reflector's initial list", timeout_for(args.pods),
             alive=reflector.check_alive)  # fmt: skip
    return reflector, result


def warm_restart(
    args: argparse.Namespace, group: Group, contender: str, label: str, redis_pid: int
) -> Result:
    """Processors started on a filled Redis (no API LIST): from the first one's "started" line
    until every one is ready with a balanced assignment; CPU from each one's "started" line
    (the caller has waited for those lines: it reads each one's RSS there)."""
    redis_span = CpuSpan({"redis": [redis_pid]})
    from_started, from_spawn = wait_synced(group, args.pods)
    cpu = redis_span.per_event_us(args.pods)
    each = [process_cpu_seconds(c.pid) - c.cpu_at_started for c in group.children]
    cpu["processors"] = round(sum(each) / args.pods * 1e6, 1)
    cpu |= {f"processor-{i}": round(us / args.pods * 1e6, 1) for i, us in enumerate(each)}
    extra = {"seconds_from_spawn": round(from_spawn, 3)}
    return Result(WARM, contender, label, args.pods, from_started,
                  peak_rss_mb([c.pid for c in group.children]), extra=extra, cpu=cpu)  # fmt: skip


def measured_restart(
    args: argparse.Namespace, group: Group, contender: str, label: str, redis_pid: int
) -> tuple[Result, float]:
    """A warm restart's row, and the processors' RSS growth per cached pod over it."""
    pids = [child.pid for child in group.children]
    wait_for(lambda: all(c.url for c in group.children), "the processors' start", 120,
             alive=group.check_alive)  # fmt: skip
    before = sum(memory_kb(pid, "VmRSS") for pid in pids)
    result = warm_restart(args, group, contender, label, redis_pid)
    after = sum(memory_kb(pid, "VmRSS") for pid in pids)
    return result, (after - before) * 1024 / args.pods


def informer_bus_burst(
    args: argparse.Namespace,
    sim: Sim,
    group: Group,
    redis_url: str,
    seed: int,
    *,
    key: tuple[str, str],
    others: dict[str, int],
    spy: PySpy | None,
) -> Result:
    """One burst through running processors: CPU per event of each process, the Redis
    commands it took, and (given ``spy``) where the reflector's and a processor's CPU went."""
    contender, label = key
    pids = [child.pid for child in group.children]
    if spy is not None:
        spy.start({"reflector": others["reflector"], "processor": pids[0]}, "burst")
    commands = RedisCommandCosts(redis_url)
    try:
        with ThreadSampler(pids) as sampler:
            seconds, cpu = burst(sim, group, args.burst, seed, others)
    finally:
        if spy is not None:
            spy.stop()
    redis_commands = commands.per_event(args.burst)
    if spy is not None:
        print_command_costs(f"{label}, burst", redis_commands)
    per_event = {name.removesuffix("_cpu_us_per_event"): us for name, us in cpu.items()}
    threads = {"peak": sampler.peak(), "distinct": sampler.distinct(),
               "samples": sampler.samples, "bench_handler": Reporting.threads}  # fmt: skip
    return Result(BURST, contender, label, args.burst, seconds, peak_rss_mb(pids),
                  extra={"redis_commands": redis_commands, "threads": threads},
                  cpu=per_event)  # fmt: skip


def key_only_bursts(
    args: argparse.Namespace,
    sim: Sim,
    redis_url: str,
    workdir: Path,
    seeds: Iterator[int],
    *,
    others: dict[str, int],
) -> Result:
    """1 processor whose handler reads nothing of an object but its key (issue 35's first
    target: what the processor itself costs per event), restarted on the filled Redis and
    burst ``--rounds`` times right after the same configuration with the peers' handler. Its
    handler cannot read the commit stamp, so it has no steady churn (no latency)."""
    label, contender = key_only_label(1), key_only_key(1)
    progress(args, f"{label}: restart on the filled Redis")
    with group_running(1, KEY_ONLY, redis_url, workdir, "k1") as group:
        wait_synced(group, args.pods)
        bursts = []
        for round_ in range(1, args.rounds + 1):
            progress(args, f"{label}: burst of {args.burst:,} updates{of(round_, args.rounds)}")
            bursts.append(informer_bus_burst(args, sim, group, redis_url, next(seeds),
                                             key=(contender, label), others=others,
                                             spy=None))  # fmt: skip
    return median_burst(bursts)


def of(round_: int, rounds: int) -> str:
    return f" (round {round_} of {rounds})" if rounds > 1 else ""


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
    reflector, cold = cold_start(args, sim, server, workdir=workdir, stack=stack)
    sim.wait_watching(alive=reflector.check_alive)
    redis_bytes = used_memory(server.url) - empty_redis
    json_bytes = pod_json_bytes(sim)
    assert server.process is not None
    redis_pid = server.process.pid
    others = {"reflector": reflector.pid, "redis": redis_pid, "simulator": sim.process.pid}
    results: list[Result] = [cold]
    spy = PySpy(args.py_spy)
    processor_growth: dict[tuple[int, str], float] = {}
    for count, cache in CONFIGURATIONS:
        label, contender = informer_bus_label(count, cache), informer_bus_key(count, cache)
        tag = f"t{count}" + ("p" if cache == PLAIN else "")
        restarts: list[Result] = []
        for round_ in range(1, args.rounds):  # the earlier restarts: measured, then stopped
            progress(args, f"{label}: warm restart on the filled Redis{of(round_, args.rounds)}")
            with group_running(count, TRIVIAL, server.url, workdir, f"{tag}r{round_}",
                               cache=cache) as group:  # fmt: skip
                restarts.append(measured_restart(args, group, contender, label, redis_pid)[0])
        progress(args, f"{label}: warm restart on the filled Redis{of(args.rounds, args.rounds)}")
        with group_running(count, TRIVIAL, server.url, workdir, tag, cache=cache) as group:
            restart, processor_growth[count, cache] = measured_restart(
                args, group, contender, label, redis_pid
            )
            results.append(median_round([*restarts, restart]))
            pids = [child.pid for child in group.children]
            bursts: list[Result] = []
            for round_ in range(1, args.rounds + 1):
                progress(args, f"{label}: burst of {args.burst:,} updates{of(round_, args.rounds)}")
                # the row issue 16's targets are read from, profiled once
                profiled = (count, cache) == CONFIGURATIONS[0] and round_ == 1
                bursts.append(informer_bus_burst(args, sim, group, server.url, next(seeds),
                                                 key=(contender, label), others=others,
                                                 spy=spy if profiled else None))  # fmt: skip
            results.append(median_burst(bursts))
            every = {"processors": pids, **{f"processor-{i}": [pid] for i, pid in enumerate(pids)},
                     **{name: [pid] for name, pid in others.items()}}  # fmt: skip
            churns: list[Result] = []
            for round_ in range(1, args.rounds + 1):
                progress(args, f"{label}: {args.steady_rate:g} updates/s for "
                               f"{args.steady_seconds:g} s{of(round_, args.rounds)}")  # fmt: skip
                churns.append(measure_steady(args, sim, group, next(seeds),
                                             key=(contender, label), pids=every))  # fmt: skip
            results.append(median_round(churns))
        if (count, cache) == CONFIGURATIONS[0]:
            results.append(key_only_bursts(args, sim, server.url, workdir, seeds, others=others))
        reflector.check_alive()
    spy.print_summaries()
    reflector_peak = peak_rss_mb([reflector.pid])
    reflector.stop()  # a later bare run must not share the simulator's watches with it
    sim.end_watches()
    memory = {
        "pod_json_bytes": round(json_bytes, 1),
        "cached_pods": args.pods,
        "redis_used_memory_bytes": redis_bytes,
        "redis_bytes_per_pod": round(redis_bytes / args.pods, 1),
        "redis_stream_entries": args.pods,
        "processor_rss_growth_bytes_per_pod": round(processor_growth[1, COMPACT], 1),
        "plain_processor_rss_growth_bytes_per_pod": round(processor_growth[1, PLAIN], 1),
        "reflector_peak_rss_mb": reflector_peak,
        "redis_peak_rss_mb": peak_rss_mb([redis_pid]),
    }
    return results, memory


def bare_schedule(runs: int, peers: int) -> tuple[list[int], int]:
    """Where the bare reader's ``runs`` go among the contenders: how many right before each of
    the ``peers`` and before informer-bus (the list), and how many at the very end.

    The first run comes before everything and, with more than one, the last after everything;
    the others are spread evenly over the contenders, so that with the default five there is
    one beside every contender (issue 16: runs 15 to 17 moved the yardstick's run-level offset
    by up to 25 %, and a drift over a quarter of an hour then weighs on one run of five)."""
    slots = [0] * (peers + 1)
    between = runs - 1 if runs > 1 else runs
    for run in range(between):
        slots[run * len(slots) // between] += 1
    return slots, runs - between


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
        peers = [kind for kind in CONTENDERS if kind not in args.skip and kind != BARE]
        before, after = bare_schedule(args.bare_runs if BARE not in args.skip else 0, len(peers))
        bare_runs: list[list[Result]] = []

        def bare_run() -> None:
            run = len(bare_runs) + 1
            bare_runs.append(measure_contender(args, sim, BARE, workdir, seeds, run=run))

        for slot, kind in enumerate(peers):
            for _ in range(before[slot]):
                bare_run()
            results += median_rounds([measure_contender(args, sim, kind, workdir, seeds)])
        for _ in range(before[-1]):
            bare_run()
        ours, memory = measure_informer_bus(
            args, sim, server, workdir=workdir, stack=stack, seeds=seeds
        )
        for _ in range(after):
            bare_run()
    return ours + median_rounds(bare_runs) + results, memory


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv, description=__doc__.split("\n\n")[0])
    if args.child is not None:
        return run_child(args)
    if args.chart_from is not None:
        print(write_chart(orjson.loads(args.chart_from.read_bytes()), args.chart))
        return 0
    results, memory = measure_in("bench-compare-", PROGRAM, lambda workdir: measure(args, workdir))
    report: dict[str, Any] = {
        "machine": machine(),
        "sizes": {"pods": args.pods, "burst": args.burst, "steady_seconds": args.steady_seconds,
                  "steady_rate": args.steady_rate, "skipped": sorted(args.skip),
                  "bare_runs": args.bare_runs, "rounds": args.rounds},
        "versions": {name: importlib.metadata.version(name)
                     for name in ("kubernetes", "kopf", "urllib3", "orjson", "redis")},
        "rows": rows(results),
        "memory": memory,
        "memory_targets": memory_targets(memory),
    }  # fmt: skip
    report["targets"] = targets(report["rows"])
    report["notes"] = notes(report)
    print_table(report)
    print_targets(report)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    if args.chart is not None:
        print(write_chart(report, args.chart))
    return 0


if __name__ == "__main__":
    sys.exit(main())
