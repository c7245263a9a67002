"""CPU per stream entry of one processor with a trivial handler, and of a baseline checkout
beside it in the same run (issue 16, point 3).

Not a test: it measures. Run it from the repository root::

    .venv/bin/python bench/processor_cpu.py [--pods 20000] [--burst 10000] [--rounds 3]
    .venv/bin/python bench/processor_cpu.py --baseline /tmp/base   # A/B in one run

One simulator, a private redis-server and one reflector (``python -m reflector_svc``, the
real publish path) fill 16 shard streams; then one ``python -m processor_svc`` per contender,
each its own consumer group on the same streams, so every contender reads every entry of the
same bursts under the same load. ``--plain`` adds this checkout with ``--cache plain``;
``--baseline DIR`` adds a contender that imports
``processor_svc`` and ``common`` from ``DIR`` (e.g. ``git archive HEAD processor_svc common |
tar -x -C DIR``): what a change buys, measured side by side instead of in two noisy runs.

Each round is a burst of ``--burst`` updates read **as they arrive** (the processors keep up,
so per-read overhead counts: the issue's case) and, with ``--backlog``, one read **as a
backlog** (the processors SIGSTOPped until the burst is in Redis). CPU per entry = the
processor's user + system CPU (``/proc``) from before the burst until its consumer group
delivered and acknowledged every entry, divided by the burst. Beside it: the share of that
CPU spent in the kernel and the minor page faults per entry (memory the allocator handed back
to the kernel and touched again), and the blocking reads (``XREAD``) per entry: how
many entries a caught-up processor takes per wake-up. ``pids:`` on stderr names each
contender's process, for ``py-spy record --gil -p PID`` during the rounds.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import redis
from group_views import PATIENT, Bus, View, burst_through, selected_keys
from harness import start_simulator_and_redis
from pipeline import start_reflector
from processor_group import TRIVIAL, Group, wait_synced
from run_control import measure_in, progress
from sim_control import Sim

from apiserver_sim import SimulatorSettings

_FROM_CHECKOUT = (
    "import runpy, sys; sys.path.insert(0, {root!r}); "
    "runpy.run_module('processor_svc', run_name='__main__', alter_sys=True)"
)


def user_system(pid: int) -> tuple[float, float, float]:
    """The process's user and system CPU seconds and minor page faults so far
    (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks, float(fields[7])


def xread_calls(client: redis.Redis) -> int:
    """``XREAD`` calls Redis served so far: only the processors' blocking waits send it, so
    the calls per entry say how few entries a caught-up processor takes per wake-up."""
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_xread", {}).get("calls", 0))


@contextlib.contextmanager
def contender(
    name: str,
    handler: str,
    redis_url: str,
    workdir: Path,
    root: Path | None,
    *,
    cache: str = "compact",
) -> Iterator[Group]:
    """One processor in consumer group ``name``; with ``root``, its ``processor_svc`` and
    ``common`` are imported from that checkout instead of this one."""
    data_dir = workdir / f"data-{name}"
    data_dir.mkdir()
    group = Group(
        1,
        handler,
        redis_url,
        data_dir=data_dir,
        workdir=workdir,
        tag=name,
        flags={"group": name, **PATIENT},
        cache=cache,
    )
    if root is not None:
        for child in group.children:
            module = child.args.index("-m")
            code = _FROM_CHECKOUT.format(root=str(root.resolve()))
            child.args[module : module + 2] = ["-c", code]
    try:
        group.start()
        yield group
    finally:
        group.stop()


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    settings = SimulatorSettings(
        history_max_events=max(100_000, 4 * args.burst), history_max_age=3600.0
    )
    roots: dict[str, Path | None] = {"current": None}
    if args.baseline is not None:
        roots["baseline"] = args.baseline
    if args.plain:
        roots["plain"] = None
    results: dict[str, collections.defaultdict[str, list[float]]] = {
        name: collections.defaultdict(list) for name in roots
    }
    with contextlib.ExitStack() as stack:
        process, server = start_simulator_and_redis(stack, settings, workdir)
        sim = Sim(process)
        progress(args, f"populating {args.pods:,} pods")
        sim.populate(args.pods, seed=1)
        reflector = start_reflector(args, sim, server.url, workdir, stack)
        client = redis.Redis.from_url(server.url, socket_timeout=60)
        stack.callback(client.close)
        everything = selected_keys(sim, View("all"))
        groups = {
            name: stack.enter_context(
                contender(
                    name,
                    args.handler,
                    server.url,
                    workdir,
                    root,
                    cache="plain" if name == "plain" else "compact",
                )
            )
            for name, root in roots.items()
        }
        for group in groups.values():
            wait_synced(group, args.pods)
        bus = Bus(
            sim,
            client,
            reflector,
            groups,
            dict.fromkeys(groups, everything),
            published=args.pods,
        )
        progress(args, "pids: " + ", ".join(f"{n}={g.children[0].pid}" for n, g in groups.items()))
        seed = 100
        for round_no in range(args.rounds):
            kinds = ["live", "backlog"] if args.backlog else ["live"]
            for kind in kinds:
                seed += 1
                calls_before = xread_calls(client)
                times_before = {name: user_system(g.children[0].pid) for name, g in groups.items()}
                figures = burst_through(bus, args.burst, seed, backlog=kind == "backlog")
                wakeups = (xread_calls(client) - calls_before) / len(groups) / args.burst
                line = []
                for name, figure in figures.items():
                    us = figure["cpu_s"] / args.burst * 1e6
                    user, system, faults = (
                        after - before
                        for after, before in zip(
                            user_system(groups[name].children[0].pid),
                            times_before[name],
                            strict=True,
                        )
                    )
                    results[name][f"{kind}_system_share"].append(
                        round(system / max(1e-9, user + system), 2)
                    )
                    results[name][f"{kind}_minor_faults_per_entry"].append(
                        round(faults / args.burst, 2)
                    )
                    results[name][kind].append(round(us, 1))
                    line.append(f"{name} {us:.1f} ({faults / args.burst:.1f} faults)")
                progress(
                    args,
                    f"round {round_no + 1} {kind}: µs/entry "
                    + ", ".join(line)
                    + f" (blocking reads per entry per processor: {wakeups:.3f})",
                )
    summary = {
        name: {
            kind: {"runs": runs, "median": statistics.median(runs)}
            for kind, runs in kinds_runs.items()
        }
        for name, kinds_runs in results.items()
    }
    return {"pods": args.pods, "burst": args.burst, "handler": args.handler, "cpu_us": summary}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20_000, help="pods to sync")
    parser.add_argument("--burst", type=int, default=10_000, help="updates per burst")
    parser.add_argument("--rounds", type=int, default=3, help="bursts of each kind")
    parser.add_argument("--backlog", action="store_true", help="also read bursts as a backlog")
    parser.add_argument("--handler", default=TRIVIAL, help="the processors' --handler")
    parser.add_argument(
        "--baseline", type=Path, help="a checkout whose processor_svc and common run beside"
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="add this checkout with --cache plain as a contender (the default is compact)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    result = measure_in("processor-cpu-", "processor_cpu", lambda w: measure(args, w))
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
