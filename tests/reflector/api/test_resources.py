"""Resource specs (kubectl-like text) and their resolution through discovery."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient

from apiserver_sim import Simulator
from reflector_svc.api_errors import ApiStatusError, ApiUnavailableError, UnknownResourceError
from reflector_svc.resources import ResolvedResource, ResourceSpec, resolve
from reflector_svc.transport import load_api_client as load

# ------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("text", "expected", "resource_id"),
    [
        ("pods", ResourceSpec("pods"), "pods"),
        ("pods.v1", ResourceSpec("pods", "v1"), "pods"),
        ("deployments.apps", ResourceSpec("deployments", None, "apps"), "deployments.apps"),
        ("deployments.v1.apps", ResourceSpec("deployments", "v1", "apps"), "deployments.apps"),
        (
            "widgets.v1.example.com",
            ResourceSpec("widgets", "v1", "example.com"),
            "widgets.example.com",
        ),
        (
            "widgets.example.com@shop",
            ResourceSpec("widgets", None, "example.com", "shop"),
            "widgets.example.com@shop",
        ),
        (
            "cronjobs.v2beta1.batch",
            ResourceSpec("cronjobs", "v2beta1", "batch"),
            "cronjobs.batch",
        ),
        ("pods@shop", ResourceSpec("pods", namespace="shop"), "pods@shop"),
        (
            "pods@shop?labelSelector=app%3Dweb",
            ResourceSpec("pods", namespace="shop", label_selector="app=web"),
            "pods@shop",
        ),
        (
            "pods?fieldSelector=status.phase%3DRunning&labelSelector=tier+in+%28a%2Cb%29",
            ResourceSpec(
                "pods", label_selector="tier in (a,b)", field_selector="status.phase=Running"
            ),
            "pods",
        ),
        (
            "nodes?labelSelector=!node-role.kubernetes.io/control-plane",
            ResourceSpec("nodes", label_selector="!node-role.kubernetes.io/control-plane"),
            "nodes",
        ),
    ],
)
def test_parse_valid_forms(text: str, expected: ResourceSpec, resource_id: str) -> None:
    spec = ResourceSpec.parse(text)
    assert spec == expected
    assert spec.resource_id == resource_id
    assert ResourceSpec.parse(str(spec)) == spec  # str() is a canonical, parseable form


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        (" pods", "whitespace"),
        ("Pods", "lowercase DNS label"),
        ("po ds", "lowercase DNS label"),
        ("pods{x}", "lowercase DNS label"),
        ("-pods", "lowercase DNS label"),
        ("pods.", "DNS subdomain"),
        ("pods..apps", "DNS subdomain"),
        ("pods.v1.", "DNS subdomain"),
        ("pods.Apps", "DNS subdomain"),
        ("pods@", "empty namespace"),
        ("pods@Shop", "not a DNS label"),
        ("pods@shop@x", "not a DNS label"),
        ("pods@" + "a" * 64, "not a DNS label"),
        ("pods?", "empty query"),
        ("pods?limit=5", "unknown query parameter 'limit'"),
        ("pods?labelSelector=a%3Db&labelSelector=c", "given twice"),
        ("pods?labelSelector=", "empty labelSelector"),
        ("pods?labelSelector", "malformed query"),
        ("pods?labelSelector=a%0Ab", "control character"),
    ],
)
def test_parse_errors_are_one_line_with_the_syntax(text: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        ResourceSpec.parse(text)
    message = str(info.value)
    assert "\n" not in message
    assert why in message
    assert "expected PLURAL[.VERSION][.GROUP][@NAMESPACE]" in message


def test_resource_id_is_safe_inside_a_redis_hash_tag() -> None:
    for text in ("pods", "widgets.v1.example.com@shop", "pods@a?labelSelector=x%20in%20(a)"):
        rid = ResourceSpec.parse(text).resource_id
        assert not any(ch in rid for ch in "{} \t\n")


# ------------------------------------------------------------------------------ discovery


@pytest.mark.parametrize(
    ("text", "kind", "namespaced", "list_path"),
    [
        ("pods", "Pod", True, "/api/v1/pods"),
        ("pods.v1@shop", "Pod", True, "/api/v1/namespaces/shop/pods"),
        ("configmaps@kube-system", "ConfigMap", True, "/api/v1/namespaces/kube-system/configmaps"),
        ("secrets", "Secret", True, "/api/v1/secrets"),
        ("nodes", "Node", False, "/api/v1/nodes"),
        ("namespaces", "Namespace", False, "/api/v1/namespaces"),
        ("widgets.v1.example.com", "Widget", True, "/apis/example.com/v1/widgets"),
        (
            "widgets.example.com@shop",
            "Widget",
            True,
            "/apis/example.com/v1/namespaces/shop/widgets",
        ),
        (
            "customresourcedefinitions.apiextensions.k8s.io",
            "CustomResourceDefinition",
            False,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        ),
    ],
)
def test_resolve_served_resources(
    api_client: ApiClient, text: str, kind: str, namespaced: bool, list_path: str
) -> None:
    spec = ResourceSpec.parse(text)
    resolved = resolve(api_client, spec)
    assert resolved == ResolvedResource(spec, "v1", kind, namespaced, list_path)
    assert resolved.api_version == ("v1" if not spec.group else f"{spec.group}/v1")
    assert resolved.resource_id == spec.resource_id


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        # The simulator serves no "apps" group; the message names the groups it does serve.
        ("deployments.apps", ["API group 'apps' is not served", "example.com"]),
        ("deployments.v1.apps", ["API group 'apps' is not served"]),
        ("pod", ["'pod'", "did you mean pods?"]),
        ("po", ["did you mean pods?"]),
        ("configmap", ["did you mean configmaps?"]),
        ("podz", ["did you mean pods?"]),
        ("widgets", ["core/v1", "did you mean widgets.example.com?"]),
        ("widget.example.com", ["did you mean widgets.example.com?"]),
        ("nodes@default", ["cluster-scoped", "drop '@default'"]),
        ("pods.v2", ["core API version 'v2' is not served"]),
        ("widgets.v2.example.com", ["version 'v2' of API group 'example.com'", "served: v1"]),
        ("gizmos", ["does not serve resource 'gizmos' in core/v1"]),
    ],
)
def test_unknown_resources_get_clear_messages(
    api_client: ApiClient, text: str, fragments: list[str]
) -> None:
    with pytest.raises(UnknownResourceError) as info:
        resolve(api_client, ResourceSpec.parse(text))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(text)
    for fragment in fragments:
        assert fragment in message


def test_resolve_reports_server_errors_typed(sim: Simulator, api_client: ApiClient) -> None:
    sim.fail_next(1, 500)
    with pytest.raises(ApiStatusError) as info:
        resolve(api_client, ResourceSpec.parse("pods"))
    assert info.value.status == 500


def test_resolve_against_an_unreachable_server(dead_url: str) -> None:
    with load(url=dead_url) as client, pytest.raises(ApiUnavailableError):
        resolve(client, ResourceSpec.parse("pods"), timeout=5)
