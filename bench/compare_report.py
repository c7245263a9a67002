"""The comparison's results: one :class:`Result` per (workload, contender), turned into the
report's rows (ratios to the informer-bus reference row, issue 8's targets, verdicts), its
memory targets and notes, the table, and the optional chart. The CPU targets of issues 16 and
35 are read from the rows by ``compare_targets``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compare_contenders import BARE, KOPF, SHARED_INFORMER
from reporting import print_header, print_machine, print_notes

from processor_svc.settings import COMPACT

PROGRAM = "bench/compare.py"

INFORMER_BUS = "informer-bus"

SYNC = "initial sync"
WARM = "warm restart"
BURST = "watch burst"
STEADY = "steady"
WORKLOADS = (SYNC, WARM, BURST, STEADY)
"""informer-bus' initial sync row is its cold start (everything started together on an empty
Redis); its warm restart rows (processors restarted on a filled Redis, no API LIST) have no
contender of their own: the bare reader's LIST is their yardstick."""

IN_ALL = ("contender", "reflector", "redis", "processors")
"""The processes whose CPU is a contender's in all (a peer is one process; informer-bus is the
reflector, redis-server and the processors). The simulator's is reported beside, not in it:
it serves every contender alike."""

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
    cpu: dict[str, float] = field(default_factory=dict)
    """µs of CPU (user + system, ``/proc``) per event of each process over the workload's
    span: ``contender`` for a peer; ``reflector``, ``redis``, ``processors`` (together) and
    ``processor-<i>`` for informer-bus; ``simulator`` beside them."""

    @property
    def rate(self) -> float:
        return self.events / max(self.seconds, 1e-6)

    @property
    def cpu_in_all(self) -> float:
        return round(sum(us for name, us in self.cpu.items() if name in IN_ALL), 1)


def informer_bus_key(count: int, cache: str = COMPACT) -> str:
    """``informer-bus/<n>`` with the default cache, ``informer-bus/<n>/<cache>`` otherwise."""
    return f"{INFORMER_BUS}/{count}" + ("" if cache == COMPACT else f"/{cache}")


def informer_bus_label(count: int, cache: str = COMPACT) -> str:
    plural = "s" if count > 1 else ""
    cache_note = "" if cache == COMPACT else f", {cache} cache"
    return f"informer-bus, {count} processor{plural}{cache_note}"


KEY_ONLY = "key-only"


def key_only_key(count: int) -> str:
    """The rows of ``count`` processors whose handler reads nothing but each object's key
    (issue 35): bursts only, beside (never instead of) the rows of the handler every peer
    calls."""
    return f"{informer_bus_key(count)}/{KEY_ONLY}"


def key_only_label(count: int) -> str:
    return f"{informer_bus_label(count)}, {KEY_ONLY}"


def median_round(rounds: list[Result]) -> Result:
    """One row out of a workload's repeated rounds: the round with the median CPU per event in
    all (the lower middle one for an even count), with every round's figure in
    ``extra["cpu_runs"]``, every round's figure of each process in ``cpu_part_runs`` (the
    targets take a process' median from there) and, for a steady churn, every round's p99 in
    ``p99_runs``."""
    ordered = sorted(rounds, key=lambda r: r.cpu_in_all)
    middle = ordered[(len(ordered) - 1) // 2]
    extra = {
        **middle.extra,
        "cpu_runs": [r.cpu_in_all for r in rounds],
        "cpu_part_runs": {part: [r.cpu.get(part) for r in rounds] for part in middle.cpu},
    }
    if middle.workload == STEADY:
        extra["p99_runs"] = [r.latency.get("p99_ms") for r in rounds]
    return replace(middle, extra=extra)


def median_burst(bursts: list[Result]) -> Result:
    """The median round of a configuration's bursts (:func:`median_round`), with the threads
    of its processors over every round: the most at once, as a bound is judged, and each
    round's in ``runs``."""
    row = median_round(bursts)
    peaks = [r.extra["threads"]["peak"] for r in bursts]
    row.extra["threads"] = {
        **row.extra["threads"],
        "peak": max(peaks),
        "distinct": max(r.extra["threads"]["distinct"] for r in bursts),
        "samples": sum(r.extra["threads"]["samples"] for r in bursts),
        "runs": peaks,
    }
    return row


def median_rounds(runs: list[list[Result]]) -> list[Result]:
    """One row per workload out of a contender's repeated runs, every round of every run pooled
    (:func:`median_round`); a workload measured once keeps its single result as it is.

    Why repeat the yardstick: in two full runs (docs/runs/run6.json, run7.json) informer-bus'
    own CPU per event moved by at most a few per cent while the bare reader's moved by 12-20 %,
    so a single bare run made every ratio as noisy as its own measurement. Its runs are spread
    over the whole run, one beside each contender by default, so that a slow stretch of the
    machine weighs on one of them, not on the yardstick. The peers are repeated for the same
    reason: in runs 15 to 17 their single bursts moved by up to 25 %."""
    by_workload: dict[str, list[Result]] = {}
    for run in runs:
        for result in run:
            by_workload.setdefault(result.workload, []).append(result)
    return [results[0] if len(results) == 1 else median_round(results)
            for results in by_workload.values()]  # fmt: skip


def cpu_reference(results: list[Result], workload: str) -> Result | None:
    """The bare reader's row a workload's CPU per event is compared with: its own workload's,
    and its LIST for a warm restart (the work a restart has to beat)."""
    wanted = SYNC if workload == WARM else workload
    return next((r for r in results if r.workload == wanted and r.contender == BARE), None)


def reference(results: list[Result], workload: str) -> Result:
    """The informer-bus row the contenders of ``workload`` are compared with: 4 processors for
    the initial sync (the issue's target), otherwise the best informer-bus configuration whose
    handler is the peers' (never the key-only one)."""
    ours = [r for r in results if r.workload == workload and r.contender.startswith(INFORMER_BUS)
            and not r.contender.endswith(KEY_ONLY)]  # fmt: skip
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
        if not any(r.workload == workload for r in results):
            continue
        ref = reference(results, workload)
        bare = cpu_reference(results, workload)
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
                "cpu_us_per_event": r.cpu,
                "cpu_in_all_us_per_event": r.cpu_in_all,
                "cpu_ratio_to_bare": None if bare is None or not bare.cpu_in_all
                else round(r.cpu_in_all / bare.cpu_in_all, 2),
                **r.extra,
            }  # fmt: skip
            if r.latency and not ours:
                row["p99_ratio"] = round(r.latency["p99_ms"] / ref.latency["p99_ms"], 2)
            out.append(row)
    return out


def memory_targets(memory: dict[str, Any]) -> list[dict[str, Any]]:
    json_bytes = memory["pod_json_bytes"]
    processor = memory["processor_rss_growth_bytes_per_pod"] / json_bytes
    plain = memory["plain_processor_rss_growth_bytes_per_pod"] / json_bytes
    # Per cached pod: its own JSON, and that of its share of the retained stream entries.
    retained = 1 + memory["redis_stream_entries"] / memory["cached_pods"]
    redis_ratio = memory["redis_bytes_per_pod"] / (json_bytes * retained)
    return [
        {"what": "processor RSS growth per cached pod / pod JSON, the default (compact) cache",
         "ratio": round(processor, 2), "target": PROCESSOR_MEMORY_TARGET,
         "met": processor <= PROCESSOR_MEMORY_TARGET},
        {"what": "processor RSS growth per cached pod / pod JSON, --cache plain",
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
        "initial sync: informer-bus = its cold start: the reflector and 4 processors spawned "
        "together on an empty Redis, until the handlers saw every pod and every processor is "
        "ready with its share of the shards (interpreter start-up included: what a user waits "
        "for; 'handled_seconds' in the JSON: when the handlers' count reached the pods); the "
        "peers from their own start (imports done). The "
        "bare loop and the Watch only list (no handler call per listed pod); SharedInformer and "
        "kopf until their handler saw every pod.",
        "warm restart: processors started on the filled Redis (no API LIST), from the first "
        "one's start-up line until all are ready with a balanced assignment.",
        "CPU per event: user + system CPU from /proc of each process over exactly the "
        "workload's span (from spawn for a cold start, from the start-up line for a warm "
        "restart and the peers' sync), divided by the workload's events. 'in all' sums a peer's "
        "one process, or informer-bus' reflector, redis-server and processors; the simulator's "
        "is beside it. On a busy machine these stay comparable where events/s do not.",
        "watch burst: first to last update handled. kopf may coalesce the events of one object "
        "within its 0.1 s batch window; its rows count every update sent ('handled' in the JSON "
        "says how many its handler saw).",
        "key-only: 1 processor whose handler takes each object's key and nothing else of it "
        "(issue 35: what the processor itself costs); it cannot see the commit stamp, so it "
        "bursts only, timed from the burst's release to its last call.",
        "threads: while informer-bus' processors burst, /proc/<pid>/task of each is read every "
        "5 ms; 'threads' in the JSON has the most at once over the rounds ('peak', the bench "
        "handler's flush thread included), the thread ids seen ('distinct') and the looks "
        "taken; the target leaves the bench handler's thread out.",
        f"steady: {s['steady_rate']:g} updates/s for {s['steady_seconds']:g} s; latency = the "
        "handler call minus the commit stamp the simulator wrote into the update (one "
        "CLOCK_MONOTONIC for every process; bench/pipeline.py).",
        f"the bare reader, every CPU ratio's yardstick, ran {s.get('bare_runs', 1)} time(s) "
        "spread over the run (one just before each other contender, one last), its burst and "
        f"churn {s.get('rounds', 1)} round(s) in each; each workload uses the run or round "
        "with the median CPU per event ('cpu_runs' in the JSON has all of them).",
        f"informer-bus' warm restarts, bursts and steady churns ran {s.get('rounds', 1)} "
        "round(s) each (the processors restarted for every warm restart, the same processors "
        "for every burst and churn); each row is the round with the median CPU per event in "
        "all, its latencies that round's ('cpu_runs' and 'p99_runs' in the JSON have every "
        "round's). The peers burst and churn as many rounds, their rows the median round.",
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
    header = (f"{'workload':13} {'contender':40} {'events':>8} {'seconds':>8} {'events/s':>9} "
              f"{'ratio':>7} {'p50 ms':>7} {'p99 ms':>8} {'peak RSS':>9}  target")  # fmt: skip
    print_header(header)
    for r in report["rows"]:
        ratio = r.get("p99_ratio") if r["workload"] == STEADY else r["ratio"]
        target = ""
        if r["target"] is not None:
            target = (f"p99 <= {r['target']:g} ms " if r["target_kind"] == "max p99 ms"
                      else f">= {r['target']:g}x ")  # fmt: skip
            target += "met" if r["met"] else "MISSED"
        print(f"{r['workload']:13} {r['label']:40} {r['events']:>8,} {r['seconds']:8.2f} "
              f"{r['events_per_s']:>9,.0f} {_fmt(ratio, '.2f') + ('x' if ratio else ''):>7} "
              f"{_fmt(r.get('p50_ms'), '.1f'):>7} {_fmt(r.get('p99_ms'), '.1f'):>8} "
              f"{r['peak_rss_mb']:>6,.0f} MB  {target}".rstrip())  # fmt: skip
    print_cpu_table(report)
    print(f"\nmemory: pod JSON (managedFields stripped) {mem['pod_json_bytes']:,.0f} B; Redis "
          f"{mem['redis_bytes_per_pod']:,.0f} B per cached pod (known state + 1 stream entry); "
          f"processor RSS growth {mem['processor_rss_growth_bytes_per_pod']:,.0f} B per pod "
          f"({mem['plain_processor_rss_growth_bytes_per_pod']:,.0f} B plain); "
          f"peak RSS reflector {mem['reflector_peak_rss_mb']:,.0f} MB, redis-server "
          f"{mem['redis_peak_rss_mb']:,.0f} MB")  # fmt: skip
    for t in report["memory_targets"]:
        print(f"  {t['what']}: {t['ratio']:.2f}x (<= {t['target']:g}x) "
              f"{'met' if t['met'] else 'MISSED'}")  # fmt: skip
    print_notes(report["notes"])


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:,.1f}"


def print_cpu_table(report: dict[str, Any]) -> None:
    """CPU per event of every contender and of each informer-bus process, per workload."""
    print("\nCPU per event, µs (user + system from /proc over each workload's span; / bare = "
          "over the bare reader's in the same workload, its LIST for a warm restart)")  # fmt: skip
    header = (f"{'workload':13} {'contender':40} {'in all':>8} {'/ bare':>7} "
              f"{'reflector':>9} {'redis':>7} {'processors':>10}  {'each processor':16} "
              f"{'simulator':>9}")  # fmt: skip
    print_header(header)
    for r in report["rows"]:
        cpu = r["cpu_us_per_event"]
        ratio = r["cpu_ratio_to_bare"]
        each = "/".join(f"{cpu[name]:.0f}" for name in sorted(cpu) if name.startswith("processor-"))
        print(f"{r['workload']:13} {r['label']:40} {_us(r['cpu_in_all_us_per_event']):>8} "
              f"{'' if ratio is None else f'{ratio:.2f}x':>7} {_us(cpu.get('reflector')):>9} "
              f"{_us(cpu.get('redis')):>7} {_us(cpu.get('processors')):>10}  {each:16} "
              f"{_us(cpu.get('simulator')):>9}".rstrip())  # fmt: skip


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
