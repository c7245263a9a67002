"""bench/compare.py (``make bench``) stays runnable: a tiny run reports every contender for every
workload with its ratio, latency, memory and verdict (timings are never checked), writes its JSON,
and no process it started outlives it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bench.support import ROOT, run_bench
from tests.support.cli import one_line_error, run_command

BENCH = ROOT / "bench" / "compare.py"
PROGRAM = "bench/compare.py"
WORKLOADS = ("initial sync", "watch burst", "steady")
CONTENDERS = {
    "informer-bus/1", "informer-bus/2", "informer-bus/4", "informer-bus/1/compact",
    "bare", "watch", "sharedinformer", "kopf",
}  # fmt: skip
PODS = BURST = 200

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """The report, the printed table, and the directory the run wrote to."""
    out_dir = tmp_path_factory.mktemp("compare")
    report, chart = out_dir / "report.json", out_dir / "chart.png"
    args = ("--pods", str(PODS), "--burst", str(BURST), "--steady-seconds", "0.5", "--quiet",
            "--json", str(report), "--chart", str(chart))  # fmt: skip
    out = run_bench(BENCH, *args, timeout=200)
    result: dict[str, Any] = orjson.loads(report.read_bytes())
    return result, out, out_dir


def test_every_contender_has_a_sane_row_per_workload(
    run: tuple[dict[str, Any], str, Path],
) -> None:
    report, _, _ = run
    rows = {(row["workload"], row["contender"]): row for row in report["rows"]}
    assert set(rows) == {(w, c) for w in WORKLOADS for c in CONTENDERS}
    assert len(report["rows"]) == len(rows)
    for row in report["rows"]:
        assert row["events"] > 0 and row["seconds"] > 0 and row["peak_rss_mb"] > 10
        assert row["events_per_s"] == pytest.approx(row["events"] / row["seconds"], rel=0.02)
        ours = row["contender"].startswith("informer-bus/")
        assert (row["ratio"] is None) == ours
        if row["workload"] == "steady":
            assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
            assert row["rate_churned"] > 0, "the simulator's own account of the churn"
        if row["target"] is not None:
            assert row["met"] is not None
    for contender in CONTENDERS:
        assert rows[("initial sync", contender)]["events"] == PODS
        assert rows[("watch burst", contender)]["events"] == BURST
    assert 0 < rows[("watch burst", "kopf")]["handled"] <= BURST  # kopf may coalesce
    assert rows[("watch burst", "sharedinformer")]["target"] == 5.0
    assert rows[("watch burst", "kopf")]["target"] == 3.0
    assert rows[("watch burst", "bare")]["target"] == 0.6
    assert rows[("initial sync", "sharedinformer")]["reference"] == "informer-bus, 4 processors"
    assert rows[("steady", "informer-bus/1")]["target"] == 10.0


def test_memory_machine_and_versions_are_reported(run: tuple[dict[str, Any], str, Path]) -> None:
    report, _, _ = run
    memory = report["memory"]
    assert 1000 < memory["pod_json_bytes"] < 10_000
    assert memory["redis_bytes_per_pod"] > memory["pod_json_bytes"] / 2
    assert memory["cached_pods"] == PODS
    assert "compact_processor_rss_growth_bytes_per_pod" in memory
    assert [t["what"] for t in report["memory_targets"]] == [
        "processor RSS growth per cached pod / pod JSON, compact cache",
        "processor RSS growth per cached pod / pod JSON, plain dicts (the default)",
        "Redis used_memory / JSON of (cached pods + retained stream entries)",
    ]
    assert [t["met"] for t in report["memory_targets"]] == [
        t["ratio"] <= t["target"] for t in report["memory_targets"]
    ]
    assert report["machine"]["cores"] >= 1
    assert report["versions"]["kopf"] == "1.45.2"
    assert report["sizes"]["pods"] == PODS


def test_the_table_and_the_chart_step(run: tuple[dict[str, Any], str, Path]) -> None:
    report, out, out_dir = run
    lines = out.splitlines()
    for row in report["rows"]:
        assert any(line.startswith(f"{row['workload']:13} {row['label']:30}") for line in lines)
    verdicts = [row["met"] for row in report["rows"] if row["met"] is not None]
    assert out.count("MISSED") >= verdicts.count(False)
    chart = out_dir / "chart.png"
    if chart.exists():  # matplotlib happens to be installed
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "chart skipped: matplotlib is not installed" in out


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--pods", "0"], "--pods and --burst must be at least 1"),
        (["--steady-rate", "-1"], "must be positive"),
        (["--skip", "nobody"], "invalid choice"),
        (["--chart-from", "missing.json", "--chart", "x.png"], "no such file"),
    ],
)
def test_a_bad_flag_is_one_line(args: list[str], complaint: str) -> None:
    result = run_command([sys.executable, str(BENCH)], *args)
    assert complaint in one_line_error(result, PROGRAM)
