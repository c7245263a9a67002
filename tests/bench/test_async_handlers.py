"""bench/async_handlers.py on a tiny burst: every processor handled every update, the async
one overlapped its waits (faster than one at a time by more than the waits it could not
overlap), and the CPU figures add up."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.bench.support import ROOT, run_bench

BENCH = ROOT / "bench" / "async_handlers.py"
PODS, UPDATES, CONCURRENCY = 20, 40, 10

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    args = ["--pods", str(PODS), "--burst", str(UPDATES), "--concurrency", str(CONCURRENCY),
            "--idle", "1", "--quiet"]  # fmt: skip
    result: dict[str, Any] = orjson.loads(run_bench(BENCH, *args, timeout=240))
    return result


def test_every_processor_handled_the_burst_and_the_async_one_overlapped(
    report: dict[str, Any],
) -> None:
    rows = report["processors"]
    assert sorted(rows) == ["async", "sync", "sync-no-io"]
    assert all(row["updates_handled"] == UPDATES for row in rows.values())
    assert rows["sync"]["seconds"] >= UPDATES * 0.05  # one 50 ms wait after another
    # 40 updates over 20 pods, 10 at once: well under half the one-at-a-time time.
    assert rows["async"]["seconds"] < rows["sync"]["seconds"] / 2
    assert rows["async"]["max_concurrent_reconciles"] == CONCURRENCY
    assert report["speedup"] == pytest.approx(
        rows["sync"]["seconds"] / rows["async"]["seconds"], abs=0.06
    )


def test_net_cpu_is_the_raw_cpu_less_the_idle_rate_over_the_span(report: dict[str, Any]) -> None:
    for row in report["processors"].values():
        raw = row["cpu_us_per_event"] * UPDATES / 1e6
        idle = row["idle_cpu_ms_per_s"] / 1000 * row["seconds"]
        expected = max(0.0, raw - idle) / UPDATES * 1e6
        assert row["net_cpu_us_per_event"] == pytest.approx(expected, abs=0.2)
        assert 0 <= row["net_cpu_us_per_event"] <= row["cpu_us_per_event"]
