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
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import urllib3
from harness import start_simulator_and_redis
from inprocess_readers import (
    bare_list,
    bare_watch_burst,
    frozen_heap,
    official_list,
    official_watch_burst,
    shared_informer,
)
from kubernetes import client as kube_client
from profiling import PySpy
from reflector_child import PAGE_SIZE, SHARDS, ReflectorRun, reflector_run
from reflector_report import (
    BARE,
    BURST,
    INFORMER,
    LIST,
    OFFICIAL,
    REFLECTOR,
    Measurement,
    Sizes,
    notes,
    print_table,
    rows,
)
from reporting import machine
from run_control import measure_in, progress
from sim_control import Sim

from apiserver_sim import SimulatorSettings


def measure(args: argparse.Namespace, sizes: Sizes, workdir: Path) -> list[Measurement]:
    """Every reader, one at a time, against one simulator child and one private Redis."""
    settings = SimulatorSettings(
        history_max_events=max(100_000, 2 * sizes.burst), history_max_age=3600.0
    )
    seeds = iter(range(100, 1_000_000))
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"simulator at {sim.url}, redis-server at {server.url}")
        # The official client's readers first (on a smaller population if asked) ...
        progress(args, f"populating {sizes.slow_pods:,} pods")
        sim.populate(sizes.slow_pods, seed=1)
        results = measure_official(args, sizes, sim, stack, seeds)
        # ... then the bare loop and the reflector on the full one, taking turns.
        if sizes.pods > sizes.slow_pods:
            progress(args, f"populating {sizes.pods - sizes.slow_pods:,} more pods")
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
        progress(args, f"{what}: kubernetes client, LIST of {sizes.slow_pods:,} pods")
        with frozen_heap():
            lists.append(official_list(api, sizes.slow_pods))
        progress(args, f"{what}: kubernetes client, Watch of {sizes.slow_burst:,} updates")
        with frozen_heap():
            watches.append(official_watch_burst(sim, api, sizes.slow_burst, next(seeds)))
        sim.end_watches()
        progress(args, f"{what}: SharedInformer, list then burst")
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
    bare_burst_cpus: list[float] = []
    runs: list[ReflectorRun] = []
    baseline_runs: list[ReflectorRun] = []
    for attempt in range(sizes.repeat):
        what = f"round {attempt + 1}/{sizes.repeat}"
        progress(args, f"{what}: bare loop, LIST of {sizes.pods:,} pods")
        with frozen_heap():
            bare_lists.append(bare_list(pool, sim.url, sizes.pods))
        progress(args, f"{what}: bare loop, watch of {sizes.burst:,} updates")
        with frozen_heap():
            seconds, cpu = bare_watch_burst(sim, pool, sizes.burst, next(seeds))
        bare_bursts.append(seconds)
        bare_burst_cpus.append(cpu)
        sim.end_watches()
        progress(args, f"{what}: reflector, list then burst")
        log_path = workdir / f"reflector-{attempt}.log"
        runs.append(reflector_run(sim, redis_url, sizes, next(seeds), log_path=log_path, spy=spy))
        sim.end_watches()
        if args.baseline_root is not None:
            progress(args, f"{what}: baseline reflector ({args.baseline_root}), list then burst")
            log_path = workdir / f"baseline-{attempt}.log"
            baseline_runs.append(
                reflector_run(sim, redis_url, sizes, next(seeds), log_path=log_path,
                              spy=PySpy(None), root=args.baseline_root)
            )  # fmt: skip
            sim.end_watches()
    spy.print_summaries()
    best = min(runs, key=lambda run: run.list_seconds)
    wall = {
        "wall_seconds_from_spawn": round(best.wall_seconds, 3),
        "cpu_us_per_event": round(1e6 * best.list_cpu_seconds / sizes.pods, 2),
        # Read back from Redis after each run: what the reflector published.
        "stream_entries_runs": [run.listed_entries for run in runs],
        "synced_shards_runs": [run.synced_shards for run in runs],
    }
    best_burst = min(runs, key=lambda run: run.burst_seconds)

    def per_event(seconds: list[float]) -> list[float]:
        return [round(1e6 * s / sizes.burst, 2) for s in seconds]

    # CPU per burst event of the reflector and of redis-server, and their ratio to the bare
    # loop's, round by round (each round's bare loop ran just before its reflector).
    reflector_cpu = per_event([run.burst_cpu_seconds for run in runs])
    redis_cpu = per_event([run.redis_burst_cpu_seconds for run in runs])
    bare_cpu = per_event(bare_burst_cpus)
    burst_cpu = {
        "cpu_us_per_event": round(1e6 * best_burst.burst_cpu_seconds / sizes.burst, 2),
        "cpu_us_per_event_runs": reflector_cpu,
        "redis_cpu_us_per_event_runs": redis_cpu,
        "bare_cpu_us_per_event_runs": bare_cpu,
        "reflector_to_bare_cpu_runs": [
            round(r / b, 2) for r, b in zip(reflector_cpu, bare_cpu, strict=True)
        ],
        "redis_to_bare_cpu_runs": [
            round(r / b, 2) for r, b in zip(redis_cpu, bare_cpu, strict=True)
        ],
        "redis_commandstats": best_burst.redis_commandstats,
        "stream_entries_runs": [run.burst_entries for run in runs],
    }
    if baseline_runs:
        burst_cpu["baseline_cpu_us_per_event_runs"] = per_event(
            [run.burst_cpu_seconds for run in baseline_runs]
        )
        burst_cpu["baseline_redis_cpu_us_per_event_runs"] = per_event(
            [run.redis_burst_cpu_seconds for run in baseline_runs]
        )
        burst_cpu["baseline_runs_seconds"] = [round(run.burst_seconds, 4) for run in baseline_runs]
    return [
        Measurement(REFLECTOR, LIST, sizes.pods, best.list_seconds,
                    [run.list_seconds for run in runs], wall),
        Measurement(REFLECTOR, BURST, sizes.burst, best_burst.burst_seconds,
                    [run.burst_seconds for run in runs], burst_cpu),
        Measurement(BARE, LIST, sizes.pods, min(bare_lists), bare_lists),
        Measurement(BARE, BURST, sizes.burst, min(bare_bursts), bare_bursts),
    ]  # fmt: skip


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
    parser.add_argument(
        "--baseline-root",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run the reflector of another checkout (e.g. `git archive` of a commit into "
        "DIR) after each round's, and report its burst CPU beside this one's (same run)",
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
    results = measure_in(
        "bench-reflector-", "bench/reflector.py", lambda workdir: measure(args, sizes, workdir)
    )
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
