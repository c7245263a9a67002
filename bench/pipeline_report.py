"""The end-to-end bench's results: a :class:`Row` per (workload, configuration), with its
baseline and issue 5's target, turned into the report's notes and its table.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from reporting import print_header, print_machine, print_notes, ratio_cells

INFORMER = "kubernetes SharedInformer"
PIPELINE = "informer-bus pipeline"
SYNC = "initial sync"
BURST = "watch burst"
STEADY = "steady churn"
IO_BURST = "burst, 2 ms handler"

INFORMER_TARGET = 5.0
"""End-to-end burst events/s over SharedInformer's burst events/s, at least."""
SCALE_OUT_TARGET = 3.5
"""I/O-bound handler: 4 processors' events/s over 1 processor's, at least."""

CPU_COMPONENTS = ("simulator", "reflector", "redis", "processors")
"""The processes whose CPU per event a burst reports (see ``burst``)."""


@dataclass
class Row:
    workload: str
    config: str
    events: int
    seconds: float
    baseline: str | None = None
    baseline_rate: float | None = None
    target: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / max(self.seconds, 1e-6)

    def as_dict(self) -> dict[str, Any]:
        ratio = None if self.baseline_rate is None else self.rate / self.baseline_rate
        return {
            "workload": self.workload,
            "config": self.config,
            "events": self.events,
            "seconds": round(self.seconds, 6),
            "events_per_s": round(self.rate, 1),
            "ratio": None if ratio is None else round(ratio, 3),
            "baseline": self.baseline,
            "target_ratio": self.target,
            "met": None if self.target is None or ratio is None else ratio >= self.target,
            **self.extra,
        }


def processors_label(count: int) -> str:
    return f"{count} processor" + ("s" if count > 1 else "")


def notes(args: argparse.Namespace, report: dict[str, Any]) -> list[str]:
    cores = report["machine"]["cores"]
    latency = report["latency"]
    text = [
        f"this machine has {cores} cores: the simulator, redis-server, the reflector and up to "
        "4 processors (plus this process) share them, so more processors mostly add "
        "contention for CPU-bound work; the 2 ms handler is what scale-out is about.",
        "ratio = events/s of the row / events/s of its baseline in this run; target = the "
        "minimum ratio issue 5 asks for.",
        "initial sync: processors started together on a Redis the reflector already filled; "
        "from the first processor's 'started' log line (imports done) until every processor "
        "answers /readyz 200 with a balanced shard assignment (seconds_from_spawn in --json). "
        "SharedInformer: one unpaginated LIST, until its ADDED handlers saw every pod.",
        "watch burst: updates generated while the simulator holds its watch streams, then "
        "released; first to last update handled (pipeline: by any processor's handler; "
        "SharedInformer: its MODIFIED handler). The reflector stays up, watching, all run.",
    ]
    if args.informer_pods != args.pods or args.informer_burst != args.burst:
        text.append(
            f"SharedInformer was measured on {args.informer_pods:,} pods and "
            f"{args.informer_burst:,} updates (the pipeline on {args.pods:,} and "
            f"{args.burst:,}): rates are per object (its cache of models is ~55 KB per pod)."
        )
    if latency:
        text.append(
            f"steady churn: {latency['rate_asked']:g} updates/s asked, "
            f"{latency['rate_churned']:g}/s made by the simulator; latency = handler call "
            "minus the simulator's commit stamp of that update (CLOCK_MONOTONIC, one clock for "
            "every process of the machine; see the docstring). "
            f"p50 {latency['p50_ms']:.1f} ms, p99 {latency['p99_ms']:.1f} ms, "
            f"max {latency['max_ms']:.1f} ms."
        )
    text.append(
        "CPU µs/event: user+system CPU (from /proc) of the simulator, the reflector, "
        "redis-server and all processors together during a burst, over its updates: unlike "
        "events/s it hardly depends on what else the machine is running, and on 2 cores their "
        "sum bounds the events/s."
    )
    text.append(
        "2 ms handler: each processor runs a handler on one thread (client-go's model), so one "
        "processor tops out near 500 events/s; initial-list adds do not wait."
    )
    return text


def print_table(report: dict[str, Any]) -> None:
    m, s = report["machine"], report["sizes"]
    print_machine("informer-bus end-to-end benchmark", m)
    print(
        f"sizes: {s['pods']:,} pods, bursts of {s['burst']:,} updates, {s['io_burst']:,} with "
        f"the 2 ms handler; steady {s['steady_rate']:g}/s for {s['steady_seconds']:g} s; "
        f"{s['shards']} shards\n"
    )
    header = (
        f"{'workload':20} {'config':15} {'events':>8} {'seconds':>8} {'events/s':>9} "
        f"{'ratio':>7}  {'vs':15} target"
    )
    print_header(header)
    for r in report["rows"]:
        ratio, target, verdict = ratio_cells(r)
        extra = ""
        if r["workload"] == STEADY:
            extra = f"  latency p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
        elif "processors_cpu_us_per_event" in r:
            extra = "  CPU µs/event: " + ", ".join(
                f"{name} {r[f'{name}_cpu_us_per_event']:.0f}" for name in CPU_COMPONENTS
            )
        print(
            f"{r['workload']:20} {r['config']:15} {r['events']:>8,} {r['seconds']:8.2f} "
            f"{r['events_per_s']:>9,.0f} {ratio:>7}  {r['baseline'] or '':15} "
            f"{target}{verdict}{extra}".rstrip()
        )
    print_notes(report["notes"])
