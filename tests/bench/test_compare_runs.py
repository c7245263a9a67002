"""bench/compare_runs.py: two runs' CPU ratios side by side, and whether they agree."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from tests.support.cli import one_line_error, run_command
from tests.support.paths import ROOT

SCRIPT = ROOT / "bench" / "compare_runs.py"
PROGRAM = "bench/compare_runs.py"


def report(path: Path, processors_ratio: float) -> Path:
    rows = [
        {"workload": "watch burst", "label": "bare urllib3+orjson", "contender": "bare",
         "cpu_ratio_to_bare": 1.0},
        {"workload": "watch burst", "label": "informer-bus, 1 processor",
         "contender": "informer-bus/1", "cpu_ratio_to_bare": processors_ratio},
    ]  # fmt: skip
    path.write_bytes(orjson.dumps({"rows": rows}))
    return path


def test_runs_within_the_tolerance_agree(tmp_path: Path) -> None:
    result = run_command(
        [sys.executable, str(SCRIPT)],
        str(report(tmp_path / "a.json", 8.0)),
        str(report(tmp_path / "b.json", 9.2)),
    )
    assert result.returncode == 0, result.stderr
    assert "informer-bus, 1 processor" in result.stdout and "15.0%" in result.stdout
    assert "0 row(s) more than 20% apart" in result.stdout


def test_runs_further_apart_fail_and_name_the_row(tmp_path: Path) -> None:
    result = run_command(
        [sys.executable, str(SCRIPT)],
        str(report(tmp_path / "a.json", 8.0)),
        str(report(tmp_path / "b.json", 10.0)),
    )
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if "1 processor" in line)
    assert line.endswith("25.0%  APART")


def test_a_file_that_is_no_report_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    result = run_command([sys.executable, str(SCRIPT)], str(tmp_path / "x.json"), "missing.json")
    assert "not a bench/compare.py --json report" in one_line_error(result, PROGRAM)
