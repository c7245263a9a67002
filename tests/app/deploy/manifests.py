"""deploy/kubernetes/ as the cluster would receive it: each kustomization rendered by the real
``kubectl kustomize`` (offline: kustomize reads local files only), and the lookups the
manifest tests share (a Deployment by name, its one container, what it launches).

Rendering, not reading the YAML files, is what is tested: a patch that misses its target, a
replacement that lands in the wrong object or a label that kustomize spreads into a selector
show only in the rendered output.
"""

from __future__ import annotations

import base64
import functools
import subprocess
import tempfile
from typing import Any

import yaml

from tests.app.deploy.support import KUBERNETES_DIR, Launch, launch_for, settings_of
from tests.support.kubectl import kubectl_binary

__all__ = [
    "BASE",
    "CLUSTER_SCOPED",
    "LOCAL_POD_NAME",
    "NAMESPACE",
    "OVERLAYS",
    "Document",
    "container_launch",
    "deployments",
    "doc_id",
    "find",
    "group_of",
    "only_container",
    "render",
    "secret_value",
]

Document = dict[str, Any]
NAMESPACE = "informer-bus"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
LOCAL_POD_NAME = "local-pod"
BASE = "base"
"""The plain deployment (no autoscaler), under ``deploy/kubernetes/``."""
OVERLAYS = tuple(
    sorted(
        f"overlays/{path.parent.name}"
        for path in (KUBERNETES_DIR / "overlays").glob("*/kustomization.yaml")
    )
)
"""Every overlay, as a path under ``deploy/kubernetes/`` (found, so a new one is tested)."""


@functools.cache
def _rendered(kustomization: str) -> str:
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [kubectl_binary(), "kustomize", str(KUBERNETES_DIR / kustomization)],
            capture_output=True, text=True, timeout=120, check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": home},
        )  # fmt: skip
    assert done.returncode == 0, f"kubectl kustomize {kustomization}: {done.stderr}"
    return done.stdout


def render(kustomization: str) -> list[Document]:
    """``kubectl kustomize deploy/kubernetes/<kustomization>``, parsed (a fresh copy each
    call: tests may change it)."""
    documents = [d for d in yaml.safe_load_all(_rendered(kustomization)) if d is not None]
    assert all(isinstance(d, dict) for d in documents), kustomization
    return documents


def doc_id(document: Document) -> str:
    return f"{document.get('kind')}/{document.get('metadata', {}).get('name')}"


def find(documents: list[Document], kind: str, name: str | None = None) -> Document:
    found = [d for d in documents if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployments(documents: list[Document], component: str) -> list[Document]:
    """The Deployments of one component (``reflector``, ``processor``): every processor group
    has one."""
    return [
        d for d in documents if d["kind"] == "Deployment"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]  # fmt: skip


def only_container(deployment_doc: Document) -> Document:
    (container,) = deployment_doc["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def secret_value(documents: list[Document], namespace: str, name: str, key: str) -> str:
    secret = find(
        [d for d in documents if d["metadata"].get("namespace") == namespace], "Secret", name
    )
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()


def container_launch(deployment_doc: Document, documents: list[Document]) -> Launch:
    """What the kubelet runs: the image's entrypoint and ENV, the container's ``args``, and its
    ``env`` with Secret references and the downward API resolved from the manifests."""
    container = only_container(deployment_doc)
    assert "command" not in container, "command would replace the image's entrypoint"
    assert "envFrom" not in container
    namespace = deployment_doc["metadata"]["namespace"]
    env: dict[str, str] = {}
    for var in container.get("env") or ():
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        source = var["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[var["name"]] = secret_value(documents, namespace, ref["name"], ref["key"])
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[var["name"]] = LOCAL_POD_NAME
        else:
            raise AssertionError(f"{var['name']}: unsupported valueFrom {source}")
    return launch_for(container["args"], env)


def group_of(processor: Document, documents: list[Document]) -> str:
    """The consumer group a processor Deployment's pods join (``--group``, through the real
    settings loader: flag, env var or default)."""
    group: str = settings_of(container_launch(processor, documents)).group
    return group
