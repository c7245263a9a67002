"""The Grafana dashboard and the alerting rules against a real Prometheus scraping a real
pipeline (issue 18, point 3): a redis-server, a reflector on the simulator and a processor with a
controller (for the workqueue series), scraped every second.

* ``promtool check rules`` accepts the rules file, and ``promtool test rules`` shows a few alerts
  fire when they should (``rules_test.yml``);
* every metric name the dashboard's and the rules' expressions read was scraped: as a series,
  or (for counters whose labelled series are born at their first event) as a family in the
  scrape's metadata;
* Prometheus evaluated every rule without an error, every panel query parses and those whose
  metrics all have series return data, and the alerts' joins meet on the live labels.

A missing ``prometheus`` or ``promtool`` fails (``make install`` installs them), never skips.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from apiserver_sim import Simulator
from tests.support.bus import ProcessorProcess, ReflectorProcess, ServiceProcess, closing_with_logs
from tests.support.paths import ROOT
from tests.support.prometheus import RULES, PrometheusServer, api_get, prometheus_tool
from tests.support.promql_names import metric_names
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

DASHBOARD = ROOT / "deploy" / "grafana" / "informer-bus.json"
RULES_TEST = Path(__file__).with_name("rules_test.yml")
SHARDS = 4
CONTROLLER = "tests.processor.handler_api.handler_targets:KeyRecorder"

ONLY_ON_EVENT = {
    "informer_bus_reflector_bad_input_total": "labelled by the reason an object was refused",
    "informer_bus_reflector_bad_watch_lines_total": "labelled by the reason a line was bad",
    "informer_bus_reflector_shard_key_fallbacks_total": "labelled by the fallback's reason",
    "informer_bus_reflector_errors_total": "labelled by the error's kind",
    "informer_bus_reflector_forced_trims_total": "labelled by the group that lost entries",
    "informer_bus_processor_move_waits_expired_total": "created at the first expired wait",
    "informer_bus_processor_replica_bad_entries_total": "a replicated resource's, at the first",
}
"""Counters with no series until their first event (a label value only the event names);
Prometheus still scrapes their family (``# TYPE``), which is what is checked for them."""


_SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
"""What a family's samples add to its name, by the family's type."""


def _dashboard_exprs() -> list[str]:
    """Every panel query, and each variable's ``label_values(SELECTOR, label)`` selector."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            assert query.startswith("label_values(") and query.endswith(")"), query
            exprs.append(query[len("label_values(") : query.rindex(",")])
    return exprs


def _rule_exprs() -> list[str]:
    rules = yaml.safe_load(RULES.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def _instant(expr: str) -> str:
    """A dashboard query as Prometheus takes it: Grafana's variables replaced."""
    for variable, value in (("$__rate_interval", "10s"), ("$resource", ".*"), ("$group", ".*"),
                            ("$shard", ".*"), ("$workqueue", ".*")):  # fmt: skip
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def test_the_rules_file_passes_promtool_check() -> None:
    result = subprocess.run(
        [prometheus_tool("promtool"), "check", "rules", str(RULES)],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rule_exprs())} rules found" in result.stdout


def test_alerts_fire_in_promtool_unit_tests() -> None:
    result = subprocess.run(
        [prometheus_tool("promtool"), "test", "rules", str(RULES_TEST)],
        check=False, capture_output=True, text=True, timeout=60, cwd=RULES_TEST.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _target(service: ServiceProcess) -> str:
    return service.url().removeprefix("http://")


@pytest.mark.timeout(180)
def test_every_metric_of_the_dashboard_and_rules_is_scraped(
    redis_server: RedisServer,
    redis_client: object,
    sim: Simulator,
    prometheus: Callable[[list[str]], PrometheusServer],
    tmp_path: Path,
) -> None:
    sim.populate("pods", 50, seed=18)
    common = ["--resource", "pods", "--redis-url", redis_server.url, "--http-host", "127.0.0.1",
              "--http-port", "0", "--shard-count", str(SHARDS)]  # fmt: skip
    started: list[ServiceProcess] = []
    with closing_with_logs(started):
        reflector = ReflectorProcess([*common, "--kube-url", sim.url], tmp_path / "reflector.log")
        started.append(reflector.start())
        processor = ProcessorProcess(
            [*common, "--handler", CONTROLLER, "--member-id", "p1"], tmp_path / "processor.log"
        )
        started.append(processor.start())
        prometheus_server = prometheus([_target(reflector), _target(processor)])
        query = prometheus_server.query

        # Settled: both targets up for a few scrapes, every shard owned, the leader synced.
        wait_until(
            lambda: len(query("min_over_time(up[1m]) == 1 and count_over_time(up[1m]) >= 4"))
            == 2,
            60, what="both targets scraped up at least 4 times",
        )  # fmt: skip
        unowned = (
            "max by (resource, group) (informer_bus_processor_shard_count)"
            " - sum by (resource, group) (informer_bus_processor_owned_shards)"
        )
        wait_until(
            lambda: [s["value"][1] for s in query(unowned)] == ["0"], 60,
            what="the processor to own every shard, as Prometheus sees it",
        )  # fmt: skip
        leaders = query("max by (resource) (informer_bus_reflector_leader)")
        assert [(s["metric"], s["value"][1]) for s in leaders] == [({"resource": "pods"}, "1")]
        wait_until(lambda: query("informer_bus_reflector_synced == 1"), 60, what="sync")
        sim.start_churn(rate=50, seconds=2, seed=18).wait(30)
        wait_until(
            lambda: query("count_over_time(informer_bus_processor_lag_entries[1m]) >= 4"), 30,
            what="a few scrapes of the processor's per-shard series",
        )  # fmt: skip

        series = set(api_get(prometheus_server.url, "/api/v1/label/__name__/values"))
        families: set[str] = set()
        for name, entries in api_get(prometheus_server.url, "/api/v1/metadata").items():
            # Scraped as OpenMetrics, a family is named without its samples' suffixes.
            families.add(name)
            for suffixes in (_SAMPLE_SUFFIXES.get(entry["type"], ()) for entry in entries):
                families |= {name + suffix for suffix in suffixes}

        used = {name for e in _dashboard_exprs() + _rule_exprs() for name in metric_names(e)}
        assert len(used) > 40, used
        assert used - series - families == set(), "names no target exposes"
        assert used - series <= ONLY_ON_EVENT.keys(), "names with no series (typo or no data)"
        assert ONLY_ON_EVENT.keys() <= families, "an ONLY_ON_EVENT entry names no family"
        assert {name for name in used if name.startswith("workqueue_")} <= series

        # Every rule evaluated cleanly on the scraped data (a bad join or type is an error
        # only at evaluation, which promtool check does not do).
        def evaluated() -> list[dict[str, Any]]:
            groups = api_get(prometheus_server.url, "/api/v1/rules")["groups"]
            rules: list[dict[str, Any]] = [rule for group in groups for rule in group["rules"]]
            done = all(not rule["lastEvaluation"].startswith("0001") for rule in rules)
            return rules if done else []

        rules = wait_until(evaluated, 30, what="every rule to be evaluated")
        assert len(rules) == len(_rule_exprs())
        assert [
            (r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"
        ] == []
        firing = [r["name"] for r in rules if r["state"] == "firing"]
        assert firing == [], "a healthy pipeline fires no alert"

        # Every panel query parses; those whose metrics all have series show data.
        empty = []
        for expr in _dashboard_exprs():
            if not query(_instant(expr)) and metric_names(expr) <= series - ONLY_ON_EVENT.keys():
                empty.append(expr)
        assert empty == [], "panel queries without data although their series exist"
