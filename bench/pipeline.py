"""End to end: simulator -> reflector -> Redis -> processors -> handler, beside
``kubernetes.informer.SharedInformer`` on the same simulator, in one run (issue 5, "Benchmark").

Not a test: timings on a shared machine are noisy, so nothing asserts them. Run it from the
repository root (it starts the simulator, a private redis-server, one reflector and the
processors as child processes; it never touches a Redis that happens to run on the machine)::

    .venv/bin/python bench/pipeline.py [--pods 100000] [--burst 30000] [--json]

What runs, in order (one thing measured at a time):

1. **SharedInformer** (in this process) on the first ``--informer-pods`` pods: its initial
   list (one unpaginated LIST, until its ADDED handlers saw every pod) and a watch burst of
   ``--informer-burst`` updates (first to last MODIFIED handled). Code from
   bench/inprocess_readers.py.
2. The simulator is filled up to ``--pods``; one ``python -m reflector_svc`` child lists them
   into Redis and stays up (watching) for the rest of the run.
3. For 1, 2 and 4 ``python -m processor_svc`` children with the trivial handler
   (``bench_handlers:Trivial``), started together on the filled Redis:

   * **initial sync**: from the first child's "started" log line (imports done) until every
     child answers ``/readyz`` 200 and the shard assignment is balanced (16 shards, each child
     owning 16 // n or one more); the time from spawn is reported too;
   * **watch burst**: ``--burst`` pod updates generated while the simulator holds its watch
     streams, then released at once; timed from the first update a handler saw to the last.
     The simulator's events travel through the reflector, Redis and the processors;
   * **steady** (with ``--steady-processors`` children only): churn at ``--steady-rate``
     updates/s for ``--steady-seconds``; the latency of every update from its commit in the
     simulator to its handler call, p50/p99 (below).

4. For 1 and 4 children with the I/O-bound handler (``bench_handlers:IoBound``, 2 ms of
   waiting per live event): a burst of ``--io-burst`` updates; the scale-out ratio.

Event-to-handler latency, measured, not estimated: the steady churn asks the simulator to stamp
every update it commits (the annotation ``sim.informer-bus.io/committed-at``: CLOCK_MONOTONIC
nanoseconds, read under the store lock before the new revision exists, so before any watcher
can receive it). The handler reads the same clock when it is called (``bench_handlers``); one
clock for every process of this machine, so handler time minus stamp is the latency, and a
negative one can only be a clock bug: the bench then fails (``BenchError``) instead of printing
it. The simulator's own account of the churn (how many updates, at what rate it kept up) says
how many updates to wait for and how close to ``--steady-rate`` it ran.

Targets (issue 5): end-to-end burst events/s >= 5x SharedInformer's; with the I/O-bound
handler, 4 processors >= 3.5x the throughput of 1.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import redis
from harness import BenchError, start_simulator_and_redis
from inprocess_readers import frozen_heap, shared_informer
from kubernetes import client as kube_client
from pipeline_report import (
    BURST,
    INFORMER_TARGET,
    IO_BURST,
    SCALE_OUT_TARGET,
    SYNC,
    Row,
    notes,
    print_table,
    processors_label,
)
from pipeline_workloads import burst, steady
from processor_group import IO_BOUND, TRIVIAL, group_running, per_processor, wait_synced
from reflector_child import SHARDS, ReflectorChild, stream_entries, synced_shards
from reporting import machine
from run_control import measure_in, progress, timeout_for, wait_for
from sim_control import Sim

from apiserver_sim import SimulatorSettings

PROCESSOR_COUNTS = (1, 2, 4)
IO_COUNTS = (1, 4)


# ----------------------------------------------------------------------------- the run


def informer_rows(
    args: argparse.Namespace, sim: Sim, stack: contextlib.ExitStack, seeds: Iterator[int]
) -> tuple[Row, Row]:
    configuration = kube_client.Configuration()
    configuration.host = sim.url
    api = kube_client.ApiClient(configuration)
    stack.callback(api.close)
    progress(
        args,
        f"SharedInformer: list of {args.informer_pods:,} pods, burst of "
        f"{args.informer_burst:,} updates",
    )
    with frozen_heap():
        list_s, burst_s = shared_informer(
            sim, api, args.informer_pods, args.informer_burst, next(seeds)
        )
    sim.end_watches()
    return (
        Row(
            SYNC,
            "SharedInformer",
            args.informer_pods,
            list_s,
            extra={"note": "one unpaginated LIST"},
        ),
        Row(BURST, "SharedInformer", args.informer_burst, burst_s),
    )


def start_reflector(
    args: argparse.Namespace, sim: Sim, redis_url: str, workdir: Path, stack: contextlib.ExitStack
) -> ReflectorChild:
    progress(args, f"reflector: listing {args.pods:,} pods into Redis")
    reflector = ReflectorChild(sim.url, redis_url, workdir / "reflector.log")
    stack.callback(reflector.stop)
    reflector.start()
    wait_for(
        lambda: reflector.synced > 0,
        "the reflector's initial list",
        timeout_for(args.pods),
        alive=reflector.check_alive,
    )
    client = redis.Redis.from_url(redis_url, socket_timeout=60)
    try:
        entries, synced = stream_entries(client), synced_shards(client)
    finally:
        client.close()
    if entries != args.pods or synced != SHARDS:
        raise BenchError(
            f"the reflector published {entries} of {args.pods} pods, "
            f"{synced}/{SHARDS} shards synced"
        )
    sim.wait_watching(alive=reflector.check_alive)
    return reflector


def measure(args: argparse.Namespace, workdir: Path) -> tuple[list[Row], dict[str, Any]]:
    settings = SimulatorSettings(
        history_max_events=max(100_000, 2 * args.burst), history_max_age=3600.0
    )
    seeds = iter(range(100, 1_000_000))
    rows: list[Row] = []
    latency: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"simulator at {sim.url}, redis-server at {server.url}")
        progress(args, f"populating {args.informer_pods:,} pods")
        sim.populate(args.informer_pods, seed=1)
        informer_list, informer_burst = informer_rows(args, sim, stack, seeds)
        rows += [informer_list, informer_burst]
        if args.pods > args.informer_pods:
            progress(args, f"populating {args.pods - args.informer_pods:,} more pods")
            sim.populate(args.pods - args.informer_pods, seed=2)
        reflector = start_reflector(args, sim, server.url, workdir, stack)
        assert server.process is not None
        others = {
            "reflector": reflector.pid,
            "redis": server.process.pid,
            "simulator": process.pid,
        }
        for count in PROCESSOR_COUNTS:
            progress(args, f"{processors_label(count)}, trivial handler: initial sync")
            with group_running(count, TRIVIAL, server.url, workdir, f"t{count}") as group:
                from_started, from_spawn = wait_synced(group, args.pods)
                extra = {
                    "seconds_from_spawn": round(from_spawn, 3),
                    "initial_adds": group.counts().get("initial_adds"),
                }
                rows.append(
                    Row(
                        SYNC,
                        processors_label(count),
                        args.pods,
                        from_started,
                        baseline="SharedInformer",
                        baseline_rate=informer_list.rate,
                        extra=extra,
                    )
                )
                progress(
                    args, f"{processors_label(count)}, trivial handler: burst of {args.burst:,}"
                )
                seconds, cpu = burst(sim, group, args.burst, next(seeds), others)
                cpu["handled"] = group.updates_seen()  # the handlers' own count
                rows.append(
                    Row(
                        BURST,
                        processors_label(count),
                        args.burst,
                        seconds,
                        baseline="SharedInformer",
                        baseline_rate=informer_burst.rate,
                        target=INFORMER_TARGET,
                        extra=cpu,
                    )
                )
                if count == args.steady_processors:
                    progress(
                        args,
                        f"{processors_label(count)}: steady {args.steady_rate:g} updates/s "
                        f"for {args.steady_seconds:g} s",
                    )
                    row, latency = steady(
                        sim, group, args.steady_rate, args.steady_seconds, next(seeds)
                    )
                    rows.append(row)
            reflector.check_alive()
        single: Row | None = None
        for count in IO_COUNTS:
            progress(args, f"{processors_label(count)}, 2 ms handler: burst of {args.io_burst:,}")
            with group_running(count, IO_BOUND, server.url, workdir, f"io{count}") as group:
                wait_synced(group, args.pods)
                seconds, cpu = burst(sim, group, args.io_burst, next(seeds), others)
                cpu["handled"] = group.updates_seen()  # the handlers' own count
                shares = per_processor(group)
            progress(args, "  per processor (events, busy s): " + ", ".join(
                f"{n} in {busy:.2f} s" for n, busy in shares))  # fmt: skip
            row = Row(IO_BURST, processors_label(count), args.io_burst, seconds, extra=cpu)
            row.extra["per_processor"] = shares
            if single is None:
                single = row
            else:
                row.baseline, row.baseline_rate = "1 processor", single.rate
                row.target = SCALE_OUT_TARGET
            rows.append(row)
            reflector.check_alive()
    return rows, latency


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000, help="pods to sync")
    parser.add_argument("--burst", type=int, default=30_000, help="updates per burst")
    parser.add_argument(
        "--io-burst", type=int, default=6_000, help="updates per burst with the 2 ms handler"
    )
    parser.add_argument(
        "--informer-pods",
        type=int,
        default=None,
        help="SharedInformer's list size (default: --pods)",
    )
    parser.add_argument(
        "--informer-burst",
        type=int,
        default=None,
        help="SharedInformer's burst size (default: --burst)",
    )
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    parser.add_argument("--steady-rate", type=float, default=1000.0, help="updates/s")
    parser.add_argument("--steady-processors", type=int, default=1, choices=PROCESSOR_COUNTS)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    args.informer_pods = args.pods if args.informer_pods is None else args.informer_pods
    args.informer_burst = args.burst if args.informer_burst is None else args.informer_burst
    for name in ("pods", "burst", "io_burst", "informer_pods", "informer_burst"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.steady_seconds <= 0 or args.steady_rate <= 0:
        parser.error("--steady-seconds and --steady-rate must be positive")
    if args.informer_pods > args.pods:
        parser.error("--informer-pods cannot exceed --pods")
    rows, latency = measure_in(
        "bench-pipeline-", "bench/pipeline.py", lambda workdir: measure(args, workdir)
    )
    report: dict[str, Any] = {
        "machine": machine(),
        "sizes": {
            "pods": args.pods,
            "burst": args.burst,
            "io_burst": args.io_burst,
            "informer_pods": args.informer_pods,
            "informer_burst": args.informer_burst,
            "steady_seconds": args.steady_seconds,
            "steady_rate": args.steady_rate,
            "steady_processors": args.steady_processors,
            "shards": SHARDS,
        },
        "rows": [row.as_dict() for row in rows],
        "latency": latency,
    }
    report["notes"] = notes(args, report)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
