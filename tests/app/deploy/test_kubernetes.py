"""deploy/kubernetes/ as kustomize renders it (``kubectl kustomize``: the base and every overlay):
every document is a valid object of its Kubernetes API type (no unknown field either), the pods
are probed, sized and locked down, the reflector's RBAC grants exactly list and watch on what it
reflects, every processor group agrees with the reflector, and the base's Deployments' args and
env start and reach ready when run locally against the simulator. What each overlay adds is
checked in test_overlays.py, the autoscalers in test_autoscaling.py.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from apiserver_sim import SimulatorSettings
from apiserver_sim.process import SimulatorProcess
from common.redis_layout import ShardKeys
from reflector_svc.resources import ResourceSpec
from tests.app.deploy.kube_models import deserialise, model_name, unknown_fields
from tests.app.deploy.manifests import (
    BASE,
    CLUSTER_SCOPED,
    NAMESPACE,
    OVERLAYS,
    Document,
    container_launch,
    deployments,
    doc_id,
    find,
    only_container,
    render,
    secret_value,
)
from tests.app.deploy.support import (
    KUBERNETES_DIR,
    LocalEndpoints,
    LocalService,
    dockerfile_instructions,
    final_stage,
    listening_port,
    localize_launch,
    pipeline_problems,
    settings_of,
    uid_of_user,
)
from tests.support.bus import Bus
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

KUSTOMIZATIONS = (BASE, *OVERLAYS)
CUSTOM_KINDS = {"ScaledObject"}
"""Kinds the client has no model for (KEDA's): test_autoscaling.py checks them."""


def reflector(documents: list[Document]) -> Document:
    (found,) = deployments(documents, "reflector")
    return found


def processor(documents: list[Document]) -> Document:
    """The default processor group's Deployment (every kustomization has it)."""
    return find(documents, "Deployment", "informer-bus-processor")


# --- API schemas --------------------------------------------------------------------------------


def api_problems(document: Document) -> list[str]:
    """Why ``document`` is not a valid object of its API type (empty when it is)."""
    name = model_name(document)
    try:
        model = deserialise(document, name)
    except (ValueError, TypeError) as error:
        return [f"{doc_id(document)}: {error}"]
    if type(model).__name__ != name or model.metadata.name != document["metadata"]["name"]:
        return [f"{doc_id(document)}: not a {name}"]
    return [f"{doc_id(document)}{p}" for p in unknown_fields(document, name)]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_each_manifest_is_a_valid_kubernetes_object(kustomization: str) -> None:
    documents = [d for d in render(kustomization) if d["kind"] not in CUSTOM_KINDS]
    assert len(documents) >= 9
    assert [p for d in documents for p in api_problems(d)] == []


def test_the_checks_catch_mistakes() -> None:
    misspelt = processor(render(BASE))
    container = only_container(misspelt)
    container["readinesProbe"] = container.pop("readinessProbe")
    container["env"][0]["valueFron"] = {}
    problems = api_problems(misspelt)
    assert len(problems) == 2
    assert any(p.endswith(".readinesProbe: not a field of V1Container") for p in problems)
    wrong_type = processor(render(BASE))
    only_container(wrong_type)["ports"][0]["containerPort"] = "eighty"
    assert api_problems(wrong_type)


def kustomization_dirs() -> list[Path]:
    return sorted(path.parent for path in KUBERNETES_DIR.rglob("kustomization.yaml"))


@pytest.mark.parametrize(
    "directory", kustomization_dirs(), ids=lambda p: str(p.relative_to(KUBERNETES_DIR))
)
def test_each_kustomization_lists_every_manifest_beside_it(directory: Path) -> None:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization["kind"] in ("Kustomization", "Component")
    files = {p.name for p in directory.glob("*.yaml")} - {"kustomization.yaml"}
    listed = {r for r in kustomization.get("resources", ()) if (directory / r).is_file()}
    assert sorted(listed) == sorted(files)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_everything_lives_in_the_informer_bus_namespace(kustomization: str) -> None:
    documents = render(kustomization)
    find(documents, "Namespace", NAMESPACE)
    for document in documents:
        namespace = document["metadata"].get("namespace")
        if document["kind"] in CLUSTER_SCOPED:
            assert namespace is None, doc_id(document)
        else:
            assert namespace == NAMESPACE, doc_id(document)


# --- the pods ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_pods_are_probed_sized_and_locked_down(kustomization: str) -> None:
    documents = render(kustomization)
    (user,) = [i for i in final_stage(dockerfile_instructions()) if i.keyword == "USER"]
    uid = uid_of_user(user.arguments)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    checked = 0
    for component in ("reflector", "processor"):
        for deployment in deployments(documents, component):
            spec = deployment["spec"]["template"]["spec"]
            container = only_container(deployment)
            assert container["args"][0] == component
            ports = {port["name"]: port["containerPort"] for port in container["ports"]}
            launch = container_launch(deployment, documents)
            assert ports["metrics"] == listening_port(launch)
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}, bound
            pod_security = spec["securityContext"]
            assert pod_security["runAsNonRoot"] is True
            assert pod_security["runAsUser"] == uid
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"]["drop"] == ["ALL"]
            assert container["image"] == f"informer-bus:{version}"
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize("component", ["reflector", "processor"])
def test_metrics_and_probes_are_served_on_the_pod_ip(kustomization: str, component: str) -> None:
    """The services listen on loopback unless asked (issue 34): the kubelet's probes and
    Prometheus reach the pod's IP, so the manifests ask for every interface."""
    documents = render(kustomization)
    for deployment_doc in deployments(documents, component):
        launch = container_launch(deployment_doc, documents)
        assert launch.env.get("INFORMER_BUS_HTTP_HOST") == "0.0.0.0"
        assert settings_of(launch).http_host == "0.0.0.0"


def test_two_reflector_replicas_run_under_their_service_account() -> None:
    documents = render(BASE)
    deployment = reflector(documents)
    assert deployment["spec"]["replicas"] == 2
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    find(documents, "ServiceAccount", account)
    assert settings_of(container_launch(deployment, documents)).kube.in_cluster is True


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_processors_get_no_kubernetes_credentials(kustomization: str) -> None:
    documents = render(kustomization)
    for deployment in deployments(documents, "processor"):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in spec  # the namespace's default, which no binding names
    assert granted(documents, NAMESPACE, "default") == set()


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_redis_url_comes_from_the_secret(kustomization: str) -> None:
    documents = render(kustomization)
    for deployment in deployments(documents, "reflector") + deployments(documents, "processor"):
        (redis_var,) = [
            var for var in only_container(deployment)["env"]
            if var["name"] == "INFORMER_BUS_REDIS_URL"
        ]  # fmt: skip
        assert set(redis_var) == {"name", "valueFrom"}, "a literal Redis URL (and password)"
        ref = redis_var["valueFrom"]["secretKeyRef"]
        assert secret_value(documents, NAMESPACE, ref["name"], ref["key"]).startswith("redis")
        launch = container_launch(deployment, documents)
        assert settings_of(launch).redis.url.startswith("redis")


def service_problems(documents: list[Document]) -> list[str]:
    """Each metrics Service must select exactly one Deployment's pods, on a port they name."""
    problems = []
    for service in (d for d in documents if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        selected = [
            d for d in documents if d["kind"] == "Deployment"
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        if len(selected) != 1:
            problems.append(f"{doc_id(service)} selects {[doc_id(d) for d in selected]}")
            continue
        port_names = {p["name"] for p in only_container(selected[0])["ports"]}
        if not {p["targetPort"] for p in service["spec"]["ports"]} <= port_names:
            problems.append(f"{doc_id(service)}: a target port its pods do not name")
    return problems


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_metrics_services_select_their_pods(kustomization: str) -> None:
    documents = render(kustomization)
    services = [d for d in documents if d["kind"] == "Service"]
    assert len(services) == 1 + len(deployments(documents, "processor"))
    assert service_problems(documents) == []


def test_the_service_check_catches_a_selector_two_deployments_match() -> None:
    documents = render("overlays/second-group")
    assert service_problems(documents) == []
    for service in documents:  # without the group label, each selects both groups' pods
        if service["kind"] == "Service":
            service["spec"]["selector"].pop("informer-bus.io/group", None)
    problems = service_problems(documents)
    assert len(problems) == 2 and all("informer-bus-processor-audit" in p for p in problems)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_the_reflector_and_every_processor_share_a_resource_and_layout(
    kustomization: str,
) -> None:
    documents = render(kustomization)
    reflected = settings_of(container_launch(reflector(documents), documents))
    processors = deployments(documents, "processor")
    assert processors
    for deployment in processors:
        settings = settings_of(container_launch(deployment, documents))
        assert pipeline_problems(reflected, settings) == [], doc_id(deployment)


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
    settings = settings_of(container_launch(reflector(documents), documents))
    specs = [ResourceSpec.parse(text) for text in settings.resource]
    assert specs, "the reflector reflects nothing"
    return {
        (spec.namespace, spec.group, spec.plural, verb)
        for spec in specs
        for verb in ("list", "watch")
    }


def rbac_problems(documents: list[Document]) -> list[str]:
    deployment = reflector(documents)
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    grants = granted(documents, deployment["metadata"]["namespace"], account)
    needed = reflected(documents)
    return [f"missing {g}" for g in sorted(needed - grants, key=str)] + [
        f"more than needed {g}" for g in sorted(grants - needed, key=str)
    ]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_rbac_grants_exactly_list_and_watch_on_the_reflected_resources(kustomization: str) -> None:
    documents = render(kustomization)
    assert rbac_problems(documents) == []
    assert reflected(documents) == {(None, "", "pods", "list"), (None, "", "pods", "watch")}


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
    changed = with_changed(render(BASE), "ClusterRole", "informer-bus-reflector", mistake)
    assert rbac_problems(changed)


def test_the_rbac_check_catches_a_resource_the_role_misses() -> None:
    def reflect_deployments_too(document: Document) -> None:
        for var in only_container(document)["env"]:
            if var["name"] == "INFORMER_BUS_RESOURCE":
                var["value"] = "pods,deployments.v1.apps@shop"

    name = "informer-bus-reflector"
    changed = with_changed(render(BASE), "Deployment", name, reflect_deployments_too)
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
    # The second-group overlay: the base's Deployments and a second processor group's.
    documents = render("overlays/second-group")
    chosen = deployments(documents, "reflector") + deployments(documents, "processor")
    assert len(chosen) == 3
    services: list[LocalService] = []
    try:
        for deployment in chosen:
            launch, port = localize_launch(
                container_launch(deployment, documents), local_cluster, tmp_path
            )
            log = tmp_path / f"{deployment['metadata']['name']}.log"
            services.append(LocalService(launch, port, log).start())
        for service in services:
            service.wait_ready()
        # Ready alone does not prove the reflector reached the API (a standby is ready too):
        # the in-cluster configuration turned local must have published the simulated pods.
        client = redis.Redis.from_url(local_cluster.redis_url)
        try:
            bus = Bus(client, "pods", shard_count=settings_of(launch).shard_count)
            wait_until(bus.synced, 30, what="the reflector to publish the pods")
            assert bus.length() >= 50
            groups = {
                g["name"].decode() for g in client.xinfo_groups(ShardKeys("ib", "pods", 0).stream)
            }
            assert groups == {"processors", "audit"}  # each group reads through its own
        finally:
            client.close()
        for service in services:
            assert service.terminate() == 0, service.log()  # SIGTERM, as the kubelet stops it
    finally:
        for service in services:
            service.close()
