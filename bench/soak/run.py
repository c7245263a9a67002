"""The soak of issue 7 (point 4): steady churn through the whole pipeline, one processor
restarted again and again, memory and lag sampled every second.

Every piece is a real process: the API server simulator (``SimulatorProcess``) churning pods
(mostly updates, some creates and deletes), a private ``redis-server``, a reflector and two
processors running :class:`bench.soak.handler.SoakCounter` (bounded state: its memory is the
processor's). ``p1`` lives through the whole run; ``p2`` is restarted every ``restart_every``
seconds, alternately with SIGTERM (graceful) and kill -9, and started again at once.

Every second a sampler thread records the RSS of every process (``VmRSS``; a restarted ``p2``
is a new series), Redis ``used_memory``, the processors' group's unacknowledged entries on
every shard (XINFO GROUPS lag + pending, summed:
:func:`informer_bus.status.collect.collect_status`), the oldest unacknowledged entry's age,
the shard streams' length and what the reflector published.

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
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from bench.soak.processes import LONG_LIVED, RESTARTED, Pipeline
from bench.soak.results import Result, SoakConfig
from bench.soak.sampling import Sampler
from bench.soak.verdict import bound_verdict, growths, memory_verdict
from informer_bus.status.collect import collect_status, status_client
from tests.support.bus import ProcessorProcess, duplicate_problems
from tests.support.processor_ha import assignment_problems, store_differences
from tests.support.waiting import wait_until

__all__ = ["run"]


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
        result.growth = growths(result)
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
    # Owed: the deletion of every object the handlers were told of (an object created and
    # deleted while its shard had no owner never reached them, and is owed nothing).
    told = {line for path in pipeline.workdir.glob("*.adds") for line in path.read_text().split()}
    owed = told - truth.keys()  # the churn's names only grow: a key gone is deleted for good
    result.deletions_owed = len(owed)
    missing = sorted(owed - deleted.keys())
    if missing:
        result.problems.append(
            f"deletions: {len(missing)} of the {len(owed)} objects the handlers were told of "
            f"and the churn deleted never reached on_delete: {missing[:10]}"
        )
        result.lost += len(missing)
    alive = sorted(deleted.keys() & truth.keys())
    result.problems += [f"{key}: reached on_delete but is alive" for key in alive[:10]]
    result.problems += duplicate_problems(pipeline.bus.by_key())[:10]
    with status_client(pipeline.redis.url) as client:
        dead = sum(g.dead_letters for g in collect_status(client).resources[0].groups)
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
