"""bench/pipeline.py stays runnable: a tiny run reports every workload and configuration, and
what the processors' handlers actually received (their own counts: every pod of the initial
sync, every update of each burst, each processor's share), so a bench that timed a pipeline
which lost or repeated events fails here. Timings are never checked, nor the arithmetic the
report derives from them; no process it started outlives it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.bench.support import assert_usage_errors, run_bench
from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "pipeline.py"
EXPECTED = {
    ("initial sync", "SharedInformer"), ("watch burst", "SharedInformer"),
    ("initial sync", "1 processor"), ("watch burst", "1 processor"),
    ("initial sync", "2 processors"), ("watch burst", "2 processors"),
    ("initial sync", "4 processors"), ("watch burst", "4 processors"),
    ("steady churn", "1 processor"),
    ("burst, 2 ms handler", "1 processor"), ("burst, 2 ms handler", "4 processors"),
}  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    args = ("--pods", "300", "--burst", "300", "--io-burst", "200", "--steady-seconds", "2",
            "--json", "--quiet")  # fmt: skip
    result: dict[str, Any] = orjson.loads(run_bench(BENCH, *args, timeout=300))
    return result


def test_every_workload_and_configuration_has_a_row(report: dict[str, Any]) -> None:
    rows = {(row["workload"], row["config"]): row for row in report["rows"]}
    assert set(rows) == EXPECTED and len(report["rows"]) == len(EXPECTED)
    for row in report["rows"]:
        assert row["events"] > 0 and row["seconds"] > 0
    for count in ("1 processor", "2 processors", "4 processors"):
        assert rows[("watch burst", count)]["target_ratio"] == 5.0
    assert rows[("burst, 2 ms handler", "4 processors")]["target_ratio"] == 3.5
    assert rows[("burst, 2 ms handler", "4 processors")]["baseline"] == "1 processor"


def test_the_handlers_received_every_event(report: dict[str, Any]) -> None:
    """Counted by the handlers in the processors: the initial list's adds, each burst's
    updates, and how the 2 ms handler's burst split between the processors."""
    rows = {(row["workload"], row["config"]): row for row in report["rows"]}
    for count in ("1 processor", "2 processors", "4 processors"):
        assert rows[("initial sync", count)]["initial_adds"] == 300
        assert rows[("watch burst", count)]["handled"] == 300
    for count, processors in (("1 processor", 1), ("4 processors", 4)):
        row = rows[("burst, 2 ms handler", count)]
        assert row["handled"] == 200
        shares = row["per_processor"]
        assert len(shares) == processors, "each processor's share of the burst"
        assert sum(events for events, _ in shares) == 200
        assert all(events > 0 and busy >= 0 for events, busy in shares), "16 shards each"


def test_latency_machine_and_notes_are_reported(report: dict[str, Any]) -> None:
    latency = report["latency"]
    assert {"p50_ms", "p99_ms", "max_ms", "rate_churned"} <= set(latency)
    # Handler time minus the simulator's commit stamp: the bench fails on a negative one.
    assert 0 <= latency["min_ms"] <= latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert latency["rate_churned"] > 0
    assert report["machine"]["cores"] >= 1
    assert report["sizes"]["pods"] == 300 and report["sizes"]["shards"] == 16
    assert any("cores" in note for note in report["notes"])


def test_the_table_prints_every_row_with_its_verdict(
    report: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import pipeline_report  # type: ignore[import-not-found]

    pipeline_report.print_table(report)
    lines = capsys.readouterr().out.splitlines()
    assert "cores" in lines[0]
    for row in report["rows"]:
        [line] = [
            line for line in lines if line.startswith(f"{row['workload']:20} {row['config']:15}")
        ]
        if row["met"] is not None:
            assert ("MISSED" in line) != row["met"]


def test_bad_flags_end_with_a_usage_error() -> None:
    assert_usage_errors(BENCH, ["--pods", "0"], ["--pods", "10", "--informer-pods", "20"])
