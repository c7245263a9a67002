"""Point 10: the benchmark script runs (tiny sizes here; real numbers come from bench/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "simulator_rates.py"


def test_bench_script_reports_list_and_watch_rates() -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--pods", "600", "--page-size", "100",
         "--replay-events", "500", "--live-rate", "500", "--live-seconds", "0.5"],
        capture_output=True, text=True, check=False, timeout=50,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "LIST 600 pods in 6 pages" in result.stdout
    assert "WATCH replay of 500 events" in result.stdout
    assert "WATCH live, churn flat out:" in result.stdout
    assert "events/s (target >= 20,000" in result.stdout
