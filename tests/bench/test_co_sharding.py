"""bench/co_sharding.py stays runnable and reports what the processors did: a tiny run's groups
applied (by the processors' own /metrics) exactly the updates the simulator made, as many as
the entries it counted in Redis; the newcomer's takeovers loaded (by its log lines and by its
store gauges) whole shard groups, as many ConfigMaps as Widgets on each. Each of these is
measured by something other than the bench's own arithmetic, so a bench that reads the wrong
thing fails here. Timings are never checked."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.bench.support import assert_usage_errors, run_bench
from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "co_sharding.py"
WIDGETS = 60

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    args = ("--widgets", str(WIDGETS), "--rounds", "1", "--json", "--quiet")
    result: dict[str, Any] = orjson.loads(run_bench(BENCH, *args, timeout=240))
    return result


def test_each_group_applied_every_update_of_its_resources(report: dict[str, Any]) -> None:
    """One update per ConfigMap for ``single``, per ConfigMap and Widget for ``co-sharded``:
    what the processors applied (their counters) and what was in the streams (Redis)."""
    [round_] = report["rounds"]
    expected = {"single": WIDGETS, "co-sharded": 2 * WIDGETS}
    assert round_["applied"] == expected
    assert round_["events"] == expected
    assert set(round_["cpu_s"]) == set(expected)


def test_a_newcomer_takes_whole_shard_groups_over(report: dict[str, Any]) -> None:
    takeovers = report["takeovers"]
    assert takeovers, "the newcomer took no shard group"
    shards = [row["shard"] for row in takeovers]
    assert len(set(shards)) == len(shards)
    for row in takeovers:
        objects = row["objects"]
        assert set(objects) == {"widgets.example.com", "configmaps"}
        assert row["store_objects"] == objects  # its store holds what it logged loading
        assert objects["widgets.example.com"] == objects["configmaps"]  # co-located
    assert 0 < sum(row["objects"]["configmaps"] for row in takeovers) < WIDGETS


def test_bad_flags_end_with_a_usage_error() -> None:
    assert_usage_errors(BENCH, ["--widgets", "0"], ["--rounds", "0"])
