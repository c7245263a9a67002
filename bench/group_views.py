"""Processor groups with views (issue 14): what a group pays for the pods it does not keep, and
what a ``--project metadata`` cache holds per pod, against an unfiltered group in the same run.

Not a test: nothing asserts a timing. Run it from the repository root (it starts the simulator,
a private redis-server, one reflector and one processor per group as child processes)::

    .venv/bin/python bench/group_views.py [--pods 20000] [--updates 20000] [--json] [--quick]

What runs:

1. The simulator holds ``--pods`` pods, spread round-robin over its 10 namespaces; one
   ``python -m reflector_svc`` lists them into Redis and keeps watching (one watch).
2. On that Redis and that reflector, one processor per group (``--group NAME``, handler
   ``bench_handlers:Trivial``), all started together and waited for until synced:

   * ``full``: no view: the baseline of both ratios;
   * ``filtered``: ``--namespace ns-03``, one namespace of 10 (10 % of the pods, exactly);
   * ``labels``: ``--label-selector app=checkout``, one app of 8 (~12.5 %; the churn never
     changes ``app``, so the same pods stay in the view): reported, no target;
   * ``metadata``: ``--project metadata``, every pod, apiVersion/kind/metadata only;
   * ``minimal``: ``--project metadata.name``, every pod, only what a projection always keeps
     (name, namespace, uid, resourceVersion): what a cached pod costs whatever it holds, the
     floor under ``metadata``'s figure (reported, no target);
   * ``empty``: ``--namespace`` of a namespace without pods: the zero-cache baseline (its RSS
     is the interpreter, the libraries and the processor's own structures).

   After the sync: each processor's VmRSS and the pods its handler was given (the initial
   list's adds), checked against the simulator's own list of what the view selects.
3. ``--updates`` pod updates as one watch burst (``bench/sim_control.py``), twice:

   * **as they arrive** (the issue's figure): the processors read while the reflector
     publishes, so a group that keeps up reads small batches;
   * **as a backlog**: the processors are stopped (SIGSTOP) until the whole burst is in Redis,
     then read it in full batches, as after a pause; it tells the cost per entry apart from
     the cost per read.

   Each processor's CPU (user + system, ``/proc``) from the burst's release (the simulator
   generates it first, every reader idle meanwhile) until its group has consumed every entry of
   it: on every shard, the consumer group delivered up to the
   stream's last entry and has none pending (``bench/group_progress.py``). CPU per stream entry
   divides by ``--updates``: every group reads every entry; only what it does with one differs.
   Last, each processor's CPU over 3 idle seconds (heartbeats, lease renewals, reads timing out).
4. Ratios, measured in this run: the 10 % view's (``filtered``) CPU per entry / the
   unfiltered group's (``full``), as entries arrive (issues 14 and 35: target <= 0.25; the
   backlog's is reported beside it, no target); cache bytes per pod =
   (RSS - ``empty``'s RSS) / pods held, ``metadata`` / ``full`` (target <= 0.15). PASS or MISS
   is printed; the exit status is 0 either way (a measurement),
   1 only when something went wrong (a child died, a count did not add up).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
from group_progress import keys_after, positions
from group_views_report import print_report, summarize
from harness import BenchError, start_simulator_and_redis
from pipeline import start_reflector
from proc_stats import memory_kb, process_cpu_seconds
from processor_group import TRIVIAL, Group, group_running, wait_synced
from reflector_child import SHARDS, ReflectorChild, last_ids, stream_entries
from reporting import machine
from run_control import measure_in, progress, timeout_for, wait_for
from sim_control import RESOURCE, Sim

from apiserver_sim import SimulatorSettings

KEPT_NAMESPACE = "ns-03"
NO_PODS_NAMESPACE = "ns-without-pods"
IDLE_SECONDS = 3.0
PATIENT = {"member-ttl": 120, "lease-duration": 180, "renew-deadline": 150}
"""Membership and lease timeouts that outlast the backlog burst's SIGSTOP (the heartbeat and
renewal intervals, which cost CPU, keep their defaults): a paused processor must come back
still owning its shards, not to a takeover that would re-deliver the initial list."""
POLL_INTERVAL = 0.02
"""Seconds between looks at the consumer groups while the burst drains: the CPU span of a
group ends at most this long after it caught up."""


@dataclass(frozen=True)
class View:
    """One processor group: its name (also its ``--group``), its view flags and how the
    simulator is asked for the same selection."""

    name: str
    flags: dict[str, str] = field(default_factory=dict)
    namespace: str | None = None
    label_selector: str | None = None
    role: str = ""
    compact_cache: bool = False

    @property
    def description(self) -> str:
        flags = [f"--{flag} {value}" for flag, value in self.flags.items()]
        flags += ["--cache compact" if self.compact_cache else "--cache plain"]
        return " ".join(flags)


VIEWS = (
    View("full", role="baseline"),
    View("filtered", {"namespace": KEPT_NAMESPACE}, namespace=KEPT_NAMESPACE, role="10 % view"),
    View(
        "labels",
        {"label-selector": "app=checkout"},
        label_selector="app=checkout",
        role="label view",
    ),
    View("metadata", {"project": "metadata"}, role="projection"),
    View(
        "metadata-compact",
        {"project": "metadata"},
        role="projection kept as JSON bytes",
        compact_cache=True,
    ),
    View("minimal", {"project": "metadata.name"}, role="per-pod floor of a cache"),
    View(
        "empty",
        {"namespace": NO_PODS_NAMESPACE},
        namespace=NO_PODS_NAMESPACE,
        role="zero-cache baseline",
    ),
)


def selected_keys(sim: Sim, view: View) -> set[str]:
    """The cache keys (``namespace/name``) of the pods the simulator lists for ``view``'s
    selection: what its processor must hold."""
    path = f"/api/v1/namespaces/{view.namespace}/{RESOURCE}" if view.namespace else "/api/v1/pods"
    query = urllib.parse.urlencode({"labelSelector": view.label_selector or ""})
    with urllib.request.urlopen(f"{sim.url}{path}?{query}", timeout=120) as resp:
        items = orjson.loads(resp.read())["items"]
    return {f"{pod['metadata']['namespace']}/{pod['metadata']['name']}" for pod in items}


def wait_counts(group: Group, name: str, count: str, expected: int) -> int:
    """Until ``group``'s handler reported ``expected`` of ``count`` (its stats file is flushed
    every 20 ms); a handler that got more or fewer than its view selects fails the run."""
    deadline = time.monotonic() + 30
    while group.counts().get(count, 0) < expected and time.monotonic() < deadline:
        group.check_alive()
        time.sleep(POLL_INTERVAL)
    time.sleep(0.1)  # a count past the expected one would show up by now
    seen = group.counts().get(count, 0)
    if seen != expected:
        raise BenchError(
            f"group {name}'s handler counted {seen} {count}, its view selects {expected}"
        )
    return seen


def drain(
    client: redis.Redis,
    groups: dict[str, Group],
    cpu_before: dict[str, float],
    timeout: float,
) -> dict[str, tuple[float, float]]:
    """Poll the consumer groups until each has consumed the burst; per group, the CPU its
    processor used from ``cpu_before`` to that moment, and the moment (monotonic)."""
    done: dict[str, tuple[float, float]] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(groups):
        for name, position in positions(client, [g for g in groups if g not in done]).items():
            if position.caught_up:
                pid = groups[name].children[0].pid
                done[name] = (process_cpu_seconds(pid) - cpu_before[name], time.monotonic())
        for group in groups.values():
            group.check_alive()
        if time.monotonic() > deadline:
            missing = sorted(set(groups) - set(done))
            raise BenchError(f"timed out after {timeout:.0f} s: groups {missing} still behind")
        time.sleep(POLL_INTERVAL)
    return done


@dataclass
class Bus:
    """What a burst runs through: the simulator, the reflector's Redis and one group per view."""

    sim: Sim
    client: redis.Redis
    reflector: ReflectorChild
    groups: dict[str, Group]
    selected: dict[str, set[str]]
    published: int
    """Stream entries so far (retention is off: every delta stays)."""

    def pids(self) -> dict[str, int]:
        return {name: group.children[0].pid for name, group in self.groups.items()}

    def signal(self, signum: signal.Signals) -> None:
        for pid in self.pids().values():
            os.kill(pid, signum)


def burst_through(bus: Bus, count: int, seed: int, *, backlog: bool) -> dict[str, dict[str, Any]]:
    """``count`` updates through every group; per group its CPU until it consumed them all.

    ``backlog``: the processors are stopped (SIGSTOP) until the reflector published the whole
    burst, so each reads it in full batches, as after a pause or behind a slow handler; else
    they read as the entries arrive, which for a group that keeps up means small batches."""
    names = list(bus.groups)
    before_ids = last_ids(bus.client)
    read_before = positions(bus.client, names)
    handled_before = {name: group.counts().get("updates", 0) for name, group in bus.groups.items()}
    for group in bus.groups.values():
        group.mark()
    if backlog:
        bus.signal(signal.SIGSTOP)
    try:
        with bus.sim.burst_held(count, seed):  # the span starts as the burst is released
            cpu_before = {name: process_cpu_seconds(pid) for name, pid in bus.pids().items()}
            started = time.monotonic()
        wait_for(
            lambda: stream_entries(bus.client) >= bus.published + count,
            "the reflector to publish the burst",
            timeout_for(count),
            alive=bus.reflector.check_alive,
        )
        if backlog:
            started = time.monotonic()
            bus.signal(signal.SIGCONT)
        done = drain(bus.client, bus.groups, cpu_before, timeout_for(count))
    finally:
        if backlog:
            bus.signal(signal.SIGCONT)
    bus.published += count
    if (entries := stream_entries(bus.client)) != bus.published:
        raise BenchError(f"{entries} stream entries, {bus.published} expected")
    read_after = positions(bus.client, names)
    touched = list(keys_after(bus.client, before_ids))
    out = {}
    for name, group in bus.groups.items():
        cpu, finished = done[name]
        expected = sum(1 for key in touched if key in bus.selected[name])
        wait_counts(group, name, "updates", handled_before[name] + expected)
        # A takeover after the pause would re-deliver the initial list; the burst is updates
        # only, of pods that stay in their views.
        wait_counts(group, name, "initial_adds", len(bus.selected[name]))
        counts = group.counts()
        if counts.get("adds", 0) or counts.get("deletes", 0):
            raise BenchError(f"group {name}'s handler saw adds or deletes in a burst: {counts}")
        before, after = read_before[name].entries_read, read_after[name].entries_read
        out[name] = {
            "updates_handled": group.updates_seen(),
            "entries_read": None if before is None or after is None else after - before,
            "cpu_s": round(cpu, 3),
            "seconds": round(finished - started, 3),
        }
    bus.reflector.check_alive()
    return out


def idle_cpu(bus: Bus, seconds: float) -> dict[str, float]:
    """CPU ms per second each processor spends with nothing to read (heartbeats, lease
    renewals, blocking reads timing out): part of every span, whatever the view."""
    before = {name: process_cpu_seconds(pid) for name, pid in bus.pids().items()}
    time.sleep(seconds)
    return {
        name: round((process_cpu_seconds(pid) - before[name]) / seconds * 1000, 1)
        for name, pid in bus.pids().items()
    }


def start_groups(
    args: argparse.Namespace, redis_url: str, workdir: Path, stack: contextlib.ExitStack
) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for view in VIEWS:
        flags = {"group": view.name, **PATIENT, **view.flags}
        groups[view.name] = stack.enter_context(
            group_running(
                1,
                TRIVIAL,
                redis_url,
                workdir,
                view.name,
                flags=flags,
                cache="compact" if view.compact_cache else "plain",
            )
        )
    for view in VIEWS:
        wait_synced(groups[view.name], args.pods)
    return groups


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = SimulatorSettings(
        history_max_events=max(100_000, 4 * args.updates), history_max_age=3600.0
    )
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"populating {args.pods:,} pods (simulator {sim.url}, {server.url})")
        sim.populate(args.pods, seed=1)
        reflector = start_reflector(args, sim, server.url, workdir, stack)
        client = redis.Redis.from_url(server.url, socket_timeout=60)
        stack.callback(client.close)
        selected = {view.name: selected_keys(sim, view) for view in VIEWS}

        progress(args, f"{len(VIEWS)} groups of 1 processor: initial sync")
        groups = start_groups(args, server.url, workdir, stack)
        rows: dict[str, dict[str, Any]] = {}
        for view in VIEWS:
            group = groups[view.name]
            held = wait_counts(group, view.name, "initial_adds", len(selected[view.name]))
            rows[view.name] = {
                "group": view.name,
                "view": view.description,
                "role": view.role,
                "pods_held": held,
                "rss_kb": memory_kb(group.children[0].pid, "VmRSS"),
            }
        reflector.check_alive()
        bus = Bus(sim, client, reflector, groups, selected, published=args.pods)

        progress(args, f"burst of {args.updates:,} updates, read as they arrive")
        for name, figures in burst_through(bus, args.updates, 100, backlog=False).items():
            rows[name].update(figures)
        progress(args, f"burst of {args.updates:,} updates, read as a backlog")
        for name, figures in burst_through(bus, args.updates, 101, backlog=True).items():
            rows[name]["backlog"] = figures
        progress(args, f"idle CPU over {IDLE_SECONDS:g} s")
        for name, ms_per_s in idle_cpu(bus, IDLE_SECONDS).items():
            rows[name]["idle_cpu_ms_per_s"] = ms_per_s
    return {
        "machine": machine(),
        "sizes": {
            "pods": args.pods,
            "updates": args.updates,
            "shards": SHARDS,
            "kept_namespace": KEPT_NAMESPACE,
        },
        "groups": [rows[view.name] for view in VIEWS],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=None, help="pods (default 20,000)")
    parser.add_argument(
        "--updates", type=int, default=None, help="updates in the burst (default 20,000)"
    )
    parser.add_argument("--quick", action="store_true", help="5,000 pods and 5,000 updates")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    default = 5_000 if args.quick else 20_000
    args.pods = default if args.pods is None else args.pods
    args.updates = default if args.updates is None else args.updates
    if args.pods < 10 or args.updates < 1:
        parser.error("--pods must be at least 10 (one per namespace) and --updates at least 1")
    report = measure_in(
        "bench-groups-", "bench/group_views.py", lambda workdir: measure(args, workdir)
    )
    summarize(report)
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
