"""An async handler beside a sync one doing the same 50 ms of I/O per event (issue 37).

Not a test: it measures. Run it from the repository root::

    .venv/bin/python bench/async_handlers.py [--pods 200] [--burst 1000] [--concurrency 50]

One simulator, a private redis-server and one reflector fill the shard streams with ``--pods``
pods; then two ``python -m processor_svc``, each its own consumer group on the same streams, so
both read every entry of the same burst under the same load:

* ``sync``: ``bench_handlers:SlowSync``, ``time.sleep(0.05)`` per event, one call at a time
  (what a sync handler is: per-key order by calling it in stream order);
* ``async``: ``bench_handlers:SlowAsync``, ``await asyncio.sleep(0.05)`` per event, with
  ``--max-concurrent-reconciles`` (default 50): its calls overlap, never two of one key;
* ``sync-no-io``: ``bench_handlers:Trivial``, the same handler without the wait: the sync
  path's own CPU per event over a span as short as the async one's.

A burst of ``--burst`` updates spread over the pods (~5 per pod by default: some keys get
more, and a key's updates still run one after another) is released at once. Per processor:
the wall time from the burst's release until its group acknowledged every entry, and the CPU
per event (user + system, ``/proc/<pid>/stat``, over the same span), raw and net of the
processor's idle CPU (measured for ``--idle`` seconds before the burst) over its span: the
sync span is ~30x longer, and its heartbeats and lease renewals would otherwise count as
per-event cost. The CPU of a sleep is nothing, so the net CPU per event is what the path
itself costs: the async hand-off to the event loop against the sync thread's direct call.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import orjson
import redis
from group_views import PATIENT, Bus, View, burst_through, idle_cpu, selected_keys
from harness import start_simulator_and_redis
from pipeline import start_reflector
from processor_group import TRIVIAL, Group, wait_synced
from run_control import measure_in, progress
from sim_control import Sim

from apiserver_sim import SimulatorSettings

SYNC = "bench_handlers:SlowSync"
ASYNC = "bench_handlers:SlowAsync"


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = SimulatorSettings(history_max_events=100_000, history_max_age=3600.0)
    contenders: dict[str, tuple[str, dict[str, object]]] = {
        "sync": (SYNC, {}),
        "sync-no-io": (TRIVIAL, {}),
        "async": (ASYNC, {"max-concurrent-reconciles": args.concurrency}),
    }
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"populating {args.pods:,} pods")
        sim.populate(args.pods, seed=1)
        reflector = start_reflector(args, sim, server.url, workdir, stack)
        client = redis.Redis.from_url(server.url, socket_timeout=60)
        stack.callback(client.close)
        groups: dict[str, Group] = {}
        for name, (handler, flags) in contenders.items():
            data_dir = workdir / f"data-{name}"
            data_dir.mkdir()
            group = Group(
                1, handler, server.url, data_dir=data_dir, workdir=workdir, tag=name,
                flags={"group": name, **PATIENT, **flags},
            )  # fmt: skip
            group.start()
            stack.callback(group.stop)
            groups[name] = group
        for group in groups.values():
            wait_synced(group, args.pods)
        everything = selected_keys(sim, View("all"))
        bus = Bus(sim, client, reflector, groups, dict.fromkeys(groups, everything),
                  published=args.pods)  # fmt: skip
        progress(args, f"idle CPU over {args.idle:g} s")
        idle = idle_cpu(bus, args.idle)
        progress(args, f"a burst of {args.burst:,} updates over {args.pods:,} pods")
        figures = burst_through(bus, args.burst, seed=101, backlog=False)
    rows = {}
    for name, figure in figures.items():
        # The sync processor's span is ~30x longer: its idle work (heartbeats, lease renewals,
        # blocking reads timing out) over the span is taken out for the net figure.
        net = figure["cpu_s"] - idle[name] / 1000 * figure["seconds"]
        rows[name] = {
            "handler": contenders[name][0],
            "seconds": figure["seconds"],
            "cpu_us_per_event": round(figure["cpu_s"] / args.burst * 1e6, 1),
            "idle_cpu_ms_per_s": idle[name],
            "net_cpu_us_per_event": round(max(0.0, net) / args.burst * 1e6, 1),
            "updates_handled": figure["updates_handled"],
        }
    rows["async"]["max_concurrent_reconciles"] = args.concurrency
    return {
        "pods": args.pods,
        "burst": args.burst,
        "io_seconds_per_event": 0.05,
        "speedup": round(rows["sync"]["seconds"] / max(rows["async"]["seconds"], 1e-9), 1),
        "processors": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=200, help="pods (keys) to sync")
    parser.add_argument("--burst", type=int, default=1000, help="updates in the burst")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=50,
        help="the async processor's --max-concurrent-reconciles",
    )
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measured")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    result = measure_in("async-handlers-", "async_handlers", lambda w: measure(args, w))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
