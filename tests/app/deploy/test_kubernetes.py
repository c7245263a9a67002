"""deploy/kubernetes/: every document is a valid object of its Kubernetes API type (no unknown
field either), the pods are probed, sized and locked down, the reflector's RBAC grants exactly
list and watch on what it reflects, and the Deployments' args and env start and reach ready
when run locally against the simulator.
"""

from __future__ import annotations

import base64
import copy
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import redis
import yaml

from informer_bus.apiserver_sim import SimulatorSettings
from informer_bus.apiserver_sim.process import SimulatorProcess
from reflector_svc.resources import ResourceSpec
from tests.app.deploy.support import (
    KUBERNETES_DIR,
    ROOT,
    Launch,
    LocalEndpoints,
    LocalService,
    dockerfile_instructions,
    final_stage,
    launch_for,
    listening_port,
    localize_launch,
    pipeline_problems,
    settings_of,
    uid_of_user,
)
from tests.support.bus import Bus
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

Document = dict[str, Any]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
NAMESPACE = "informer-bus"
LOCAL_POD_NAME = "local-pod"


def load_documents(directory: Path = KUBERNETES_DIR) -> list[Document]:
    documents: list[Document] = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                assert isinstance(document, dict), f"{path.name}: not a mapping"
                documents.append(document)
    return documents


DOCUMENTS = load_documents()


def doc_id(document: Document) -> str:
    return f"{document.get('kind')}/{document.get('metadata', {}).get('name')}"


def find(documents: list[Document], kind: str, name: str | None = None) -> Document:
    found = [d for d in documents if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def deployment(component: str, documents: list[Document] = DOCUMENTS) -> Document:
    return find(documents, "Deployment", f"informer-bus-{component}")


def only_container(deployment_doc: Document) -> Document:
    (container,) = deployment_doc["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


# --- API schemas --------------------------------------------------------------------------------


def model_name(document: Document) -> str:
    """``apps/v1`` ``Deployment`` -> ``V1Deployment``: the client's model for the document."""
    version = str(document["apiVersion"]).rsplit("/", 1)[-1]
    return f"{version[0].upper()}{version[1:]}{document['kind']}"


def deserialise(document: Document) -> Any:
    """The document as its ``kubernetes`` client model (types and required fields checked)."""
    with kubernetes.client.ApiClient() as client:
        return client._ApiClient__deserialize(document, model_name(document))


def unknown_fields(data: Any, type_name: str, where: str = "") -> list[str]:
    """Every key of ``data`` that is no field of ``type_name`` (recursively).

    The models drop unknown keys without a word, so a misspelt ``readinesProbe`` would
    deserialise fine and simply be missing; this is what catches it.
    """
    if match := re.fullmatch(r"Optional\[(.*)\]", type_name):
        return unknown_fields(data, match[1], where)
    if match := re.fullmatch(r"List\[(.*)\]", type_name):
        if not isinstance(data, list):
            return [f"{where}: expected a list"]
        return [
            p
            for i, item in enumerate(data)
            for p in unknown_fields(item, match[1], f"{where}[{i}]")
        ]
    if match := re.fullmatch(r"Dict\[[^,]+, (.*)\]", type_name):
        if not isinstance(data, dict):
            return [f"{where}: expected a mapping"]
        return [
            p
            for key, value in data.items()
            for p in unknown_fields(value, match[1], f"{where}.{key}")
        ]
    model = getattr(kubernetes.client.models, type_name, None)
    if model is None or not hasattr(model, "attribute_map"):
        return []  # a scalar (str, int, bool, IntOrString's object)
    if not isinstance(data, dict):
        return [f"{where}: expected a {type_name} object"]
    attributes = {json_name: attribute for attribute, json_name in model.attribute_map.items()}
    problems: list[str] = []
    for key, value in data.items():
        if key not in attributes:
            problems.append(f"{where}.{key}: not a field of {type_name}")
        else:
            problems += unknown_fields(
                value, model.openapi_types[attributes[key]], f"{where}.{key}"
            )
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=doc_id)
def test_each_manifest_is_a_valid_kubernetes_object(document: Document) -> None:
    model = deserialise(document)
    assert type(model).__name__ == model_name(document)
    assert model.metadata.name == document["metadata"]["name"]
    assert unknown_fields(document, model_name(document)) == []


def test_the_checks_catch_mistakes() -> None:
    misspelt = copy.deepcopy(deployment("processor"))
    container = only_container(misspelt)
    container["readinesProbe"] = container.pop("readinessProbe")
    container["env"][0]["valueFron"] = {}
    problems = unknown_fields(misspelt, model_name(misspelt))
    assert len(problems) == 2
    assert any(p.endswith(".readinesProbe: not a field of V1Container") for p in problems)
    wrong_type = copy.deepcopy(deployment("processor"))
    only_container(wrong_type)["ports"][0]["containerPort"] = "eighty"
    with pytest.raises(ValueError):
        deserialise(wrong_type)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUBERNETES_DIR / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Kustomization"
    files = {p.name for p in KUBERNETES_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_everything_lives_in_the_informer_bus_namespace() -> None:
    find(DOCUMENTS, "Namespace", NAMESPACE)
    for document in DOCUMENTS:
        namespace = document["metadata"].get("namespace")
        if document["kind"] in CLUSTER_SCOPED:
            assert namespace is None, doc_id(document)
        else:
            assert namespace == NAMESPACE, doc_id(document)


# --- the pods ------------------------------------------------------------------------------------


def secret_value(documents: list[Document], namespace: str, name: str, key: str) -> str:
    secret = find(
        [d for d in documents if d["metadata"].get("namespace") == namespace], "Secret", name
    )
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()


def container_launch(deployment_doc: Document, documents: list[Document] = DOCUMENTS) -> Launch:
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


@pytest.mark.parametrize("component", ["reflector", "processor"])
def test_pods_are_probed_sized_and_locked_down(component: str) -> None:
    spec = deployment(component)["spec"]["template"]["spec"]
    container = only_container(deployment(component))
    assert container["args"][0] == component
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == listening_port(container_launch(deployment(component)))
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}, bound
    pod_security = spec["securityContext"]
    (user,) = [i for i in final_stage(dockerfile_instructions()) if i.keyword == "USER"]
    uid = uid_of_user(user.arguments)
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] == uid
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert container["image"] == f"informer-bus:{version}"


@pytest.mark.parametrize("component", ["reflector", "processor"])
def test_metrics_and_probes_are_served_on_the_pod_ip(component: str) -> None:
    """The services listen on loopback unless asked (issue 34): the kubelet's probes and
    Prometheus reach the pod's IP, so the manifests ask for every interface."""
    launch = container_launch(deployment(component))
    assert launch.env.get("INFORMER_BUS_HTTP_HOST") == "0.0.0.0"
    assert settings_of(launch).http_host == "0.0.0.0"


def test_two_reflector_replicas_run_under_their_service_account() -> None:
    reflector = deployment("reflector")
    assert reflector["spec"]["replicas"] == 2
    account = reflector["spec"]["template"]["spec"]["serviceAccountName"]
    find(DOCUMENTS, "ServiceAccount", account)
    assert settings_of(container_launch(reflector)).kube.in_cluster is True


def test_processors_get_no_kubernetes_credentials() -> None:
    spec = deployment("processor")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec  # the namespace's default, which no binding names
    assert granted(DOCUMENTS, NAMESPACE, "default") == set()


@pytest.mark.parametrize("component", ["reflector", "processor"])
def test_the_redis_url_comes_from_the_secret(component: str) -> None:
    (redis_var,) = [
        var for var in only_container(deployment(component))["env"]
        if var["name"] == "INFORMER_BUS_REDIS_URL"
    ]  # fmt: skip
    assert set(redis_var) == {"name", "valueFrom"}, "a literal Redis URL (and password)"
    ref = redis_var["valueFrom"]["secretKeyRef"]
    assert secret_value(DOCUMENTS, NAMESPACE, ref["name"], ref["key"]).startswith("redis")
    assert settings_of(container_launch(deployment(component))).redis.url.startswith("redis")


def test_metrics_services_select_their_pods() -> None:
    services = [d for d in DOCUMENTS if d["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} == {
        "informer-bus-reflector-metrics", "informer-bus-processor-metrics",
    }  # fmt: skip
    for service in services:
        selector = service["spec"]["selector"]
        selected = [
            d for d in DOCUMENTS if d["kind"] == "Deployment"
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        assert len(selected) == 1, doc_id(service)
        port_names = {p["name"] for p in only_container(selected[0])["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= port_names


def test_the_reflector_and_the_processor_share_a_resource_and_layout() -> None:
    reflector = settings_of(container_launch(deployment("reflector")))
    processor = settings_of(container_launch(deployment("processor")))
    assert pipeline_problems(reflector, processor) == []


# --- RBAC ----------------------------------------------------------------------------------------

Grant = tuple[str | None, str, str, str]
"""``(namespace, API group, resource, verb)``; namespace ``None`` for a cluster-wide grant."""


def granted(documents: list[Document], namespace: str, account: str) -> set[Grant]:
    """What the bindings in ``documents`` grant a service account (rules taken literally, so
    wildcards, resource names and non-resource URLs show up as grants nobody expects)."""
    grants: set[Grant] = set()
    for binding in documents:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        scope = binding["metadata"].get("namespace")
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account
            and s.get("namespace", scope) == namespace
            for s in binding.get("subjects") or ()
        ):  # fmt: skip
            continue
        ref = binding["roleRef"]
        candidates = [
            d for d in documents
            if d["kind"] == ref["kind"] and d["metadata"]["name"] == ref["name"]
            and (ref["kind"] == "ClusterRole" or d["metadata"].get("namespace") == scope)
        ]  # fmt: skip
        assert len(candidates) == 1, f"{doc_id(binding)} refers to a missing {ref['kind']}"
        for rule in candidates[0].get("rules") or ():
            for extra in ("resourceNames", "nonResourceURLs"):
                for value in rule.get(extra) or ():
                    grants.add((scope, extra, value, ",".join(rule.get("verbs", ()))))
            for group in rule.get("apiGroups") or ():
                for resource in rule.get("resources") or ():
                    for verb in rule.get("verbs") or ():
                        grants.add((scope, group, resource, verb))
    return grants


def reflected(documents: list[Document]) -> set[Grant]:
    """list and watch on every resource the reflector Deployment configures, where it is
    watched (one namespace, or the whole cluster)."""
    settings = settings_of(container_launch(deployment("reflector", documents), documents))
    specs = [ResourceSpec.parse(text) for text in settings.resource]
    assert specs, "the reflector reflects nothing"
    return {
        (spec.namespace, spec.group, spec.plural, verb)
        for spec in specs
        for verb in ("list", "watch")
    }


def rbac_problems(documents: list[Document]) -> list[str]:
    reflector = deployment("reflector", documents)
    account = reflector["spec"]["template"]["spec"]["serviceAccountName"]
    grants = granted(documents, reflector["metadata"]["namespace"], account)
    needed = reflected(documents)
    return [f"missing {g}" for g in sorted(needed - grants, key=str)] + [
        f"more than needed {g}" for g in sorted(grants - needed, key=str)
    ]


def test_rbac_grants_exactly_list_and_watch_on_the_reflected_resources() -> None:
    assert rbac_problems(DOCUMENTS) == []
    assert reflected(DOCUMENTS) == {(None, "", "pods", "list"), (None, "", "pods", "watch")}


def with_changed(documents: list[Document], kind: str, name: str, change: Any) -> list[Document]:
    changed = copy.deepcopy(documents)
    change(find(changed, kind, name))
    return changed


@pytest.mark.parametrize(
    "mistake",
    [
        lambda role: role["rules"][0]["verbs"].append("get"),
        lambda role: role["rules"][0].update(resources=["*"]),
        lambda role: role["rules"][0].update(apiGroups=["apps"]),
        lambda role: role["rules"].append(
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}
        ),
        lambda role: role["rules"][0].update(resourceNames=["web"]),
    ],
    ids=["extra-verb", "wildcard", "wrong-group", "extra-resource", "resource-names"],
)
def test_the_rbac_check_catches_grants_beyond_the_reflector(mistake: Any) -> None:
    changed = with_changed(DOCUMENTS, "ClusterRole", "informer-bus-reflector", mistake)
    assert rbac_problems(changed)


def test_the_rbac_check_catches_a_resource_the_role_misses() -> None:
    def reflect_deployments_too(document: Document) -> None:
        for var in only_container(document)["env"]:
            if var["name"] == "INFORMER_BUS_RESOURCE":
                var["value"] = "pods,deployments.v1.apps@shop"

    reflector = "informer-bus-reflector"
    changed = with_changed(DOCUMENTS, "Deployment", reflector, reflect_deployments_too)
    problems = rbac_problems(changed)
    assert "missing ('shop', 'apps', 'deployments', 'list')" in problems


# --- run locally -------------------------------------------------------------------------------


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[LocalEndpoints]:
    """The test's own redis-server and a simulated API server with some pods."""
    redis_server = RedisServer(tmp_path / "redis")
    simulator = SimulatorProcess(SimulatorSettings(populate=50))
    try:
        redis_server.start()
        simulator.start()
        yield LocalEndpoints(redis_url=redis_server.url, kube_url=simulator.url)
    finally:
        simulator.stop()
        redis_server.stop()


def test_the_deployments_start_and_reach_ready_locally(
    local_cluster: LocalEndpoints, tmp_path: Path
) -> None:
    services: list[LocalService] = []
    try:
        for component in ("reflector", "processor"):
            launch, port = localize_launch(
                container_launch(deployment(component)), local_cluster, tmp_path
            )
            services.append(LocalService(launch, port, tmp_path / f"{component}.log").start())
        for service in services:
            service.wait_ready()
        # Ready alone does not prove the reflector reached the API (a standby is ready too):
        # the in-cluster configuration turned local must have published the simulated pods.
        client = redis.Redis.from_url(local_cluster.redis_url)
        try:
            bus = Bus(client, "pods", shard_count=settings_of(launch).shard_count)
            wait_until(bus.synced, 30, what="the reflector to publish the pods")
            assert bus.length() >= 50
        finally:
            client.close()
        for service in services:
            assert service.terminate() == 0, service.log()  # SIGTERM, as the kubelet stops it
    finally:
        for service in services:
            service.close()
