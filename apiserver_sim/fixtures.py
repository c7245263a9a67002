"""Deterministic, realistic objects for load generation.

A pod looks like one a Deployment made and the kubelet reports on (~3 KB of JSON with
ownerReferences, two managedFields entries, container specs and statuses), because reflector
and bus costs scale with object size: tiny fixtures would flatter every benchmark. Everything
is drawn from the ``random.Random`` passed in, so a seed reproduces the same objects; times
count back from the ``now`` passed in (the store's wall clock), so with a fixed clock a seed
reproduces the same bytes too, and on a real clock ``kubectl get`` shows plausible ages.

Populated objects (``fresh=False``) are spread over the last three weeks, older ones rarer,
inside namespaces and on nodes that are older still; ``fresh`` ones (churn's creates) are
created ``now``. A pod's container states agree with its phase (:func:`set_pod_phase`), so the
READY, STATUS and RESTARTS columns of ``kubectl get pods`` mean something.
"""

from __future__ import annotations

import functools
import random
import time
from datetime import UTC, datetime
from typing import Any

from apiserver_sim.objects import fields_v1, new_uid
from apiserver_sim.resources import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    WIDGETS,
    ResourceType,
)

__all__ = [
    "make_object",
    "namespace_names",
    "node_names",
    "set_pod_phase",
    "wall_timestamp",
]

_POD_SPREAD = 21 * 86400.0
"""Populated pods were created within this many seconds before ``now``."""
NAMESPACE_AGE = 45 * 86400.0
"""How long before ``now`` populated namespaces were created (before any populated pod)."""
NODE_AGE = 60 * 86400.0
"""How long before ``now`` the first node joined (nodes join an hour apart after it)."""
_APPS = ("checkout", "cart", "catalog", "payments", "search", "auth", "gateway", "ledger")
_TIERS = ("frontend", "backend", "cache", "batch")
_ENVS = ("prod", "staging", "dev")
_HEX = "0123456789abcdef"
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


@functools.lru_cache(maxsize=1024)
def _day(days: int) -> str:
    return datetime.fromtimestamp(days * 86400, UTC).strftime("%Y-%m-%d")


def wall_timestamp(seconds: float) -> str:
    """``seconds`` since the Unix epoch as RFC 3339 at second precision, like ``metav1.Time``
    (the churn generator stamps one per update, so the date part is cached)."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    return f"{_day(days)}T{hours:02d}:{minutes:02d}:{rest:02d}Z"


def _spread(index: int) -> float:
    """How long before ``now`` populated object ``index`` was created: a hash of the index
    (no draw from the seed's stream, which names and contents depend on), cubed so that
    recent objects are the common case, as in a cluster that rolls out every few days."""
    fraction = ((index * 2654435761 + 12345) % 4294967296) / 4294967296
    return 120.0 + _POD_SPREAD * fraction**3


def namespace_names(count: int) -> list[str]:
    return [f"ns-{i:02d}" for i in range(count)]


def node_names(count: int) -> list[str]:
    """The names populated pods are scheduled on (``spec.nodeName``)."""
    return [f"node-{i:04d}" for i in range(count)]


def _word(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    if alphabet is _HEX:  # one draw for the whole word (image digests, container IDs)
        return f"{rng.getrandbits(4 * n):0{n}x}"
    return "".join(rng.choices(alphabet, k=n))


def make_object(
    resource: ResourceType,
    rng: random.Random,
    index: int,
    namespace: str,
    nodes: int = 50,
    *,
    now: float | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """Object number ``index`` of ``resource`` in ``namespace`` ('' for cluster-scoped), as
    it stands at ``now`` (default: the clock); ``fresh``: created at ``now``."""
    if now is None:
        now = time.time()
    if resource is PODS:
        return _pod(rng, index, namespace, nodes, now=now, fresh=fresh)
    created = wall_timestamp(now if fresh else now - _age(resource, index))
    meta: dict[str, Any] = {
        "name": "",
        "uid": new_uid(rng),
        "creationTimestamp": created,
        "generation": 1,
        "labels": {"app": rng.choice(_APPS), "env": rng.choice(_ENVS)},
    }
    if resource.namespaced:
        meta["namespace"] = namespace
    obj: dict[str, Any] = {"apiVersion": resource.api_version, "kind": resource.kind}
    if resource is CONFIGMAPS:
        meta["name"] = f"config-{index:06d}"
        obj["data"] = {f"key{j}": _word(rng, 24) for j in range(4)}
    elif resource is SECRETS:
        meta["name"] = f"secret-{index:06d}"
        obj["type"] = "Opaque"
        obj["data"] = {"password": _word(rng, 32)}
    elif resource is NODES:
        meta["name"] = f"node-{index:04d}"
        _fill_node(obj, meta, rng, index, now)
    elif resource is NAMESPACES:
        meta["name"] = f"ns-{index:02d}"
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif resource is EVENTS:
        meta["name"] = f"event-{index:06d}"
        obj.update(
            type=rng.choice(("Normal", "Normal", "Warning")),
            reason=rng.choice(("Scheduled", "Pulled", "Created", "Started", "BackOff")),
            message=f"simulated event {index}",
            involvedObject={"apiVersion": "v1", "kind": "Pod", "namespace": namespace,
                            "name": f"pod-{index:06d}", "uid": new_uid(rng)},
            source={"component": "kubelet"}, reportingComponent="kubelet", count=1,
            firstTimestamp=created, lastTimestamp=created,
        )  # fmt: skip
    elif resource is WIDGETS:
        meta["name"] = f"widget-{index:06d}"
        obj["spec"] = {"size": rng.randrange(1, 10), "color": rng.choice(("red", "blue"))}
    else:
        meta["name"] = f"{resource.singular}-{index:06d}"
    obj["metadata"] = meta
    meta["managedFields"] = [_managed("kubectl-client-side-apply", obj, created)]
    return obj


def _managed(manager: str, obj: Any, when: str, subresource: str = "") -> dict[str, Any]:
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": "v1",
        "time": when,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(obj),
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _fill_node(
    obj: dict[str, Any], meta: dict[str, Any], rng: random.Random, index: int, now: float
) -> None:
    """A ready worker node's labels, spec and kubelet status."""
    name = meta["name"]
    created = meta["creationTimestamp"]
    obj["spec"] = {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24"}
    meta["labels"].update({
        "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
    })  # fmt: skip
    address = f"192.168.{index // 250 % 256}.{index % 250 + 2}"
    obj["status"] = {
        "addresses": [{"type": "InternalIP", "address": address},
                      {"type": "Hostname", "address": name}],
        "allocatable": {"cpu": "15890m", "memory": "63221240Ki", "pods": "110"},
        "capacity": {"cpu": "16", "memory": "65842168Ki", "pods": "110"},
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": wall_timestamp(now - 10.0), "lastTransitionTime": created,
        }],
        "nodeInfo": {
            "architecture": "amd64",
            "bootID": new_uid(rng),
            "containerRuntimeVersion": "containerd://1.7.20",
            "kernelVersion": "6.1.0-23-cloud-amd64",
            "kubeProxyVersion": "v1.31.0",
            "kubeletVersion": "v1.31.0",
            "machineID": _word(rng, 32, _HEX),
            "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12 (bookworm)",
            "systemUUID": new_uid(rng),
        },
    }  # fmt: skip


def _age(resource: ResourceType, index: int) -> float:
    """How long before ``now`` populated object ``index`` of ``resource`` was created."""
    if resource is NODES:
        return NODE_AGE - 3600.0 * (index % 720)  # an hour apart, over 30 days at most
    if resource is NAMESPACES:
        return NAMESPACE_AGE - 60.0 * (index % 1440)
    return _spread(index)


def _pod(
    rng: random.Random, index: int, namespace: str, nodes: int, *, now: float, fresh: bool
) -> dict[str, Any]:
    """A Deployment-owned, scheduled pod with kubelet status (see :func:`make_object`)."""
    born = now if fresh else now - _spread(index)
    app = rng.choice(_APPS)
    template_hash = _word(rng, 10)
    replica_set = f"{app}-{template_hash}"
    name = f"{replica_set}-{_word(rng, 5)}-{index}"
    node = f"node-{rng.randrange(nodes):04d}"
    pod_ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    phase = rng.choices(("Running", "Pending", "Succeeded", "Failed"), (85, 8, 5, 2))[0]
    created = wall_timestamp(born)
    image = f"registry.example.com/{app}:v{rng.randrange(1, 40)}.{rng.randrange(10)}.0"
    labels = {
        "app": app,
        "pod-template-hash": template_hash,
        "tier": rng.choice(_TIERS),
        "env": rng.choice(_ENVS),
    }
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": app,
                "image": image,
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [
                    {"name": "APP_NAME", "value": app},
                    {"name": "LOG_LEVEL", "value": rng.choice(("info", "debug", "warn"))},
                ],
                "resources": {
                    "limits": {"cpu": "500m", "memory": "512Mi"},
                    "requests": {"cpu": f"{rng.randrange(50, 400)}m", "memory": "256Mi"},
                },
                "volumeMounts": [
                    {
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "name": f"kube-api-access-{_word(rng, 5)}",
                        "readOnly": True,
                    }
                ],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "nodeName": node,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
    }
    restarts = rng.randrange(3)  # drawn even for a fresh pod: the stream stays the same
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": created}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "qosClass": "Burstable",
        "startTime": created,
        "containerStatuses": [
            {
                "name": app,
                "image": image,
                "imageID": f"{image}@sha256:{_word(rng, 64, _HEX)}",
                "containerID": f"containerd://{_word(rng, 64, _HEX)}",
                "ready": True,
                "restartCount": 0 if fresh else restarts,
                "started": True,
                "state": {"running": {"startedAt": created}},
            }
        ],
    }
    # Started a few seconds after creation; a container that restarted did so at a point
    # of the pod's life drawn from its index (no draw from the seed's stream).
    restarted = born + (now - born) * (((index + 1) * 40503 % 1000) / 1000)
    set_pod_phase(status, phase, wall_timestamp(born + 1 + index % 7), wall_timestamp(restarted))
    metadata: dict[str, Any] = {
        "name": name,
        "generateName": f"{replica_set}-",
        "namespace": namespace,
        "uid": new_uid(rng),
        "creationTimestamp": created,
        "labels": labels,
        "annotations": {"kubernetes.io/created-by": "informer-bus-sim"},
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": replica_set,
                "uid": new_uid(rng),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    metadata["managedFields"] = [
        _managed("kube-controller-manager", pod, created),
        _managed("kubelet", {"status": status}, created, "status"),
    ]
    pod["status"] = status
    return pod


def set_pod_phase(
    status: dict[str, Any], phase: Any, when: str, restarted: str | None = None
) -> None:
    """Make a pod's conditions and container states agree with ``phase`` (written ``when``),
    as a kubelet reports them: Running pods have ready, running containers; Pending ones
    wait in ContainerCreating; Succeeded and Failed ones have terminated containers (exit 0,
    "Completed"; exit 1, "Error"). A container that restarted keeps its last termination
    (at ``restarted``, default ``when``). Unknown phases only set ``phase``."""
    status["phase"] = phase
    ready = phase == "Running"
    for condition in status.get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") in ("Ready", "ContainersReady"):
            condition["status"] = "True" if ready else "False"
    for container in status.get("containerStatuses") or ():
        if not isinstance(container, dict):
            continue
        container["ready"] = ready
        container["started"] = ready
        if phase == "Running":
            started = restarted if restarted and container.get("restartCount") else when
            container["state"] = {"running": {"startedAt": started}}
        elif phase == "Pending":
            container["state"] = {"waiting": {"reason": "ContainerCreating"}}
        elif phase in ("Succeeded", "Failed"):
            code = 0 if phase == "Succeeded" else 1
            container["state"] = {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": when, "finishedAt": when,
                "containerID": container.get("containerID", ""),
            }}  # fmt: skip
        if container.get("restartCount") and "lastState" not in container:
            at = restarted or when
            container["lastState"] = {"terminated": {
                "exitCode": 137, "reason": "OOMKilled", "startedAt": when, "finishedAt": at,
                "containerID": container.get("containerID", ""),
            }}  # fmt: skip
