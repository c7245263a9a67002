"""bench/core.py stays runnable: a tiny run prints every measurement (timings are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "core.py"


def test_core_bench_runs_and_reports_every_ratio() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--objects", "500", "--repeat", "1", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = orjson.loads(result.stdout)
    measured = {row["what"] for row in rows}
    assert {"envelope encode+decode", "Indexer update(obj)", "workqueue add->get->done"} <= measured
    for row in rows:
        assert row["us"] > 0 and row["baseline_us"] > 0
        assert row["ratio"] == pytest.approx(row["us"] / row["baseline_us"], rel=0.05, abs=0.01)
        assert (row["met"] is None) == (row["target_ratio"] is None)


def test_core_bench_rejects_bad_flags_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--objects", "0"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "at least 1" in result.stderr
