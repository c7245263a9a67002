"""bench/co_sharding.py stays runnable: a tiny run reports the events each group read, a ratio
whose verdict agrees with its target, and takeovers whose objects add up (each shard group
holds as many ConfigMaps as Widgets: every ConfigMap is on its owner's shard); no process it
started outlives it. Timings are never checked."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.bench.support import ROOT, assert_usage_errors, run_bench

BENCH = ROOT / "bench" / "co_sharding.py"
WIDGETS = 60

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    args = ("--widgets", str(WIDGETS), "--rounds", "1", "--json", "--quiet")
    result: dict[str, Any] = orjson.loads(run_bench(BENCH, *args, timeout=240))
    return result


def test_each_group_read_its_resources_updates(report: dict[str, Any]) -> None:
    [round_] = report["rounds"]
    assert round_["events"] == {"single": WIDGETS, "co-sharded": 2 * WIDGETS}
    for name, cpu in round_["cpu_s"].items():
        assert cpu >= 0
        per_event = round_["cpu_us_per_event"][name]
        assert per_event == pytest.approx(cpu / round_["events"][name] * 1e6, abs=0.01)
    [ratio] = report["ratio"]
    single = round_["cpu_us_per_event"]["single"]
    if single > 0:  # CPU is counted in 10 ms ticks: a tiny run may show none
        assert ratio == pytest.approx(round_["cpu_us_per_event"]["co-sharded"] / single)
    else:
        assert ratio is None


def test_a_newcomer_takes_whole_shard_groups_over(report: dict[str, Any]) -> None:
    takeovers = report["takeovers"]
    assert takeovers, "the newcomer took no shard group"
    shards = [row["shard"] for row in takeovers]
    assert len(set(shards)) == len(shards)
    for row in takeovers:
        assert row["seconds"] >= 0
        objects = row["objects"]
        assert set(objects) == {"widgets.example.com", "configmaps"}
        assert objects["widgets.example.com"] == objects["configmaps"]  # co-located
    assert sum(row["objects"]["configmaps"] for row in takeovers) <= WIDGETS
    assert report["rebalance_s"] > 0


def test_bad_flags_end_with_a_usage_error() -> None:
    assert_usage_errors(BENCH, ["--widgets", "0"], ["--rounds", "0"])
