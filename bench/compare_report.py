"""The comparison's results: one :class:`Result` per (workload, contender), turned into the
report's rows (ratios to the informer-bus reference row, issue 8's targets, verdicts), its
memory targets and notes, the table, and the optional chart.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compare_contenders import BARE, KOPF, SHARED_INFORMER
from reporting import print_header, print_machine, print_notes

PROGRAM = "bench/compare.py"

INFORMER_BUS = "informer-bus"

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
MB = 1 << 20


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


def informer_bus_key(count: int, compact: bool = False) -> str:
    return f"{INFORMER_BUS}/{count}" + ("/compact" if compact else "")


def informer_bus_label(count: int, compact: bool = False) -> str:
    plural = "s" if count > 1 else ""
    return f"informer-bus, {count} processor{plural}" + (", compact cache" if compact else "")


def reference(results: list[Result], workload: str) -> Result:
    """The informer-bus row the contenders of ``workload`` are compared with: 4 processors for
    the initial sync (the issue's target), otherwise the best informer-bus configuration."""
    ours = [r for r in results if r.workload == workload and r.contender.startswith(INFORMER_BUS)]
    if workload == SYNC:
        return next(r for r in ours if r.contender == informer_bus_key(SYNC_REFERENCE))
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
    print_machine("informer-bus beside its peers", m)
    print(f"sizes: {s['pods']:,} pods, bursts of {s['burst']:,} updates, steady "
          f"{s['steady_rate']:g}/s for {s['steady_seconds']:g} s\n")  # fmt: skip
    header = (f"{'workload':13} {'contender':30} {'events':>8} {'seconds':>8} {'events/s':>9} "
              f"{'ratio':>7} {'p50 ms':>7} {'p99 ms':>8} {'peak RSS':>9}  target")  # fmt: skip
    print_header(header)
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
    print_notes(report["notes"])


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
