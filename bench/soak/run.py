"""The soak of issue 7 (point 4): steady churn through the whole pipeline, one processor
restarted again and again, memory and lag sampled every second.

Every piece is a real process: the API server simulator (``SimulatorProcess``) churning pods
(mostly updates, some creates and deletes), a private ``redis-server``, a reflector and two
processors running :class:`bench.soak.handler.SoakCounter` (bounded state: its memory is the
processor's). ``p1`` lives through the whole run; ``p2`` is restarted every ``restart_every``
seconds, alternately with SIGTERM (graceful) and kill -9, and started again at once.

Every second a sampler thread records the RSS of every process (``VmRSS``; a restarted ``p2``
is a new series), Redis ``used_memory``, the unacknowledged entries of every shard (XINFO
GROUPS lag + pending, summed: :func:`informer_bus.status.collect.collect_status`), the oldest
unacknowledged entry's age, the shard streams' length and what the reflector published.

After the churn, the verdict (``Result.failed`` is false when every rule held):

* **memory** (``Result.memory_problems``): after the warm-up (the first 20 % of the run, at
  least 10 s), the RSS of the reflector and of ``p1`` grows less than 5 %: the median of the
  first window after the warm-up against the median of the last window (each 10 % of the
  run, at least 5 s). Medians, so one sample caught mid-takeover does not decide it. The
  simulator, Redis and every ``p2`` incarnation (from its own warm-up) are reported, not
  judged. Redis memory is judged by its streams (next rule).
* **bounds** (this and the rest: ``Result.problems``): after the warm-up the shard streams
  never hold more than retention allows (``shards * (retention_min_entries + 100)`` plus the
  unacknowledged entries plus two trim intervals of churn); the unacknowledged entries never
  exceed ``rate * (lease + 5 s)`` (a kill -9 leaves ``p2``'s shards unowned until their leases
  expire) and drop to 0 within ``drain_timeout`` after the churn stops.
* **nothing lost**: the processors' real caches (dumped by the handler, shards partitioned
  between the two) equal the simulator's ground truth, and every deletion the churn made
  reached ``on_delete`` (as many distinct keys as the churn deleted, none of them alive); no
  shard stream holds a delta twice; no dead letters; no traceback in any log; graceful stops
  exit 0.
"""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bench.soak.handler import DUMP_REQUEST
from informer_bus import local_redis
from informer_bus.apiserver_sim import SimulatorProcess, SimulatorSettings
from informer_bus.status.collect import collect_status, status_client
from tests.processor.ha.conftest import (
    assignment_problems,
    processor_settings,
    store_differences,
    wait_balanced,
)
from tests.reflector.ha.conftest import reflector_flags
from tests.support.bus import Bus, ProcessorProcess, ReflectorProcess, duplicate_problems
from tests.support.waiting import wait_until

__all__ = ["Result", "Sample", "SoakConfig", "run", "table", "write_samples"]

HANDLER = "bench.soak.handler:SoakCounter"
LONG_LIVED = "p1"
RESTARTED = "p2"
JUDGED = ("reflector", LONG_LIVED)
"""Processes whose RSS growth is part of the verdict (the others are reported)."""


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


# --- sampling ----------------------------------------------------------------------------------


def rss_kb(pid: int) -> int | None:
    """``VmRSS`` of a live process in kB, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


class Sampler:
    """Samples once a second in a thread of its own until :meth:`stop`."""

    def __init__(self, redis_url: str, shards: int, started: float) -> None:
        self._client = status_client(redis_url)
        self._resources = {"pods": shards}
        self._started = started
        self._pids: dict[str, int] = {}
        self._lock = threading.Lock()
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-sampler")

    def watch(self, label: str, pid: int) -> None:
        with self._lock:
            self._pids[label] = pid

    def forget(self, label: str) -> None:
        with self._lock:
            self._pids.pop(label, None)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._client.close()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stopping.is_set():
            try:
                self.samples.append(self._sample())
            except redis.RedisError as error:
                self.errors.append(f"{time.monotonic() - self._started:.1f} s: {error!r}")
            next_at += 1.0
            self._stopping.wait(max(0.0, next_at - time.monotonic()))

    def _sample(self) -> Sample:
        with self._lock:
            pids = dict(self._pids)
        rss = {label: kb for label, pid in pids.items() if (kb := rss_kb(pid)) is not None}
        snapshot = collect_status(self._client, resources=self._resources)
        pods = snapshot.resources[0]
        memory = self._client.info("memory")
        return Sample(
            t=round(time.monotonic() - self._started, 2),
            rss_kb=rss,
            used_memory=int(memory["used_memory"]),
            lag=pods.lag or 0,
            lag_s=pods.max_lag_s or 0.0,
            stream_length=sum(shard.stream_length for shard in pods.shards),
            published=sum(shard.entries_added or 0 for shard in pods.shards),
        )


# --- the pipeline ------------------------------------------------------------------------------


class Pipeline:
    """The running processes of one soak, all stopped by the ``ExitStack`` they were given."""

    def __init__(self, stack: ExitStack, config: SoakConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.redis = local_redis.RedisServer(workdir / "redis")
        self.redis.start()
        stack.callback(self.redis.stop)
        self.client = redis.Redis.from_url(self.redis.url, socket_timeout=5)
        stack.callback(self.client.close)
        self.bus = Bus(self.client, "pods", shard_count=config.shards)
        # History capped at ~5 s of churn: the simulator's memory is flat once it is full.
        history = max(10_000, int(config.rate * 5))
        self.sim = SimulatorProcess(
            SimulatorSettings(populate=config.pods, seed=config.seed, history_max_events=history)
        )
        self.sim.start()
        stack.callback(self.sim.stop)
        self.reflector = ReflectorProcess(self._reflector_args(), workdir / "reflector.log")
        stack.callback(self.reflector.close)
        self.processors: list[ProcessorProcess] = []
        stack.callback(self._close_processors)
        self._incarnations = itertools.count(1)

    def _reflector_args(self) -> list[str]:
        c = self.config
        return reflector_flags(
            self.redis.url, self.sim.url, shard_count=c.shards, identity="reflector",
            lease_duration=15.0, renew_deadline=10.0, retry_period=2.0,
            retention_min_entries=c.retention_min_entries,
            retention_interval=c.retention_interval, log_level="warning",
        )  # fmt: skip

    def spawn(self, member: str, log_name: str) -> ProcessorProcess:
        c = self.config
        settings = processor_settings(
            self.redis.url, member, handler=HANDLER, shard_count=c.shards,
            lease_duration=c.lease, renew_deadline=c.lease * 0.75, retry_period=c.lease / 8,
            heartbeat_interval=0.5, member_ttl=2.0,
        )  # fmt: skip
        args: list[str] = []
        for name, value in settings.items():
            args += ["--" + name.replace("_", "-"), value]
        env = {"IB_SOAK_DIR": str(self.workdir)}
        process = ProcessorProcess(args, self.workdir / f"{log_name}.log", env=env)
        self.processors.append(process)
        return process.start()

    def _close_processors(self) -> None:
        for process in self.processors:
            process.close()

    def live(self) -> list[ProcessorProcess]:
        return [p for p in self.processors if p.running()]

    def start(self) -> None:
        self.reflector.start()
        wait_until(self.bus.synced, 120, interval=0.2, what="the reflector to sync")
        self.spawn(LONG_LIVED, LONG_LIVED)
        self.spawn(RESTARTED, f"{RESTARTED}#1")
        wait_balanced(self.bus, self.live(), timeout=60)

    def caches(self, timeout: float = 10.0) -> tuple[dict[str, str], list[str]]:
        """Ask every live processor for its cache; the union and what is wrong with the shard
        split (a shard owned twice or by nobody, a processor not synced)."""
        token = f"{time.monotonic():.6f}"
        (self.workdir / DUMP_REQUEST).write_text(token)
        paths = [self.workdir / f"{p.member_id}-{p.pid}.cache.json" for p in self.live()]

        def dumps() -> list[dict[str, object]] | None:
            found = []
            for path in paths:
                try:
                    document = json.loads(path.read_text())
                except FileNotFoundError:
                    return None
                if document["token"] != token:
                    return None
                found.append(document)
            return found

        documents = wait_until(dumps, timeout, interval=0.1, what="the cache dumps")
        union: dict[str, str] = {}
        problems: list[str] = []
        owners: dict[int, int] = {}
        for document in documents:
            union.update(document["objects"])  # type: ignore[call-overload]
            for shard in document["shards"]:  # type: ignore[attr-defined]
                owners[shard] = owners.get(shard, 0) + 1
            if not document["synced"]:
                problems.append(f"a processor is not synced: shards {document['shards']}")
        split = [s for s in range(self.config.shards) if owners.get(s) != 1]
        problems += [f"shard {s} is in {owners.get(s, 0)} caches" for s in split]
        return union, problems


# --- running -----------------------------------------------------------------------------------


def run(
    config: SoakConfig,
    workdir: Path | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Result:
    """Run one soak end to end; every process it started is stopped when it returns."""
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="ib-soak-"))
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True)
        pipeline = Pipeline(stack, config, workdir)
        progress(f"starting: {config.pods} pods, {config.shards} shards, work dir {workdir}")
        pipeline.start()
        result = Result(config)
        _soak(pipeline, result, progress)
        _check(pipeline, result)
        _stop(pipeline, result)
        result.growth = _growths(result)
        result.memory_problems = memory_verdict(result)
        result.problems += bound_verdict(result)
        return result


def _soak(pipeline: Pipeline, result: Result, progress: Callable[[str], None]) -> None:
    """The churn with the restarts, sampled; then the drain."""
    config = pipeline.config
    started = time.monotonic()
    sampler = Sampler(pipeline.redis.url, config.shards, started)
    sampler.watch("apiserver-sim", pipeline.sim.pid)
    assert pipeline.redis.process is not None
    sampler.watch("redis-server", pipeline.redis.process.pid)
    sampler.watch("reflector", pipeline.reflector.pid)
    p1, p2 = pipeline.processors
    sampler.watch(LONG_LIVED, p1.pid)
    sampler.watch(f"{RESTARTED}#1", p2.pid)
    mix = dict(config.mix)
    pipeline.sim.churn(config.rate, config.seconds, seed=config.seed, wait=False, mix=mix)
    sampler.start()
    try:
        for number in itertools.count(1):
            restart_at = started + number * config.restart_every
            if restart_at >= started + config.seconds - 1.0:
                break
            time.sleep(max(0.0, restart_at - time.monotonic()))
            p2 = _restart(pipeline, sampler, result, p2, number=number, started=started)
            progress(result.restarts[-1])
        time.sleep(max(0.0, started + config.seconds - time.monotonic()))
        stopped = pipeline.sim.control("stop-churn")["stopped"]
        result.churn = stopped[0] if stopped else {}
        churn_end = time.monotonic()
        progress(f"churn over: {result.churn}; draining")
        try:
            wait_until(
                lambda: sampler.samples and sampler.samples[-1].t > churn_end - started
                and sampler.samples[-1].lag == 0,
                config.drain_timeout, interval=0.2, what="the lag to drop to 0",
            )  # fmt: skip
            result.drain_seconds = time.monotonic() - churn_end
        except AssertionError as error:
            result.problems.append(str(error))
        _converge(pipeline, result, churn_end)
    finally:
        sampler.stop()
        result.samples = sampler.samples
        result.problems += [f"sampling failed at {e}" for e in sampler.errors]


def _restart(
    pipeline: Pipeline,
    sampler: Sampler,
    result: Result,
    process: ProcessorProcess,
    *,
    number: int,
    started: float,
) -> ProcessorProcess:
    """Stop ``p2`` (odd restarts: SIGTERM, even: kill -9) and start a new one at once."""
    label = f"{RESTARTED}#{number}"
    at = time.monotonic() - started
    if number % 2:
        try:
            status = process.terminate(timeout=30)
        except TimeoutError as error:
            result.problems.append(f"{label}: {error}")
            process.kill()
            status = -9
        if status != 0:
            result.problems.append(f"{label}: exited with status {status} on SIGTERM")
        how = "SIGTERM"
    else:
        process.kill()
        how = "kill -9"
    sampler.forget(label)
    new_label = f"{RESTARTED}#{number + 1}"
    replacement = pipeline.spawn(RESTARTED, new_label)
    sampler.watch(new_label, replacement.pid)
    result.restarts.append(f"{at:.1f} s: {how} {label}, started {new_label}")
    return replacement


def _converge(pipeline: Pipeline, result: Result, churn_end: float) -> None:
    """Until the live processors' caches equal the ground truth (or the drain timeout)."""
    truth = pipeline.sim.ground_truth("pods")
    last: list[str] = []

    def converged() -> bool:
        if assignment_problems(pipeline.bus, pipeline.live()):
            last[:] = assignment_problems(pipeline.bus, pipeline.live())
            return False
        union, split = pipeline.caches()
        last[:] = split + store_differences(union, truth)
        return not last

    try:
        wait_until(
            converged, pipeline.config.drain_timeout, interval=0.5,
            what=lambda: f"the caches to equal the ground truth: {last[:10]}",
        )  # fmt: skip
        result.converge_seconds = time.monotonic() - churn_end
    except AssertionError as error:
        result.problems.append(str(error))
        result.lost += sum(1 for problem in last if "simulator" in problem)


def _check(pipeline: Pipeline, result: Result) -> None:
    """Deletions, duplicates on the (retained) streams, dead letters, handler counts."""
    truth = pipeline.sim.ground_truth("pods")
    deleted: dict[str, int] = {}
    for path in pipeline.workdir.glob("*.deletes"):
        for line in path.read_text().splitlines():
            key = line.split(" ", 1)[0]
            deleted[key] = deleted.get(key, 0) + 1
    result.deletions_delivered = len(deleted)
    result.deletions_redelivered = sum(deleted.values()) - len(deleted)
    expected = int(result.churn.get("deletes", 0))
    if len(deleted) != expected:
        result.problems.append(
            f"deletions: the churn deleted {expected} objects, {len(deleted)} reached on_delete"
        )
        result.lost += abs(expected - len(deleted))
    alive = sorted(deleted.keys() & truth.keys())
    result.problems += [f"{key}: reached on_delete but is alive" for key in alive[:10]]
    result.problems += duplicate_problems(pipeline.bus.by_key())[:10]
    with status_client(pipeline.redis.url) as client:
        dead = sum(s.dead_letters for s in collect_status(client).resources[0].shards)
    if dead:
        result.problems.append(f"{dead} dead letters")
    for path in sorted(pipeline.workdir.glob("*.counts.json")):
        result.handled[path.name.removesuffix(".counts.json")] = json.loads(path.read_text())


def _stop(pipeline: Pipeline, result: Result) -> None:
    """Graceful stops, then the logs: every stop exits 0, no traceback anywhere."""
    for process in [*pipeline.live(), pipeline.reflector]:
        try:
            status = process.terminate(timeout=30)
        except TimeoutError as error:
            result.problems.append(str(error))
            continue
        if status != 0:
            result.problems.append(f"{process.log_path.name}: exited {status} on SIGTERM")
    for process in [pipeline.reflector, *pipeline.processors]:
        if "Traceback" in process.log():
            result.problems.append(f"{process.log_path.name}: logged a traceback")
    # Counts rewritten at the graceful stops.
    for path in sorted(pipeline.workdir.glob("*.counts.json")):
        result.handled[path.name.removesuffix(".counts.json")] = json.loads(path.read_text())


# --- the verdict -------------------------------------------------------------------------------


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


def _labels(samples: Sequence[Sample]) -> Iterator[str]:
    seen: dict[str, None] = {}
    for sample in samples:
        seen.update(dict.fromkeys(sample.rss_kb))
    return iter(seen)


def _growths(result: Result) -> list[Growth]:
    config = result.config
    churn = [s for s in result.samples if s.t <= config.seconds]
    found = []
    for label in _labels(churn):
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
    """The RSS rule (module docstring) for the judged processes."""
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
    """The lag and stream-length bounds (module docstring); correctness is checked before."""
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


# --- the report --------------------------------------------------------------------------------


def _rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in [header, *rows]
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return lines


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
    lines = _rows(header, rows)
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
        f"deletions: {result.deletions_delivered} of {result.churn.get('deletes', 0)} reached "
        f"on_delete ({result.deletions_redelivered} re-delivered); lost {result.lost}; caches "
        "equal the ground truth after "
        + ("never" if result.converge_seconds is None else f"{result.converge_seconds:.1f} s"),
        f"restarts: {len(result.restarts)}",
    ]
    return "\n".join(lines)


def write_samples(result: Result, path: Path) -> None:
    """One CSV line per sample (RSS in kB per process label)."""
    labels = list(_labels(result.samples))
    header = ["t", "lag", "lag_s", "stream_length", "published", "used_memory", *labels]
    lines = [",".join(header)]
    for s in result.samples:
        cells = [str(v) for v in (s.t, s.lag, s.lag_s, s.stream_length, s.published)]
        cells.append(str(s.used_memory))
        cells += [str(s.rss_kb[label]) if label in s.rss_kb else "" for label in labels]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")
