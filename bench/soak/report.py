"""The soak's table (RSS per process, then lag, throughput and correctness) and its CSV of
samples.
"""

from __future__ import annotations

from pathlib import Path

from bench.markdown_table import markdown_rows
from bench.soak.results import Result
from bench.soak.verdict import process_labels


def table(result: Result) -> str:
    """Per process the RSS (medians of the first window after the warm-up and of the last
    window), then lag, throughput and the correctness numbers."""
    config = result.config
    rows = [
        (
            g.label,
            f"{g.first_kb / 1024:.1f}",
            f"{g.last_kb / 1024:.1f}",
            f"{g.peak_kb / 1024:.1f}",
            f"{g.growth:+.1%}",
            ("ok" if g.growth < config.growth_limit else "FAIL") if g.judged else "reported",
        )
        for g in result.growth
    ]
    header = ("process", "start RSS MiB", "end RSS MiB", "peak MiB", "growth", "verdict")
    lines = markdown_rows(header, rows)
    handled = sum(
        counts.get("add", 0) + counts.get("update", 0) + counts.get("delete", 0)
        for counts in result.handled.values()
    )
    initial = sum(counts.get("initial", 0) for counts in result.handled.values())
    during = [s for s in result.samples if s.t <= config.seconds]
    published = during[-1].published - during[0].published if len(during) > 1 else 0
    span = during[-1].t - during[0].t if len(during) > 1 else 0.0
    rate = published / span if span else 0.0
    lines += [
        "",
        f"churn: {result.churn.get('events', 0)} events in {result.churn.get('seconds', 0)} s "
        f"({result.churn.get('rate', 0)}/s; {result.churn.get('creates', 0)} creates, "
        f"{result.churn.get('deletes', 0)} deletes); published {rate:.0f}/s",
        f"lag: max {result.max_lag} entries (bound {config.lag_bound}), max age "
        f"{result.max_lag_s:.1f} s, {result.end_lag} at the end of the churn, 0 after "
        + ("never" if result.drain_seconds is None else f"{result.drain_seconds:.1f} s"),
        f"streams: max {max((s.stream_length for s in during), default=0)} entries "
        f"(retention: {config.retention_min_entries} per shard, every "
        f"{config.retention_interval:g} s)",
        f"handled: {handled} live calls, {initial} initial-list adds (takeovers), over "
        f"{len(result.handled)} processes",
        f"deletions: {result.deletions_delivered} of the churn's {result.churn.get('deletes', 0)} "
        f"reached on_delete, of {result.deletions_owed} owed to the handlers "
        f"({result.deletions_redelivered} re-delivered); lost {result.lost}; caches "
        "equal the ground truth after "
        + ("never" if result.converge_seconds is None else f"{result.converge_seconds:.1f} s"),
        f"restarts: {len(result.restarts)}",
    ]
    return "\n".join(lines)


def write_samples(result: Result, path: Path) -> None:
    """One CSV line per sample (RSS in kB per process label)."""
    labels = list(process_labels(result.samples))
    header = ["t", "lag", "lag_s", "stream_length", "published", "used_memory", *labels]
    lines = [",".join(header)]
    for s in result.samples:
        cells = [str(v) for v in (s.t, s.lag, s.lag_s, s.stream_length, s.published)]
        cells.append(str(s.used_memory))
        cells += [str(s.rss_kb[label]) if label in s.rss_kb else "" for label in labels]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
