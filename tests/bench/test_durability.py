"""bench/durability.py stays runnable: a tiny run against a primary with two replicas reports
every N (0, 1, 2) with its ratios to N = 0, leaves no redis-server behind, and bad flags end in
one line. Timings and CPU are never checked."""

from __future__ import annotations

import re

import pytest

from tests.bench.support import assert_usage_errors, run_bench
from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "durability.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROW = re.compile(
    r"^ *(\d) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)"
)


def test_a_tiny_run_reports_every_n_against_n_0() -> None:
    out = run_bench(BENCH, "--deltas", "100", "--batch", "20", "--repeat", "1", timeout=150)
    rows = {int(m.group(1)): m.groups() for line in out.splitlines() if (m := ROW.match(line))}
    assert sorted(rows) == [0, 1, 2], out
    assert float(rows[0][2]) == 1.0  # N = 0 is the yardstick of its own run
    assert all(int(row[1]) > 0 for row in rows.values()), out


def test_bad_flags_end_in_one_line() -> None:
    assert_usage_errors(BENCH, ["--deltas", "0"], ["--batch", "x"])
