"""Autoscaling on lag against a real Prometheus (issue 37, point 4): a redis-server, a reflector
on the simulator and one processor, scraped every second. Under churn the processor is
SIGSTOPped: the ScaledObject's query -- read from the rendered overlay, not copied -- rises above
the ScaledObject's threshold although the stopped processor cannot be scraped (the lag comes
from the reflector leader); after SIGCONT the processor catches up and the query falls back
below it. The KEDA-less HPA's query (prometheus-adapter's rule, with the HPA's selector filled
in) gives the same figure at the same instants.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from apiserver_sim import Simulator
from tests.app.deploy.manifests import render
from tests.support.bus import ProcessorProcess, ReflectorProcess, ServiceProcess, closing_with_logs
from tests.support.paths import ROOT
from tests.support.prometheus import PrometheusServer
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

SHARDS = 4
HANDLER = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
CHURN_RATE = 400
"""Updates per second while the processor is stopped: past a 1,000-entry threshold in about
2.5 s, well inside the processor's 15 s shard leases."""


def scaled_object_trigger() -> dict[str, str]:
    """The default group's ScaledObject's Prometheus trigger, as kustomize renders it."""
    (scaled,) = [d for d in render("overlays/single-redis") if d["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    metadata: dict[str, str] = trigger["metadata"]
    return metadata


def adapter_query(group: str) -> str:
    """The query prometheus-adapter runs for the HPA's external metric, its template filled in
    as the adapter fills it for a selector ``group: <group>``."""
    (rule,) = yaml.safe_load(
        (ROOT / "deploy" / "prometheus" / "adapter-external-rules.yml").read_text()
    )["externalRules"]
    (series,) = [rule["seriesQuery"].split("{", 1)[0]]
    return str(
        rule["metricsQuery"]
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", f'group="{group}"')
    )


def value(server: PrometheusServer, query: str, at: float) -> float | None:
    """The single value a query gives at instant ``at`` (``None``: no data, which KEDA with
    ``ignoreNullValues: false`` treats as an error, not as zero)."""
    result = server.query(query, time=f"{at:.3f}")
    assert len(result) <= 1, result  # KEDA needs a single-element answer
    return float(result[0]["value"][1]) if result else None


def _target(service: ServiceProcess) -> str:
    return service.url().removeprefix("http://")


@pytest.mark.timeout(120)
def test_the_scaled_objects_query_crosses_its_threshold_while_the_processor_is_stopped(
    redis_server: RedisServer,
    redis_client: object,
    sim: Simulator,
    prometheus: Callable[[list[str]], PrometheusServer],
    tmp_path: Path,
) -> None:
    trigger = scaled_object_trigger()
    query, threshold = trigger["query"], float(trigger["threshold"])
    hpa_query = adapter_query("processors")
    sim.populate("pods", 50, seed=37)
    common = ["--resource", "pods", "--redis-url", redis_server.url, "--http-host", "127.0.0.1",
              "--http-port", "0", "--shard-count", str(SHARDS)]  # fmt: skip
    started: list[ServiceProcess] = []
    with closing_with_logs(started):
        reflector = ReflectorProcess(
            [*common, "--kube-url", sim.url, "--retention-interval", "1"],
            tmp_path / "reflector.log",
        )
        started.append(reflector.start())
        processor = ProcessorProcess(
            [*common, "--handler", HANDLER, "--member-id", "p1"], tmp_path / "processor.log"
        )
        started.append(processor.start())
        server = prometheus([_target(reflector), _target(processor)])

        def now(expr: str) -> float | None:
            return value(server, expr, time.time())

        # Caught up: the group's lag is scraped and below the threshold.
        wait_until(
            lambda: (lag := now(query)) is not None and lag < threshold, 60,
            what="the group's lag below the threshold, as Prometheus sees it",
        )  # fmt: skip

        processor.send(signal.SIGSTOP)
        churn = sim.start_churn(rate=CHURN_RATE, seconds=30, seed=37, mix={"update": 1.0})
        try:
            wait_until(
                lambda: (now(query) or 0) > threshold, 30,
                what=f"the ScaledObject's query above its threshold {threshold:g}",
            )  # fmt: skip
        finally:
            churn.stop()
        at = time.time()
        peak = value(server, query, at)
        # The stopped processor's own lag gauge cannot tell: its scrapes fail.
        processor_up = server.query(f'up{{instance="{_target(processor)}"}}', time=f"{at:.3f}")
        assert [sample["value"][1] for sample in processor_up] == ["0"]
        # The HPA's external metric is the same figure (the adapter's query, same instant).
        assert value(server, hpa_query, at) == peak

        processor.send(signal.SIGCONT)
        wait_until(
            lambda: (lag := now(query)) is not None and lag < threshold, 30,
            what="the query back below the threshold once the processor caught up",
        )  # fmt: skip
        assert processor.running()


def test_the_adapter_query_is_filled_in_as_the_adapter_does() -> None:
    assert adapter_query("audit") == (
        "sum by (group) (max by (resource, group) "
        '(informer_bus_reflector_group_lag_entries{group="audit"}))'
    )
