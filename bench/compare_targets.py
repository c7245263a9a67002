"""The targets ``make bench`` is judged by, each a ratio of two figures measured in the same run
(issue 35's, then those of issue 16's it does not restate), computed from the report's rows and
judged PASS or MISS.

Issue 35 (the processor rebuilt around one loop) states its targets against the bare
urllib3+orjson reader's CPU per event, every figure the median of its rounds: for a row picked
as the round with the median CPU in all, a part of it (the processor's) is the median of that
part over the rounds (``cpu_part_runs``), not the part of the picked round. A value is judged
as it is reported, rounded to two decimals, so that the printed line and its verdict agree.
"""

from __future__ import annotations

from typing import Any

from compare_contenders import BARE, SHARED_INFORMER
from compare_report import (
    BURST,
    BURST_TARGETS,
    P99_TARGET_MS,
    STEADY,
    SYNC,
    SYNC_REFERENCE,
    WARM,
    informer_bus_key,
    key_only_key,
)

Row = dict[str, Any]

# Issue 35, on the burst with 1 processor (and the steady churn where said).
KEY_ONLY_PROCESSOR_TARGET = 1.0
"""The processor's CPU per event, handler reading nothing but keys, over the bare reader's."""
READS_NEW_PROCESSOR_TARGET = 1.8
"""The processor's CPU per event, handler reading ``new``, over the bare reader's."""
IN_ALL_TARGET = 7.0
"""Reflector + redis-server + processor CPU per event over the bare reader's, at most."""
SHARED_INFORMER_CPU_TARGET = 3.0
"""SharedInformer's CPU per burst event over informer-bus' in all, at least."""
STEADY_PROCESSOR_TARGET = 2.0
"""Steady: the processor's CPU per event over the bare reader's steady figure, at most."""
STEADY_SHARED_INFORMER_TARGET = 0.6
"""Steady: informer-bus' CPU per event in all over SharedInformer's, at most."""
COLD_START_TARGET = 5.0
"""SharedInformer's initial sync seconds over informer-bus' cold start (4 processors)."""
THREADS_TARGET = 6
"""Threads of a processor owning all 16 shards (the bench handler's own left out), at most."""
GROUP_VIEW_TARGET = 0.25
"""A 10 % view's CPU per entry over an unfiltered group's: bench/group_views.py measures it."""

# Issue 16, on the burst with 1 processor (and the steady churn's p99).
ISSUE16_CPU_TARGETS = {"reflector": 1.5, "redis": 1.0, "processors": 1.5, "in all": 4.0}
ISSUE16_SHARED_INFORMER_CPU_TARGET = 4.0
ISSUE16_P99_OVER_BARE_TARGET = 3.0


def row_of(rows: list[Row], workload: str, contender: str) -> Row | None:
    return next((r for r in rows if (r["workload"], r["contender"]) == (workload, contender)),
                None)  # fmt: skip


def lower_median(values: list[float]) -> float:
    """The middle value, the lower one of an even count (as rows pick their round)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def cpu(row: Row | None, part: str = "in all") -> float | None:
    """µs of CPU per event of ``part`` (a process name, or "in all"), the median of the row's
    rounds; None where the row is missing (a skipped contender) or has no such part."""
    if row is None:
        return None
    if part == "in all":
        return float(row["cpu_in_all_us_per_event"])
    runs = [us for us in row.get("cpu_part_runs", {}).get(part) or [] if us is not None]
    if runs:
        return lower_median(runs)
    value = row["cpu_us_per_event"].get(part)
    return None if value is None else float(value)


def over(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def judged(what: str, value: float | None, bound: float, at_most: bool) -> dict[str, Any]:
    """One target: its value as reported (two decimals) and whether that value meets it."""
    shown = None if value is None else round(value, 2)
    met = None if shown is None else (shown <= bound if at_most else shown >= bound)
    return {"what": what, "value": shown, "target": f"{'<=' if at_most else '>='} {bound:g}",
            "met": met}  # fmt: skip


def processor_threads(rows: list[Row], contenders: tuple[str, ...]) -> float | None:
    """The most threads the processor of any of these burst rows ran at once over any round,
    less the threads the bench's own handler adds to it."""
    peaks = [r["threads"]["peak"] - r["threads"]["bench_handler"]
             for contender in contenders
             if (r := row_of(rows, BURST, contender)) is not None and "threads" in r]  # fmt: skip
    return max(peaks) if peaks else None


def issue35_targets(rows: list[Row]) -> list[dict[str, Any]]:
    """Issue 35's targets (the group view's is bench/group_views.py's): what, value, target,
    met (None where a contender was skipped)."""
    one, key_only = informer_bus_key(1), key_only_key(1)
    reads_new, keys = row_of(rows, BURST, one), row_of(rows, BURST, key_only)
    bare, shared = row_of(rows, BURST, BARE), row_of(rows, BURST, SHARED_INFORMER)
    steady, steady_bare = row_of(rows, STEADY, one), row_of(rows, STEADY, BARE)
    steady_shared = row_of(rows, STEADY, SHARED_INFORMER)
    cold, shared_sync = (
        row_of(rows, SYNC, informer_bus_key(SYNC_REFERENCE)),
        row_of(rows, SYNC, SHARED_INFORMER),
    )

    def rate(r: Row | None) -> float | None:
        return None if r is None else float(r["events_per_s"])

    def seconds(r: Row | None) -> float | None:
        return None if r is None else float(r["seconds"])

    def p99(r: Row | None) -> float | None:
        return None if r is None or r.get("p99_ms") is None else float(r["p99_ms"])

    return [
        judged("burst CPU/event, the processor with a key-only handler (1 processor) / the bare "
               "reader's", over(cpu(keys, "processors"), cpu(bare)),
               KEY_ONLY_PROCESSOR_TARGET, True),
        judged("burst CPU/event, the processor with a handler reading new (1 processor) / the "
               "bare reader's", over(cpu(reads_new, "processors"), cpu(bare)),
               READS_NEW_PROCESSOR_TARGET, True),
        judged("burst CPU/event, informer-bus in all (1 processor) / the bare reader's",
               over(cpu(reads_new), cpu(bare)), IN_ALL_TARGET, True),
        judged("burst CPU/event, SharedInformer's / informer-bus' in all (1 processor)",
               over(cpu(shared), cpu(reads_new)), SHARED_INFORMER_CPU_TARGET, False),
        judged("steady CPU/event, the processor (1 processor) / the bare reader's",
               over(cpu(steady, "processors"), cpu(steady_bare)), STEADY_PROCESSOR_TARGET, True),
        judged("steady CPU/event, informer-bus in all (1 processor) / SharedInformer's",
               over(cpu(steady), cpu(steady_shared)), STEADY_SHARED_INFORMER_TARGET, True),
        judged("steady p99 ms, informer-bus (1 processor)", p99(steady), P99_TARGET_MS, True),
        judged("burst events/s, informer-bus (1 processor) / SharedInformer's",
               over(rate(reads_new), rate(shared)), BURST_TARGETS[SHARED_INFORMER], False),
        judged(f"initial sync s, SharedInformer's / informer-bus' cold start ({SYNC_REFERENCE} "
               "processors)", over(seconds(shared_sync), seconds(cold)), COLD_START_TARGET,
               False),
        judged("threads of the processor owning all 16 shards, most at once in its bursts",
               processor_threads(rows, (one, key_only)), THREADS_TARGET, True),
    ]  # fmt: skip


def issue16_targets(rows: list[Row]) -> list[dict[str, Any]]:
    """Issue 16's targets that issue 35 does not restate (its burst events/s, steady p99 and
    cold start targets are issue 35's too, with the same bounds)."""
    one, four = informer_bus_key(1), informer_bus_key(SYNC_REFERENCE)
    ours, bare = row_of(rows, BURST, one), row_of(rows, BURST, BARE)
    shared = row_of(rows, BURST, SHARED_INFORMER)
    steady, steady_bare = row_of(rows, STEADY, one), row_of(rows, STEADY, BARE)
    warm, bare_sync = row_of(rows, WARM, four), row_of(rows, SYNC, BARE)

    def get(r: Row | None, name: str) -> float | None:
        return None if r is None or r.get(name) is None else float(r[name])

    parts = [
        judged(f"burst CPU/event, {part} (1 processor) / the bare reader's",
               over(cpu(ours, part), cpu(bare)), bound, True)
        for part, bound in ISSUE16_CPU_TARGETS.items()
    ]  # fmt: skip
    return [
        *parts,
        judged("burst CPU/event, SharedInformer's / informer-bus' in all (1 processor)",
               over(cpu(shared), cpu(ours)), ISSUE16_SHARED_INFORMER_CPU_TARGET, False),
        judged("steady p99, informer-bus (1 processor) / the bare reader's",
               over(get(steady, "p99_ms"), get(steady_bare, "p99_ms")),
               ISSUE16_P99_OVER_BARE_TARGET, True),
        judged(f"s, the bare reader's LIST / informer-bus' warm restart ({SYNC_REFERENCE} proc.)",
               over(get(bare_sync, "seconds"), get(warm, "seconds")), 1.0, False),
    ]  # fmt: skip


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """Every target of the run, each with the issue that set it: issue 35's first."""
    return [{"issue": 35, **t} for t in issue35_targets(rows)] + [
        {"issue": 16, **t} for t in issue16_targets(rows)
    ]


def verdict(met: bool | None) -> str:
    return "not measured" if met is None else ("PASS" if met else "MISS")


def target_line(target: dict[str, Any]) -> str:
    """``  what: value (target) PASS|MISS|not measured``."""
    value = "" if target["value"] is None else f"{target['value']:.2f}"
    return f"  {target['what']}: {value} ({target['target']}) {verdict(target['met'])}"


ISSUE_TITLES = {
    35: "issue 35 (the processor around one loop), each figure the median of its rounds:",
    16: "issue 16, where issue 35 does not restate it:",
}


def print_targets(report: dict[str, Any]) -> None:
    print("\ntargets, ratios from this run:")
    for issue, title in ISSUE_TITLES.items():
        print(title)
        for target in report["targets"]:
            if target["issue"] == issue:
                print(target_line(target))
        if issue == 35:
            print(f"  (a 10 % view's CPU per entry / an unfiltered group's, as entries arrive, "
                  f"<= {GROUP_VIEW_TARGET:g}: make bench-groups)")  # fmt: skip
