"""The groups-and-views bench's results: per group its cache and CPU figures, and issue 14's two
ratios against the unfiltered group of the same run, each with its target and verdict.
"""

from __future__ import annotations

from typing import Any

from markdown_table import markdown_rows
from reporting import print_machine, print_notes

CPU_TARGET = 0.25
"""A 10 % view's CPU per stream entry over the unfiltered group's, as entries arrive, at most
(issue 14's target, issue 35's again)."""
CACHE_TARGET = 0.15
"""A ``--project metadata`` cache's bytes per pod over the full cache's, at most."""
BASELINE, FILTERED, METADATA, EMPTY = "full", "filtered", "metadata", "empty"
METADATA_COMPACT = "metadata-compact"


def summarize(report: dict[str, Any]) -> None:
    """Add each group's derived figures and the report's ratios (in place)."""
    pods, updates = report["sizes"]["pods"], report["sizes"]["updates"]
    groups = {row["group"]: row for row in report["groups"]}
    empty_kb = groups[EMPTY]["rss_kb"]
    for row in report["groups"]:
        row["kept_fraction"] = round(row["pods_held"] / pods, 4)
        row["cpu_us_per_entry"] = round(row["cpu_s"] / updates * 1e6, 2)
        row["backlog"]["cpu_us_per_entry"] = round(row["backlog"]["cpu_s"] / updates * 1e6, 2)
        row["cache_bytes_per_pod"] = (
            round((row["rss_kb"] - empty_kb) * 1024 / row["pods_held"], 1)
            if row["pods_held"] and row["group"] != EMPTY
            else None
        )
    report["ratios"] = [
        _ratio(
            "10 % view (filtered) / unfiltered (full) CPU per stream entry, as entries arrive",
            groups[FILTERED]["cpu_us_per_entry"],
            groups[BASELINE]["cpu_us_per_entry"],
            CPU_TARGET,
        ),
        _ratio(
            "10 % view (filtered) / unfiltered (full) CPU per stream entry, read as a backlog",
            groups[FILTERED]["backlog"]["cpu_us_per_entry"],
            groups[BASELINE]["backlog"]["cpu_us_per_entry"],
            None,
        ),
        _ratio(
            "metadata / full cache bytes per pod",
            groups[METADATA]["cache_bytes_per_pod"],
            groups[BASELINE]["cache_bytes_per_pod"],
            CACHE_TARGET,
        ),
        _ratio(
            "metadata with --cache compact / full cache bytes per pod",
            groups[METADATA_COMPACT]["cache_bytes_per_pod"],
            groups[BASELINE]["cache_bytes_per_pod"],
            CACHE_TARGET,
        ),
    ]
    report["notes"] = [
        f"{report['machine']['cores']} cores, every process of the run on them at once (the "
        "simulator, redis-server, the reflector and one processor per group): CPU per entry "
        "is each processor's own user + system time, comparable within the run.",
        f"The filtered group's view kept {groups[FILTERED]['kept_fraction']:.1%} of the pods "
        f"and its handler saw {groups[FILTERED]['updates_handled']:,} of the "
        f"{updates:,} updates; every group read all {updates:,} stream entries, twice: as "
        "they arrived (CPU µs/entry) and as a backlog (the processors stopped until the burst "
        "was in Redis).",
        "Cache bytes per pod: (VmRSS after the sync - the empty group's VmRSS) / pods held; "
        "the empty group's view selects nothing, so its RSS is what a processor costs "
        "without a cache.",
    ]


def _ratio(
    what: str, value: float | None, baseline: float | None, target: float | None
) -> dict[str, Any]:
    # A baseline of no cost (RSS noise at tiny sizes) makes no ratio.
    ratio = (
        None if value is None or baseline is None or baseline <= 0 else round(value / baseline, 3)
    )
    return {
        "ratio": what,
        "value": ratio,
        "target_at_most": target,
        "met": None if ratio is None or target is None else ratio <= target,
    }


def table_lines(report: dict[str, Any]) -> list[str]:
    """The groups as a Markdown table (docs/performance.md has one from a real run)."""
    header = [
        "group", "view", "pods held", "kept", "RSS MiB", "cache B/pod",
        "updates handled", "CPU µs/entry", "backlog µs/entry", "idle CPU ms/s",
    ]  # fmt: skip
    rows = [
        [
            row["group"],
            f"`{row['view']}`" if row["view"] != "no view" else "no view",
            f"{row['pods_held']:,}",
            f"{row['kept_fraction']:.1%}",
            f"{row['rss_kb'] / 1024:.1f}",
            "" if row["cache_bytes_per_pod"] is None else f"{row['cache_bytes_per_pod']:,.0f}",
            f"{row['updates_handled']:,}",
            f"{row['cpu_us_per_entry']:.1f}",
            f"{row['backlog']['cpu_us_per_entry']:.1f}",
            f"{row['idle_cpu_ms_per_s']:.1f}",
        ]
        for row in report["groups"]
    ]
    return markdown_rows(header, rows)


def verdict_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for ratio in report["ratios"]:
        value = "n/a" if ratio["value"] is None else f"{ratio['value']:.3f}"
        if ratio["target_at_most"] is None:
            lines.append(f"{ratio['ratio']}: {value} (no target)")
            continue
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[ratio["met"]]
        lines.append(f"{ratio['ratio']}: {value} (target <= {ratio['target_at_most']}): {verdict}")
    return lines


def print_report(report: dict[str, Any]) -> None:
    sizes = report["sizes"]
    print_machine(
        f"groups and views, {sizes['pods']:,} pods, burst of {sizes['updates']:,} updates",
        report["machine"],
    )
    print()
    for line in table_lines(report):
        print(line)
    print()
    for line in verdict_lines(report):
        print(line)
    print_notes(report["notes"])
