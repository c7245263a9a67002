"""Point 2: kopf runs against the simulator unmodified.

A real operator (``kopf run --standalone`` via ``kopf.testing.KopfRunner``) logs in with the
official client's kubeconfig loader (kopf's default login when ``kubernetes`` is installed),
discovers resources, lists and watches pods (or watch-lists them with ``sendInitialEvents``)
and posts core/v1 Events through ``kopf.info``. The handler appends what it sees to a file.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kopf
import kubernetes.config.kube_config
import pytest
from kopf.testing import KopfRunner
from kubernetes.client import Configuration

from apiserver_sim import EVENTS, Simulator, SimulatorSettings
from tests.support.objects import pod

OPERATOR = """
import os

import kopf


@kopf.on.event("pods")
async def seen(type, body, **_):
    meta = body["metadata"]
    with open(os.environ["SIM_KOPF_SEEN"], "a", encoding="utf-8") as out:
        out.write(f"{type} {meta['namespace']}/{meta['name']} {meta['resourceVersion']}\\n")
    if type is None:  # listed at startup (kopf's convention): say so in a k8s Event
        kopf.info(body, reason="Seen", message="listed by the test operator")
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster:
    server: {url}
users:
- name: tester
  user:
    token: any-token-will-do
contexts:
- name: sim
  context:
    cluster: sim
    user: tester
    namespace: default
current-context: sim
"""


@pytest.fixture
def kube_sim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulator]:
    """A simulator and a kubeconfig for it in ``KUBECONFIG``."""
    with Simulator(SimulatorSettings(bookmark_interval=0.5)) as simulator:
        config = tmp_path / "kubeconfig"
        config.write_text(KUBECONFIG.format(url=simulator.url), encoding="utf-8")
        monkeypatch.setenv("KUBECONFIG", str(config))
        # The client read KUBECONFIG when it was imported (by other tests); point it again.
        monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION",
                            str(config))  # fmt: skip
        # load_kube_config() installs a process-wide default configuration: undo it after.
        monkeypatch.setattr(Configuration, "_default", Configuration._default)
        yield simulator


@pytest.fixture
def registry() -> Iterator[kopf.OperatorRegistry]:
    """A fresh handler registry per run: ``kopf run`` loads the operator file into the
    default registry and makes the given one the default, so restore the previous one."""
    previous = kopf.get_default_registry()
    fresh = kopf.OperatorRegistry()
    # What kopf's default registry does when the official client is installed.
    kopf.on.login(registry=fresh)(kopf.login_via_client)
    try:
        yield fresh
    finally:
        kopf.set_default_registry(previous)


def _wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "case",
    [("--all-namespaces", False), ("--namespace=default", True)],
    ids=["all-namespaces-list-then-watch", "namespace-watch-list"],
)
def test_kopf_operator_sees_pod_events(
    kube_sim: Simulator,
    registry: kopf.OperatorRegistry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[str, bool],
) -> None:
    sim = kube_sim
    scope, watch_list = case
    seen_file = tmp_path / "seen.txt"
    seen_file.touch()
    monkeypatch.setenv("SIM_KOPF_SEEN", str(seen_file))
    operator = tmp_path / "operator.py"
    operator.write_text(OPERATOR, encoding="utf-8")
    sim.create("pods", pod("before"))
    sim.create("pods", pod("elsewhere", namespace="kube-system"))

    def seen() -> list[str]:
        return seen_file.read_text(encoding="utf-8").splitlines()

    def saw(prefix: str) -> bool:
        return any(line.startswith(prefix) for line in seen())

    def events_about(name: str) -> list[dict[str, Any]]:
        events = [sim.get(EVENTS, key) for key in sim.ground_truth(EVENTS)]
        return [e for e in events if e["involvedObject"]["name"] == name]

    settings = kopf.OperatorSettings()
    settings.watching.initial_streaming = watch_list  # sendInitialEvents instead of a LIST
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kopf-sync")
    settings.execution.executor = executor  # kopf's sync login handler runs here
    try:
        with KopfRunner(
            ["run", "--standalone", scope, "--verbose", str(operator)],
            registry=registry, settings=settings, timeout=30,
        ) as runner:  # fmt: skip
            _wait_for("the listed pod", lambda: saw("None default/before "))
            created = sim.create("pods", pod("after"))
            sim.update("pods", "default/after", {"metadata": {"labels": {"touched": "yes"}}})
            deleted = sim.delete("pods", "default/after")
            _wait_for("the pod's deletion", lambda: saw("DELETED default/after "))
            _wait_for("the posted k8s Event", lambda: bool(events_about("before")))
    finally:
        executor.shutdown(wait=True)

    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output
    after = [line.split()[0] for line in seen() if " default/after " in line]
    assert after == ["ADDED", "MODIFIED", "DELETED"], seen()
    assert f"DELETED default/after {deleted.rv}" in seen()
    assert f"ADDED default/after {created.rv}" in seen()
    assert saw("None kube-system/elsewhere ") == (scope == "--all-namespaces")
    (event,) = events_about("before")
    assert event["involvedObject"]["namespace"] == "default"
    assert event["reason"] == "Seen" and event["type"] == "Normal"
    assert event["metadata"]["name"].startswith("kopf-event-")
