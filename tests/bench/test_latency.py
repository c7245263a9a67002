"""The benches' latency is handler time minus the simulator's commit stamp; one that comes out
negative means the two clocks differ, and the bench refuses to report it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from apiserver_sim.load import CHURN_ANNOTATION, COMMITTED_AT_ANNOTATION
from tests.support.paths import ROOT


@pytest.fixture
def pipeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import pipeline_workloads as pipeline  # type: ignore[import-not-found]

    yield pipeline


def test_latency_is_handler_time_minus_commit_stamp(pipeline: ModuleType) -> None:
    updates = [pipeline.Update(0, 5_000_000, 7_500_000), pipeline.Update(1, 6_000_000, 6_250_000)]
    assert pipeline.latencies_ms(updates) == [0.25, 2.5]


def test_a_negative_latency_fails_the_bench(pipeline: ModuleType) -> None:
    updates = [pipeline.Update(0, 5_000_000, 7_500_000), pipeline.Update(1, 6_000_000, 5_840_000)]
    expected = r"1 of 2 updates were handled before the simulator committed them .* 0\.160 ms"
    with pytest.raises(pipeline.BenchError, match=expected):
        pipeline.latencies_ms(updates)


def test_an_unstamped_update_fails_the_bench(pipeline: ModuleType) -> None:
    updates = [pipeline.Update(0, 5_000_000, 7_500_000), pipeline.Update(1, -1, 7_600_000)]
    with pytest.raises(pipeline.BenchError, match=r"without the simulator's \S+ stamp"):
        pipeline.latencies_ms(updates)


def test_the_handler_records_the_stamp_beside_its_own_clock(
    pipeline: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench_handlers  # type: ignore[import-not-found]

    monkeypatch.setenv(bench_handlers.DIR_ENV, str(tmp_path))
    handler = bench_handlers.Trivial()
    stamp = bench_handlers.handler_clock_ns()
    annotations = {CHURN_ANNOTATION: "7", COMMITTED_AT_ANNOTATION: str(stamp)}
    handler.on_update({}, {"metadata": {"annotations": annotations}})
    handler.on_update({}, {"metadata": {}})  # not a churn update
    after = bench_handlers.handler_clock_ns()
    handler.stop()
    [path] = tmp_path.glob("updates-*.bin")
    stamped, plain = map(
        pipeline.Update._make, bench_handlers.RECORD.iter_unpack(path.read_bytes())
    )
    assert (stamped.step, stamped.committed_ns) == (7, stamp)
    assert stamp <= stamped.handled_ns <= after
    assert (plain.step, plain.committed_ns) == (-1, -1)
