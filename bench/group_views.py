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
   * ``empty``: ``--namespace`` of a namespace without pods: the zero-cache baseline (its RSS
     is the interpreter, the libraries and the processor's own structures).

   After the sync: each processor's VmRSS and the pods its handler was given (the initial
   list's adds), checked against the simulator's own list of what the view selects.
3. ``--updates`` pod updates as one watch burst (``bench/sim_control.py``). Each processor's
   CPU (user + system, ``/proc``) from just before the burst until its group has consumed every
   entry of it: on every shard, the consumer group delivered up to the stream's last entry and
   has none pending (``bench/group_progress.py``). CPU per stream entry divides by
   ``--updates``: every group reads every entry; only what it does with one differs.
4. Ratios, measured in this run: ``filtered`` CPU per entry / ``full`` CPU per entry (target
   <= 0.25); cache bytes per pod = (RSS - ``empty``'s RSS) / pods held, ``metadata`` / ``full``
   (target <= 0.15). PASS or MISS is printed; the exit status is 0 either way (a measurement),
   1 only when something went wrong (a child died, a count did not add up).
"""

from __future__ import annotations

import argparse
import contextlib
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
from reflector_child import SHARDS, last_ids, stream_entries
from reporting import machine
from run_control import measure_in, progress, timeout_for, wait_for
from sim_control import RESOURCE, Sim

from informer_bus.apiserver_sim import SimulatorSettings

KEPT_NAMESPACE = "ns-03"
NO_PODS_NAMESPACE = "ns-without-pods"
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

    @property
    def description(self) -> str:
        return " ".join(f"--{flag} {value}" for flag, value in self.flags.items()) or "no view"


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


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = SimulatorSettings(
        history_max_events=max(100_000, 2 * args.updates), history_max_age=3600.0
    )
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"simulator at {sim.url}, redis-server at {server.url}")
        progress(args, f"populating {args.pods:,} pods")
        sim.populate(args.pods, seed=1)
        reflector = start_reflector(args, sim, server.url, workdir, stack)
        client = redis.Redis.from_url(server.url, socket_timeout=60)
        stack.callback(client.close)
        selected = {view.name: selected_keys(sim, view) for view in VIEWS}

        progress(args, f"{len(VIEWS)} groups of 1 processor: initial sync")
        groups: dict[str, Group] = {}
        for view in VIEWS:
            flags = {"group": view.name, **view.flags}
            groups[view.name] = stack.enter_context(
                group_running(1, TRIVIAL, server.url, workdir, view.name, flags=flags)
            )
        for view in VIEWS:
            wait_synced(groups[view.name], args.pods)
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

        progress(args, f"burst of {args.updates:,} updates through every group")
        names = [view.name for view in VIEWS]
        before_ids = last_ids(client)
        read_before = positions(client, names)
        for group in groups.values():
            group.mark()
        cpu_before = {name: process_cpu_seconds(g.children[0].pid) for name, g in groups.items()}
        started = time.monotonic()
        sim.burst(args.updates, seed=100)
        wait_for(
            lambda: stream_entries(client) >= args.pods + args.updates,
            "the reflector to publish the burst",
            timeout_for(args.updates),
            alive=reflector.check_alive,
        )
        done = drain(client, groups, cpu_before, timeout_for(args.updates))
        if (entries := stream_entries(client)) != args.pods + args.updates:
            raise BenchError(f"{entries - args.pods} stream entries for {args.updates} updates")
        read_after = positions(client, names)
        touched = list(keys_after(client, before_ids))
        for view in VIEWS:
            row, (cpu, finished) = rows[view.name], done[view.name]
            expected = sum(1 for key in touched if key in selected[view.name])
            before, after = read_before[view.name].entries_read, read_after[view.name].entries_read
            wait_counts(groups[view.name], view.name, "updates", expected)
            row.update(
                updates_handled=groups[view.name].updates_seen(),
                entries_read=None if before is None or after is None else after - before,
                cpu_s=round(cpu, 3),
                seconds=round(finished - started, 3),
            )
        reflector.check_alive()
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
