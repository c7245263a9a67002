"""The metric-name extraction the dashboard and rules checks rely on: a name it missed would
go unchecked, a label or function it took for a name would fail the check for nothing."""

from __future__ import annotations

import pytest

from tests.support.promql_names import metric_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ("up == 0", {"up"}),
        ('informer_bus_reflector_leader{resource=~"$resource"}', {"informer_bus_reflector_leader"}),
        ("rate(a_total[5m])", {"a_total"}),
        ("rate(a_total{x='}'}[$__rate_interval])", {"a_total"}),
        ('sum by (resource, le) (rate(h_bucket{q="a{b}[c]"}[1m]))', {"h_bucket"}),
        ("sum(rate(h_bucket[1m])) by (le, handler)", {"h_bucket"}),
        ("histogram_quantile(0.99, sum without (instance) (rate(h_bucket[5m])))", {"h_bucket"}),
        ("max by (resource, group) (a) - sum by (resource, group) (b) > 0", {"a", "b"}),
        ("(a == 1) unless (b == 1)", {"a", "b"}),
        ("a and on (x) group_left (y) b", {"a", "b"}),
        ("a * on (x) group_left b", {"a", "b"}),
        ("sum(a unless a offset 15m) or vector(0)", {"a"}),
        ("absent(a)", {"a"}),
        ("a / ignoring (shard) b", {"a", "b"}),
        ("topk(5, a:recorded:rate5m)", {"a:recorded:rate5m"}),
        ("max_over_time(a[10m:1m]) > 1e3 and deriv(b[15m]) > 0x10", {"a", "b"}),
        ("a @ start()", {"a"}),
        ("a > bool 3", {"a"}),
        ("rate(c[${__rate_interval}]) * $factor", {"c"}),
        ("-inf < a < Inf and a != NaN", {"a"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_metric_named_like_an_aggregation_is_kept_when_it_is_not_one() -> None:
    # Only "count by (...)" or "count(...)" is the operator; a bare "count" is a metric.
    assert metric_names("count + 1") == {"count"}
    assert metric_names("count by (x) (y)") == {"y"}
