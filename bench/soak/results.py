"""The soak's configuration and what it found, as data: the samples taken every second, the
RSS growth per process, and the :class:`Result` the verdicts and the table read.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SoakConfig:
    seconds: float = 60.0
    """Seconds of churn."""
    rate: float = 2000.0
    """Churn events per second (simulator writes; each becomes one delta)."""
    restart_every: float = 10.0
    pods: int = 2000
    shards: int = 8
    seed: int = 7
    mix: tuple[tuple[str, float], ...] = (("create", 0.1), ("update", 0.8), ("delete", 0.1))
    growth_limit: float = 0.05
    lease: float = 4.0
    """Processor shard leases (renew deadline 3/4 of it): short, so a kill -9 is taken over
    within seconds, long enough not to lapse on a busy 2-core machine."""
    retention_min_entries: int = 500
    retention_interval: float = 2.0
    drain_timeout: float = 60.0
    warmup_seconds: float | None = None
    """Default: the first 20 % of the run, at least 10 s."""
    window_seconds: float | None = None
    """Default: 10 % of the run, at least 5 s."""

    @property
    def warmup(self) -> float:
        if self.warmup_seconds is not None:
            return self.warmup_seconds
        return max(10.0, 0.2 * self.seconds)

    @property
    def window(self) -> float:
        if self.window_seconds is not None:
            return self.window_seconds
        return max(5.0, 0.1 * self.seconds)

    @property
    def lag_bound(self) -> int:
        return int(self.rate * (self.lease + 5.0))

    def stream_bound(self, lag: int) -> int:
        """Most entries retention may leave on all shard streams with ``lag`` unacknowledged."""
        per_shard = self.retention_min_entries + 100  # ~ trims whole nodes of <= 100 entries
        return self.shards * per_shard + lag + int(2 * self.rate * self.retention_interval)


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    """Seconds since the churn started."""
    rss_kb: dict[str, int]
    """Per process label (``p2#3``: the third ``p2``), ``VmRSS`` in kB."""
    used_memory: int
    lag: int
    lag_s: float
    stream_length: int
    published: int
    """Entries ever appended to the shard streams (XINFO STREAM entries-added, summed)."""


@dataclass(frozen=True, slots=True)
class Growth:
    label: str
    first_kb: float
    last_kb: float
    peak_kb: int
    judged: bool

    @property
    def growth(self) -> float:
        return (self.last_kb - self.first_kb) / self.first_kb if self.first_kb else 0.0


@dataclass(slots=True)
class Result:
    config: SoakConfig
    samples: list[Sample] = field(default_factory=list)
    growth: list[Growth] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    """``"10.0 s: SIGTERM p2#1"``..."""
    churn: dict[str, float] = field(default_factory=dict)
    """The simulator's churn statistics (creates, updates, deletes, events, rate)."""
    handled: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per processor incarnation, its handler calls by kind."""
    deletions_owed: int = 0
    """Distinct keys the churn deleted that the handlers had been told of: each one must reach
    ``on_delete`` (an object created and deleted while its shard had no owner never reached
    the handlers and is owed nothing)."""
    deletions_delivered: int = 0
    """Distinct keys that reached ``on_delete``."""
    deletions_redelivered: int = 0
    """``on_delete`` calls beyond the first per key (at-least-once after a takeover)."""
    lost: int = 0
    drain_seconds: float | None = None
    """From the end of the churn until every shard's lag was 0 (``None``: never)."""
    converge_seconds: float | None = None
    """From the end of the churn until the caches equalled the ground truth."""
    problems: list[str] = field(default_factory=list)
    """Broken rules other than memory growth: lag, streams, losses, exits, logs."""
    memory_problems: list[str] = field(default_factory=list)
    """Judged processes whose RSS grew past ``growth_limit`` (or could not be judged)."""

    @property
    def failed(self) -> bool:
        return bool(self.problems or self.memory_problems)

    @property
    def max_lag(self) -> int:
        return max((s.lag for s in self.samples), default=0)

    @property
    def max_lag_s(self) -> float:
        return max((s.lag_s for s in self.samples), default=0.0)

    @property
    def end_lag(self) -> int:
        """The lag at the last sample of the churn."""
        during = [s for s in self.samples if s.t <= self.config.seconds]
        return during[-1].lag if during else 0
