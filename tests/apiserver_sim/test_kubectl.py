"""Issue 18 point 4: the simulator looks real to the real kubectl binary over real HTTP.

``kubectl get pods`` shows READY, STATUS, RESTARTS and AGE (server-side Tables) that agree
with the stored pods, with ages of seconds for fresh pods; ``-o wide`` shows their IP and
node, and ``kubectl get nodes`` lists the nodes they name; ``kubectl apply -f`` (validation
on: OpenAPI v3 and ``fieldValidation``) creates, then strategic-merge-patches, a ConfigMap and
a two-container Pod. Issue 34 point 5: ``kubectl create -f`` of a ``List`` works with
validation on (kubectl checks a List's items against the OpenAPI v2 document), and a namespaced
object is refused in a namespace that does not exist, on create, replace and patch alike.
kubectl comes from ``make install``; a machine without it fails here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from apiserver_sim import PODS, Simulator
from tests.support.kubectl import kubectl_binary

Kubectl = Callable[..., str]

_AGE = re.compile(r"^(\d+[smhdy])+$")
_FRESH_AGE = re.compile(r"^(\d+s|\d+m(\d+s)?)$")


@pytest.fixture
def kubectl(sim: Simulator, tmp_path: Path) -> Kubectl:
    """Run kubectl against ``sim`` with an empty kubeconfig and a private cache; returns its
    stdout and fails the test with its stderr when it exits non-zero."""
    binary = kubectl_binary()
    config = tmp_path / "kubeconfig"
    config.write_text("")
    env = {"KUBECONFIG": str(config), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def run(*args: str, stdin: str | None = None, fails: bool = False) -> str:
        """kubectl's stdout; with ``fails``, its stderr, failing the test if it succeeded."""
        command = [binary, "--server", sim.url, "--cache-dir", str(tmp_path / "cache"), *args]
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, env=env, timeout=120,
            check=False,
        )  # fmt: skip
        if fails:
            assert done.returncode != 0, f"{' '.join(args)} succeeded: {done.stdout}"
            return done.stderr
        if done.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {done.returncode}: {done.stderr}")
        return done.stdout

    return run


def _table(text: str) -> list[dict[str, str]]:
    """kubectl's columns (separated by two spaces or more) as one dict per row."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = [dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]]
    return rows


def _expected_status(pod: dict[str, Any]) -> tuple[str, str]:
    """(READY, STATUS) of a generated pod, read from its container states."""
    container = pod["status"]["containerStatuses"][0]
    state = container["state"]
    if "waiting" in state:
        status = state["waiting"]["reason"]
    elif "terminated" in state:
        status = state["terminated"]["reason"]
    else:
        status = pod["status"]["phase"]
    return ("1/1" if container["ready"] else "0/1"), status


def test_get_pods_has_ready_status_restarts_and_ages(sim: Simulator, kubectl: Kubectl) -> None:
    sim.populate("pods", 24, seed=3)
    pods = {stored.name: stored.decode() for stored in sim.state.current(PODS).values()}
    rows = _table(kubectl("get", "pods", "-A"))
    assert list(rows[0]) == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert {r["NAME"] for r in rows} == set(pods)
    statuses = set()
    for row in rows:
        pod = pods[row["NAME"]]
        assert row["NAMESPACE"] == pod["metadata"]["namespace"]
        assert (row["READY"], row["STATUS"]) == _expected_status(pod)
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        assert re.fullmatch(rf"{restarts}( \(\S+ ago\))?", row["RESTARTS"]), row
        assert _AGE.match(row["AGE"]) and "y" not in row["AGE"], row  # weeks old, not years
        statuses.add(row["STATUS"])
    assert "Running" in statuses and len(statuses) > 1  # a plausible mix, 85 % running

    # Pods created now (churn's creates) are seconds old.
    sim.churn(rate=0, seconds=30, seed=4, mix={"create": 1}, max_events=3)
    fresh = [r for r in _table(kubectl("get", "pods", "-A")) if r["NAME"] not in pods]
    assert len(fresh) == 3
    assert all(_FRESH_AGE.match(r["AGE"]) for r in fresh), fresh


def test_wide_pods_and_the_nodes_they_run_on(sim: Simulator, kubectl: Kubectl) -> None:
    sim.populate("pods", 15, seed=5)
    pods = {stored.name: stored.decode() for stored in sim.state.current(PODS).values()}
    rows = _table(kubectl("get", "pods", "-A", "-o", "wide"))
    assert {"IP", "NODE", "NOMINATED NODE", "READINESS GATES"} <= set(rows[0])
    for row in rows:
        pod = pods[row["NAME"]]
        assert row["IP"] == pod["status"]["podIP"] and row["NODE"] == pod["spec"]["nodeName"]

    nodes = _table(kubectl("get", "nodes"))
    assert list(nodes[0]) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert {n["NAME"] for n in nodes} == {p["spec"]["nodeName"] for p in pods.values()}
    assert {n["STATUS"] for n in nodes} == {"Ready"}
    assert all(_AGE.match(n["AGE"]) and n["VERSION"].startswith("v1.") for n in nodes)
    wide = _table(kubectl("get", "nodes", "-o", "wide"))
    assert all(re.fullmatch(r"192\.168\.\d+\.\d+", n["INTERNAL-IP"]) for n in wide)
    # Pods are in the "all" category, as on a real cluster.
    assert {r["NAME"].removeprefix("pod/") for r in _table(kubectl("get", "all", "-A"))} == set(
        pods
    )
    one = nodes[0]["NAME"]
    assert _table(kubectl("get", "node", one))[0]["NAME"] == one


_MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: default
data:
  color: {color}
  size: "3"
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels:
    app: web
spec:
  containers:
  - name: web
    image: nginx:{version}
    env:
{env}
  - name: sidecar
    image: busybox:1.36
    args: ["sleep", "infinity"]
"""


def _manifest(color: str, version: str, env: dict[str, str]) -> str:
    lines = "\n".join(f"    - name: {k}\n      value: {v!r}" for k, v in env.items())
    return _MANIFEST.format(color=color, version=version, env=lines)


def test_apply_creates_then_patches(sim: Simulator, kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(_manifest("blue", "1.27", {"MODE": "a", "LEVEL": "info"}))
    out = kubectl("apply", "-f", str(manifest))  # validation on: no --validate=false
    assert out.split("\n")[:2] == ["configmap/app-config created", "pod/web created"]
    created = sim.get("pods", "default/web")
    assert "kubectl.kubernetes.io/last-applied-configuration" in created["metadata"]["annotations"]
    assert created["status"]["phase"] == "Pending"
    web = _table(kubectl("get", "pod", "web"))[0]
    assert (web["READY"], web["STATUS"]) == ("0/2", "Pending") and _FRESH_AGE.match(web["AGE"])

    # A strategic merge patch: the web container changes, LEVEL goes, the sidecar stays.
    manifest.write_text(_manifest("red", "1.28", {"MODE": "b"}))
    out = kubectl("apply", "-f", str(manifest))
    assert out.split("\n")[:2] == ["configmap/app-config configured", "pod/web configured"]
    assert sim.get("configmaps", "default/app-config")["data"] == {"color": "red", "size": "3"}
    pod = sim.get("pods", "default/web")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["web", "sidecar"]
    assert containers["web"]["image"] == "nginx:1.28"
    assert containers["web"]["env"] == [{"name": "MODE", "value": "b"}]
    assert containers["sidecar"] == {"name": "sidecar", "image": "busybox:1.36",
                                     "args": ["sleep", "infinity"]}  # fmt: skip
    assert "$" not in str(pod["spec"])  # no directive stored
    assert pod["metadata"]["uid"] == created["metadata"]["uid"]

    assert kubectl("apply", "-f", str(manifest)).split("\n")[:2] == [
        "configmap/app-config unchanged", "pod/web unchanged",
    ]  # fmt: skip
    # A server-side dry run answers as if applied and stores nothing.
    rv = sim.resource_version
    manifest.write_text(_manifest("green", "1.29", {"MODE": "c"}))
    out = kubectl("apply", "-f", str(manifest), "--dry-run=server")
    assert "configmap/app-config configured (server dry run)" in out
    assert sim.resource_version == rv
    assert sim.get("configmaps", "default/app-config")["data"]["color"] == "red"


def test_apply_a_custom_resource_and_get_it(sim: Simulator, kubectl: Kubectl) -> None:
    manifest = (
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\n"
        "spec:\n  size: {size}\n"
    )
    assert kubectl("apply", "-f", "-", stdin=manifest.format(size=3)).strip() == (
        "widget.example.com/w1 created"
    )
    assert kubectl("apply", "-f", "-", stdin=manifest.format(size=5)).strip() == (
        "widget.example.com/w1 configured"
    )
    assert sim.get("widgets", "default/w1")["spec"] == {"size": 5}
    rows = _table(kubectl("get", "widgets"))
    assert list(rows[0]) == ["NAME", "AGE"] and rows[0]["NAME"] == "w1"


_LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings, namespace: default}
  data: {mode: fast}
- apiVersion: example.com/v1
  kind: Widget
  metadata: {name: w2, namespace: default}
  spec: {size: 2}
- apiVersion: v1
  kind: Pod
  metadata: {name: p2, namespace: default}
  spec:
    containers: [{name: c, image: busybox}]
"""


def test_create_a_list_with_validation_on(sim: Simulator, kubectl: Kubectl) -> None:
    """kubectl checks a List's items itself, against /openapi/v2 (a List has no endpoint to
    ask about server-side validation): without that document it refused the whole file and
    asked for --validate=false."""
    out = kubectl("create", "-f", "-", stdin=_LIST)
    assert out.splitlines() == [
        "configmap/settings created", "widget.example.com/w2 created", "pod/p2 created",
    ]  # fmt: skip
    assert sim.get("configmaps", "default/settings")["data"] == {"mode": "fast"}
    assert sim.get("widgets", "default/w2")["spec"] == {"size": 2}
    out = kubectl("apply", "-f", "-", stdin=_LIST.replace("mode: fast", "mode: slow"))
    assert out.splitlines()[0] == "configmap/settings configured"
    assert sim.get("configmaps", "default/settings")["data"] == {"mode": "slow"}


_WIDGET = """\
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: ns-00}
spec: {size: 3}
"""


def test_a_namespaced_object_needs_its_namespace(sim: Simulator, kubectl: Kubectl) -> None:
    """As on a real cluster (NamespaceLifecycle admission): the simulator used to store the
    Widget, and kubectl's patch of it then said the namespace did not exist."""
    refused = kubectl("create", "-f", "-", stdin=_WIDGET, fails=True)
    assert 'namespaces "ns-00" not found' in refused
    refused = kubectl("create", "configmap", "c", "-n", "ns-00", fails=True)
    assert 'namespaces "ns-00" not found' in refused
    assert sim.ground_truth("widgets") == {} and "ns-00/c" not in sim.ground_truth("configmaps")

    kubectl("create", "namespace", "ns-00")
    assert kubectl("create", "-f", "-", stdin=_WIDGET).strip() == "widget.example.com/w1 created"
    patch = '{"spec": {"size": 4}}'
    kubectl("patch", "widget", "w1", "-n", "ns-00", "--type=merge", "-p", patch)
    assert sim.get("widgets", "ns-00/w1")["spec"] == {"size": 4}

    # The namespace goes (the simulator deletes it at once, not its contents): the Widget can
    # still be read and deleted, not written.
    kubectl("delete", "namespace", "ns-00")
    refused = kubectl("patch", "widget", "w1", "-n", "ns-00", "--type=merge", "-p", patch,
                      fails=True)  # fmt: skip
    assert 'namespaces "ns-00" not found' in refused
    refused = kubectl("apply", "-f", "-", stdin=_WIDGET, fails=True)
    assert 'namespaces "ns-00" not found' in refused
    assert sim.get("widgets", "ns-00/w1")["spec"] == {"size": 4}
    assert _table(kubectl("get", "widget", "w1", "-n", "ns-00"))[0]["NAME"] == "w1"
    kubectl("delete", "widget", "w1", "-n", "ns-00")
    assert sim.ground_truth("widgets") == {}
