"""Deterministic, realistic objects for load generation.

A pod looks like one a Deployment made and the kubelet reports on (~3 KB of JSON with
ownerReferences, two managedFields entries, container specs and statuses), because reflector
and bus costs scale with object size: tiny fixtures would flatter every benchmark. Everything
is drawn from the ``random.Random`` passed in, so a seed reproduces the same objects.
"""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime
from typing import Any

from informer_bus.apiserver_sim.objects import fields_v1, new_uid
from informer_bus.apiserver_sim.resources import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    WIDGETS,
    ResourceType,
)

__all__ = ["FIXTURE_EPOCH", "fake_time", "make_object", "namespace_names"]

FIXTURE_EPOCH = 1_717_200_000  # 2024-06-01: fixture timestamps count from here, not the clock
_APPS = ("checkout", "cart", "catalog", "payments", "search", "auth", "gateway", "ledger")
_TIERS = ("frontend", "backend", "cache", "batch")
_ENVS = ("prod", "staging", "dev")
_HEX = "0123456789abcdef"
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


@functools.lru_cache(maxsize=1024)
def _fake_day(days: int) -> str:
    return datetime.fromtimestamp(days * 86400, UTC).strftime("%Y-%m-%d")


def fake_time(offset_seconds: int) -> str:
    """A timestamp ``offset_seconds`` after :data:`FIXTURE_EPOCH`, RFC 3339 (the churn
    generator stamps one per update, so the date part is cached)."""
    days, seconds = divmod(FIXTURE_EPOCH + int(offset_seconds), 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return f"{_fake_day(days)}T{hours:02d}:{minutes:02d}:{seconds:02d}Z"


def namespace_names(count: int) -> list[str]:
    return [f"ns-{i:02d}" for i in range(count)]


def _word(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    if alphabet is _HEX:  # one draw for the whole word (image digests, container IDs)
        return f"{rng.getrandbits(4 * n):0{n}x}"
    return "".join(rng.choices(alphabet, k=n))


def make_object(
    resource: ResourceType, rng: random.Random, index: int, namespace: str, nodes: int = 50
) -> dict[str, Any]:
    """Object number ``index`` of ``resource`` in ``namespace`` ('' for cluster-scoped)."""
    if resource is PODS:
        return make_pod(rng, index, namespace, nodes)
    created = fake_time(index)
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
        obj["spec"] = {"podCIDR": f"10.{index // 256 % 256}.{index % 256}.0/24"}
        obj["status"] = {
            "capacity": {"cpu": "16", "memory": "65842168Ki", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": created}],
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
        }
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


def make_pod(rng: random.Random, index: int, namespace: str, nodes: int = 50) -> dict[str, Any]:
    """A Deployment-owned, scheduled pod with kubelet status."""
    app = rng.choice(_APPS)
    template_hash = _word(rng, 10)
    replica_set = f"{app}-{template_hash}"
    name = f"{replica_set}-{_word(rng, 5)}-{index}"
    node = f"node-{rng.randrange(nodes):04d}"
    pod_ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    phase = rng.choices(("Running", "Pending", "Succeeded", "Failed"), (85, 8, 5, 2))[0]
    created = fake_time(index)
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
    ready = "True" if phase == "Running" else "False"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": t, "status": s, "lastProbeTime": None, "lastTransitionTime": created}
            for t, s in (
                ("Initialized", "True"),
                ("Ready", ready),
                ("ContainersReady", ready),
                ("PodScheduled", "True"),
            )
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
                "ready": phase == "Running",
                "restartCount": rng.randrange(3),
                "started": phase == "Running",
                "state": {"running": {"startedAt": created}},
            }
        ],
    }
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
