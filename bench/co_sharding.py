"""Co-sharded processors (issue 15): what a processor serving Widgets and the ConfigMaps they own
spends per event, beside one serving ConfigMaps alone in the same run, and what taking a shard
group over costs.

Not a test: nothing asserts a timing. Run it from the repository root (it starts the simulator,
a private redis-server, one reflector and the processors as child processes)::

    .venv/bin/python bench/co_sharding.py [--widgets 5000] [--rounds 3] [--json] [--quick]

What runs:

1. The simulator holds ``--widgets`` Widgets spread over its 10 namespaces, and for each one a
   ConfigMap whose controlling owner it is (created over HTTP, as an operator would). One
   ``python -m reflector_svc`` publishes both: Widgets by key, ConfigMaps by their controlling
   owner (``configmaps?shardKey=owner``), so a Widget and its ConfigMap share a shard number.
2. Two processor groups on that one reflector, each with a handler that does nothing
   (``bench_handlers:Null``) on every resource it serves, started together and waited for
   until synced:

   * ``single``: ``--resource configmaps``: one resource, the baseline;
   * ``co-sharded``: ``--resource widgets.example.com --resource configmaps``: shard N of both
     owned together (one lease per resource, held as a group), a handler per resource.
3. ``--rounds`` bursts; each updates every ConfigMap and every Widget once, generated while the
   watch streams are held and released at once. Each processor's CPU (user + system,
   ``/proc``) from just before the burst until its group has consumed every entry of every
   stream it reads (delivered up to the last entry, none pending); CPU per event divides by the
   entries its group read: the ConfigMap updates for ``single``, both kinds for
   ``co-sharded``. The ratio ``co-sharded / single`` is the figure (target: <= 1.0). Beside
   the entries (counted in Redis), each round reports the deltas the processor says it applied
   (``informer_bus_processor_deltas_applied_total`` from its /metrics): what it received.
4. A takeover: a second ``co-sharded`` processor joins; the first hands over about half the
   shard numbers. For each shard number the newcomer took: the time from its lease group's
   acquisition (its "took shard" log line) until every resource's worker delivered the initial
   list, and the objects loaded per resource (from its log lines, and its
   ``informer_bus_processor_store_objects`` once settled); and the whole rebalance, from the
   newcomer's start to both processors ready.

The exit status is 0 either way (a measurement), 1 only when something went wrong (a child
died, a group never caught up).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import functools
import os
import re
import statistics
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
from harness import ROOT, BenchError, ServiceChild, start_simulator_and_redis
from proc_stats import process_cpu_seconds
from prometheus_client.parser import text_string_to_metric_families
from reporting import machine, print_machine
from run_control import measure_in, progress, wait_for

from apiserver_sim import SimulatorProcess, SimulatorSettings
from common.redis_layout import ShardKeys

SHARDS = 16
PREFIX = "ib"
NAMESPACES = tuple(f"ns-{n:02d}" for n in range(10))
WIDGETS = "widgets.example.com"
CONFIGMAPS = "configmaps"
NULL = "bench_handlers:Null"
POLL = 0.02

_TOOK = re.compile(r": took shard (\d+) ")
_OBJECTS = re.compile(r"shard-worker\[([^:\]]+):(\d+)\]: taking over at \S+: (\d+) objects")
_SYNCED = re.compile(r"shard-worker\[([^:\]]+):(\d+)\]: initial list delivered")


class Reflector(ServiceChild):
    label = "reflector"

    def __init__(self, sim_url: str, redis_url: str, log_path: Path) -> None:
        flags = {
            "kube-url": sim_url, "redis-url": redis_url, "prefix": PREFIX,
            "shard-count": SHARDS, "http-host": "127.0.0.1", "http-port": 0,
            "identity": "bench", "log-level": "info", "retention-min-entries": 10**9,
            "retention-max-entries": 10**9, "retention-interval": 86400,
        }  # fmt: skip
        resources = f"{WIDGETS},{CONFIGMAPS}?shardKey=owner"
        super().__init__("reflector_svc", flags, log_path,
                         extra_env={"INFORMER_BUS_RESOURCE": resources})  # fmt: skip
        self.synced: set[str] = set()

    def on_message(self, message: str, arrived: float) -> None:
        if ": synced at rv " in message:
            self.synced.add(message.split(":", 1)[0])


class Processor(ServiceChild):
    """A processor child of one group; its log says when it took which shard group, how many
    objects each worker loaded and when each delivered its initial list."""

    label = "processor"

    def __init__(
        self, redis_url: str, group: str, resources: tuple[str, ...], member: str, workdir: Path
    ) -> None:
        flags = {
            "redis-url": redis_url, "prefix": PREFIX, "shard-count": SHARDS, "group": group,
            "http-host": "127.0.0.1", "http-port": 0, "member-id": member, "log-level": "info",
        }  # fmt: skip
        handlers = [NULL] + [f"{r}={NULL}" for r in resources[1:]]
        env = {
            "INFORMER_BUS_RESOURCE": ",".join(resources),
            "INFORMER_BUS_HANDLER": ",".join(handlers),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "bench"), str(ROOT)]),
        }
        super().__init__("processor_svc", flags, workdir / f"{member}.log", extra_env=env,
                         clock=time.monotonic, stop_timeout=30.0)  # fmt: skip
        self.group, self.resources, self.member = group, resources, member
        self.url = ""
        self.took: dict[int, float] = {}
        self.objects: dict[tuple[str, int], int] = {}
        self.synced: dict[tuple[str, int], float] = {}

    def on_message(self, message: str, arrived: float) -> None:
        if " started for " in message and "probes on " in message and not self.url:
            self.url = message.rsplit("probes on ", 1)[1].strip()
        elif match := _TOOK.search(message):
            self.took[int(match.group(1))] = arrived
        elif match := _OBJECTS.search(message):
            self.objects[(match.group(1), int(match.group(2)))] = int(match.group(3))
        elif match := _SYNCED.search(message):
            self.synced.setdefault((match.group(1), int(match.group(2))), arrived)

    def logged_every_takeover(self) -> bool:
        """Each shard group it took: every resource's worker logged its objects and sync."""
        return all(
            (resource, shard) in self.synced and (resource, shard) in self.objects
            for shard in list(self.took)
            for resource in self.resources
        )

    def metric(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of ``name`` on the processor's /metrics, by its sorted labels."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        return {
            tuple(sorted(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name
        }

    def applied(self) -> int:
        """Deltas this processor applied to its stores, by its own count."""
        return int(sum(self.metric("informer_bus_processor_deltas_applied_total").values()))

    def store_objects(self, resource: str, shard: int) -> int | None:
        """Objects in the processor's store of ``resource``'s ``shard`` (its gauge)."""
        for labels, value in self.metric("informer_bus_processor_store_objects").items():
            found = dict(labels)
            if found.get("resource") == resource and found.get("shard") == str(shard):
                return int(value)
        return None

    def ready(self) -> bool:
        if not self.url:
            return False
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False


def create_objects(sim_url: str, count: int) -> None:
    """``count`` Widgets and, for each, a ConfigMap it controls (POSTed concurrently), in
    :data:`NAMESPACES`, created first."""

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            sim_url + path, data=orjson.dumps(body), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            created: dict[str, Any] = orjson.loads(response.read())
            return created

    def pair(n: int) -> None:
        namespace, name = NAMESPACES[n % len(NAMESPACES)], f"w{n:06d}"
        widget = post(
            f"/apis/example.com/v1/namespaces/{namespace}/widgets",
            {"apiVersion": "example.com/v1", "kind": "Widget",
             "metadata": {"name": name, "namespace": namespace}, "spec": {"size": n % 7}},
        )  # fmt: skip
        post(
            f"/api/v1/namespaces/{namespace}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": f"{name}-config", "namespace": namespace, "ownerReferences": [
                 {"apiVersion": "example.com/v1", "kind": "Widget", "name": name,
                  "uid": widget["metadata"]["uid"], "controller": True}]},
             "data": {"size": str(n % 7)}},
        )  # fmt: skip

    for namespace in NAMESPACES:  # the server refuses objects in a namespace that is missing
        post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": namespace}})  # fmt: skip
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(pair, range(count)))


def burst(sim: SimulatorProcess, count: int, seed: int) -> None:
    """``count`` updates of every ConfigMap and every Widget, generated while the watches are
    held and released at once."""
    sim.stall_watches(3600)
    try:
        for resource in (CONFIGMAPS, WIDGETS):
            stats = sim.churn(rate=0, seconds=3600, seed=seed, mix={"update": 1.0},
                              maxEvents=count, resource=resource)  # fmt: skip
            if stats["events"] != count:
                raise BenchError(f"the simulator made {stats['events']} of {count} updates")
    finally:
        sim.control("reset-faults")


def caught_up(client: redis.Redis, group: str, resources: tuple[str, ...]) -> bool:
    """On every shard of every resource: delivered up to the last entry, none pending."""
    pipe = client.pipeline(transaction=False)
    streams = [ShardKeys(PREFIX, r, s).stream for r in resources for s in range(SHARDS)]
    for stream in streams:
        pipe.xinfo_groups(stream)
        pipe.xrevrange(stream, count=1)
    replies = pipe.execute(raise_on_error=False)
    for infos, last in zip(replies[0::2], replies[1::2], strict=True):
        if isinstance(infos, Exception) or isinstance(last, Exception):
            continue  # no stream: nothing to read there
        last_id = last[0][0] if last else b"0-0"
        info = next((i for i in infos if _text(i["name"]) == group), None)
        if info is None:
            return False
        if _text(info["last-delivered-id"]) != _text(last_id) or int(info["pending"]):
            return False
    return True


def entries(client: redis.Redis, resources: tuple[str, ...]) -> int:
    pipe = client.pipeline(transaction=False)
    for resource in resources:
        for shard in range(SHARDS):
            pipe.xlen(ShardKeys(PREFIX, resource, shard).stream)
    return sum(int(n) for n in pipe.execute())


def all_published(client: redis.Redis, before: dict[str, int], count: int) -> bool:
    """Whether every resource's streams grew by ``count`` entries since ``before``."""
    return all(entries(client, (r,)) - before[r] >= count for r in before)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class Round:
    cpu: dict[str, float] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)
    """Entries each group read, counted in Redis."""
    applied: dict[str, int] = field(default_factory=dict)
    """Deltas each group's processor applied, by its own count."""

    def per_event_us(self, name: str) -> float:
        return self.cpu[name] / self.events[name] * 1e6


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        settings = SimulatorSettings(bookmark_interval=1.0, namespaces=len(NAMESPACES))
        sim, server = start_simulator_and_redis(stack, settings, workdir)
        client = redis.Redis.from_url(server.url)
        stack.callback(client.close)
        progress(args, f"creating {args.widgets} Widgets and their ConfigMaps")
        create_objects(sim.url, args.widgets)
        reflector = Reflector(sim.url, server.url, workdir / "reflector.log").start()
        stack.callback(reflector.stop)
        wait_for(lambda: {WIDGETS, CONFIGMAPS} <= reflector.synced, "the reflector's lists",
                 600, alive=reflector.check_alive)  # fmt: skip
        groups = {
            "single": Processor(server.url, "single", (CONFIGMAPS,), "single-1", workdir),
            "co-sharded": Processor(
                server.url, "cosharded", (WIDGETS, CONFIGMAPS), "cosharded-1", workdir
            ),
        }
        for processor in groups.values():
            stack.callback(processor.stop)
            processor.start()
        for processor in groups.values():
            wait_for(processor.ready, f"processor {processor.member} synced", 600,
                     alive=processor.check_alive)  # fmt: skip
        rounds: list[Round] = []
        for number in range(args.rounds):
            progress(args, f"burst {number + 1} of {args.rounds}")
            before = {name: process_cpu_seconds(p.pid) for name, p in groups.items()}
            counts = {name: entries(client, p.resources) for name, p in groups.items()}
            applied = {name: p.applied() for name, p in groups.items()}
            published = {r: entries(client, (r,)) for r in (WIDGETS, CONFIGMAPS)}
            burst(sim, args.widgets, seed=number + 1)
            wait_for(
                functools.partial(all_published, client, published, args.widgets),
                "the reflector to publish the burst",
                600,
                alive=reflector.check_alive,
            )
            result = Round()
            waiting = dict(groups)
            deadline = time.monotonic() + 600
            while waiting:
                for name, processor in list(waiting.items()):
                    if caught_up(client, processor.group, processor.resources):
                        result.cpu[name] = process_cpu_seconds(processor.pid) - before[name]
                        result.events[name] = entries(client, processor.resources) - counts[name]
                        result.applied[name] = processor.applied() - applied[name]
                        del waiting[name]
                    processor.check_alive()
                if time.monotonic() > deadline:
                    raise BenchError(f"groups {sorted(waiting)} never caught up")
                time.sleep(POLL)
            for name, expected in (("single", 1), ("co-sharded", 2)):
                if result.events[name] != expected * args.widgets:
                    raise BenchError(f"{name} read {result.events[name]} entries, expected "
                                     f"{expected * args.widgets}")  # fmt: skip
            rounds.append(result)
        progress(args, "a second co-sharded processor joins")
        first = groups["co-sharded"]
        newcomer = Processor(server.url, "cosharded", (WIDGETS, CONFIGMAPS), "cosharded-2",
                             workdir)  # fmt: skip
        stack.callback(newcomer.stop)
        joined = time.monotonic()
        newcomer.start()
        wait_for(lambda: newcomer.ready() and first.ready() and len(newcomer.took) >= 1,
                 "the rebalance", 600, alive=newcomer.check_alive)  # fmt: skip
        settled = time.monotonic()
        # The log lines come through a pipe, maybe after /readyz already said so.
        wait_for(newcomer.logged_every_takeover, "the newcomer's takeover log lines", 30)
        takeovers = _takeover_rows(newcomer)
        return {
            "machine": machine(),
            "widgets": args.widgets,
            "rounds": [
                {
                    "cpu_s": r.cpu,
                    "events": r.events,
                    "applied": r.applied,
                    "cpu_us_per_event": {n: r.per_event_us(n) for n in r.cpu},
                }
                for r in rounds
            ],
            "ratio": [_ratio(r) for r in rounds],
            "takeovers": takeovers,
            "rebalance_s": settled - joined,
        }


def _takeover_rows(newcomer: Processor) -> list[dict[str, Any]]:
    """Per shard group the newcomer took: how long until every resource's initial list was
    delivered, and the objects it loaded (logged, and its store gauge now)."""
    takeovers = []
    for shard, took in sorted(newcomer.took.items()):
        done = [newcomer.synced.get((r, shard)) for r in newcomer.resources]
        if any(t is None for t in done):
            continue
        takeovers.append({
            "shard": shard,
            "seconds": max(t for t in done if t is not None) - took,
            "objects": {r: newcomer.objects.get((r, shard), 0) for r in newcomer.resources},
            "store_objects": {r: newcomer.store_objects(r, shard) for r in newcomer.resources},
        })  # fmt: skip
    return takeovers


def _ratio(result: Round) -> float | None:
    """co-sharded / single CPU per event; ``None`` when the single one used no CPU tick (a
    tiny run: CPU time is counted in 10 ms ticks)."""
    single = result.per_event_us("single")
    return None if single == 0 else result.per_event_us("co-sharded") / single


def print_report(report: dict[str, Any]) -> None:
    print_machine("co-sharded processors", report["machine"])
    print(f"{report['widgets']} Widgets, {report['widgets']} ConfigMaps (owned), "
          f"{SHARDS} shards\n")  # fmt: skip
    print("| burst | single: CPU µs/event | co-sharded: CPU µs/event | ratio | target |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for number, (row, ratio) in enumerate(zip(report["rounds"], report["ratio"],
                                              strict=True), start=1):  # fmt: skip
        per = row["cpu_us_per_event"]
        shown = "-" if ratio is None else f"{ratio:.3f}"
        verdict = "n/a" if ratio is None else "met" if ratio <= 1.0 else "missed"
        print(f"| {number} | {per['single']:.1f} ({row['events']['single']} events) | "
              f"{per['co-sharded']:.1f} ({row['events']['co-sharded']} events) | "
              f"{shown} | <= 1.0 {verdict} |")  # fmt: skip
    ratios = [ratio for ratio in report["ratio"] if ratio is not None]
    if ratios:
        print(f"\nmedian ratio {statistics.median(ratios):.3f}\n")
    print("| shard group taken over | time (s) | Widgets | ConfigMaps |")
    print("| ---: | ---: | ---: | ---: |")
    for row in report["takeovers"]:
        objects = row["objects"]
        print(f"| {row['shard']} | {row['seconds']:.3f} | {objects.get(WIDGETS, 0)} | "
              f"{objects.get(CONFIGMAPS, 0)} |")  # fmt: skip
    print(f"\nrebalance (newcomer started -> both ready): {report['rebalance_s']:.2f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widgets", type=int, default=None, help="Widgets (default 5,000)")
    parser.add_argument("--rounds", type=int, default=3, help="bursts (default 3)")
    parser.add_argument("--quick", action="store_true", help="1,000 Widgets, one burst")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args()
    if args.quick:
        args.rounds = 1
    args.widgets = (1_000 if args.quick else 5_000) if args.widgets is None else args.widgets
    if args.widgets < 10 or args.rounds < 1:
        parser.error("--widgets must be at least 10 and --rounds at least 1")
    report = measure_in("bench-co-sharding-", "bench/co_sharding.py",
                        lambda workdir: measure(args, workdir))  # fmt: skip
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
