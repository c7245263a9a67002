"""The soak's verdicts: the RSS rule (the growth of the judged processes between the first
window after the warm-up and the last) and the lag and stream-length bounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator, Sequence

from bench.soak.processes import LONG_LIVED, RESTARTED
from bench.soak.results import Growth, Result, Sample

JUDGED = ("reflector", LONG_LIVED)
"""Processes whose RSS growth is part of the verdict (the others are reported)."""


def _series(samples: Sequence[Sample], label: str) -> list[tuple[float, int]]:
    return [(s.t, s.rss_kb[label]) for s in samples if label in s.rss_kb]


def _growth(label: str, series: Sequence[tuple[float, int]], warmup: float, window: float,
            judged: bool) -> Growth | None:  # fmt: skip
    """Median RSS of the first window after ``warmup`` (from the series' own start) against
    the median of its last window; ``None`` when the series is too short for both."""
    if not series:
        return None
    start, end = series[0][0], series[-1][0]
    first = [kb for t, kb in series if start + warmup <= t < start + warmup + window]
    last = [kb for t, kb in series if t > end - window]
    if end - start < warmup + 2 * window or not first or not last:
        return None
    peak = max(kb for _, kb in series)
    return Growth(label, statistics.median(first), statistics.median(last), peak, judged)


def process_labels(samples: Sequence[Sample]) -> Iterator[str]:
    seen: dict[str, None] = {}
    for sample in samples:
        seen.update(dict.fromkeys(sample.rss_kb))
    return iter(seen)


def growths(result: Result) -> list[Growth]:
    config = result.config
    churn = [s for s in result.samples if s.t <= config.seconds]
    found = []
    for label in process_labels(churn):
        series = _series(churn, label)
        if label.startswith(f"{RESTARTED}#"):
            life = series[-1][0] - series[0][0] if series else 0.0
            growth = _growth(label, series, max(2.0, 0.2 * life), max(2.0, 0.1 * life), False)
        else:
            growth = _growth(label, series, config.warmup, config.window, label in JUDGED)
        if growth is not None:
            found.append(growth)
    memory = [(s.t, s.used_memory // 1024) for s in churn]
    redis_memory = _growth("redis used_memory", memory, config.warmup, config.window, False)
    if redis_memory is not None:
        found.append(redis_memory)
    return found


def memory_verdict(result: Result) -> list[str]:
    """The RSS rule (:mod:`bench.soak.run`) for the judged processes."""
    problems = []
    judged = {g.label for g in result.growth if g.judged}
    for label in JUDGED:
        if label not in judged:
            problems.append(f"{label}: too few RSS samples to judge its growth")
    for growth in result.growth:
        if growth.judged and growth.growth >= result.config.growth_limit:
            problems.append(
                f"{growth.label}: RSS grew {growth.growth:.1%} after the warm-up "
                f"({growth.first_kb:.0f} -> {growth.last_kb:.0f} kB)"
            )
    return problems


def bound_verdict(result: Result) -> list[str]:
    """The lag and stream-length bounds (:mod:`bench.soak.run`); correctness is checked before."""
    config = result.config
    problems = []
    if result.max_lag > config.lag_bound:
        problems.append(f"lag reached {result.max_lag} entries, bound {config.lag_bound}")
    for sample in result.samples:
        bound = config.stream_bound(sample.lag)
        if sample.t >= config.warmup and sample.stream_length > bound:
            problems.append(
                f"{sample.t:.0f} s: the streams hold {sample.stream_length} entries, "
                f"retention allows {bound}"
            )
            break
    return problems
