"""Server-side printing: the ``meta.k8s.io/v1`` Table a GET or LIST answers when the client
asks for it (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``), as ``kubectl get``
does. kubectl prints the cells as they come, so the columns, their wide-only ``priority`` and
the text of each cell (READY ``1/1``, STATUS ``CrashLoopBackOff``, AGE ``5m``) are the
server's: pods, nodes, namespaces, configmaps and secrets get their real columns, anything
else NAME and AGE, which is what a real server shows for a type without printer columns.

Each row carries the object per ``includeObject``: ``Metadata`` (the default) a
``PartialObjectMetadata``, ``Object`` the whole object, ``None`` nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from apiserver_sim.resources import (
    CONFIGMAPS,
    NAMESPACES,
    NODES,
    PODS,
    SECRETS,
    ResourceType,
)
from apiserver_sim.status import bad_request

__all__ = ["human_duration", "table", "wants_table"]

Row = Callable[[dict[str, Any], float], list[Any]]
"""The cells of one object's row, given the time (Unix seconds) ages count to."""


def _column(
    name: str, description: str = "", priority: int = 0, *, kind: str = "string", form: str = ""
) -> dict[str, Any]:
    """A Table column definition (``priority`` 1: shown with ``-o wide`` only)."""
    return {"name": name, "type": kind, "format": form, "priority": priority,
            "description": description or name}  # fmt: skip


_NAME = _column("Name", "Name must be unique within a namespace.", form="name")
_AGE = _column(
    "Age", "CreationTimestamp is a timestamp representing the server time when this object "
    "was created.",
)  # fmt: skip


def wants_table(accept: str) -> str | None:
    """The Table version (``v1``, else ``v1beta1``) an ``Accept`` header asks for, or ``None``:
    a client that lists plain JSON too gets plain JSON when it asks for no Table."""
    versions = set()
    for entry in accept.split(","):
        params = dict(part.strip().split("=", 1) for part in entry.split(";")[1:] if "=" in part)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            versions.add(params.get("v", ""))
    if "v1" in versions:
        return "v1"
    return "v1beta1" if "v1beta1" in versions else None


def human_duration(seconds: float) -> str:
    """A duration the way kubectl's AGE column reads: ``45s``, ``3m12s``, ``4h5m``, ``12d``,
    ``2y10d`` (finer units while they matter, coarser ones as it grows)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _seconds(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _age(obj: Mapping[str, Any], now: float) -> str:
    born = _seconds((obj.get("metadata") or {}).get("creationTimestamp"))
    return "<unknown>" if born is None else human_duration(now - born)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# ------------------------------------------------------------------ pods


def _pod_status(obj: dict[str, Any]) -> tuple[str, int, int, int, float | None]:
    """(STATUS, ready containers, all containers, restarts, last restart) as kubectl's pod
    printer reads them: the phase, overridden by the pod's reason, then by what a container
    is waiting or terminated for; ``Terminating`` once deletion began."""
    status = _dict(obj.get("status"))
    spec = _dict(obj.get("spec"))
    reason = str(status.get("reason") or status.get("phase") or "Unknown")
    total = len(_list(spec.get("containers")))
    ready = restarts = 0
    last_restart: float | None = None
    running = False
    for container in map(_dict, reversed(_list(status.get("containerStatuses")))):
        restarts += int(container.get("restartCount") or 0)
        finished = _seconds(
            _dict(_dict(container.get("lastState")).get("terminated")).get("finishedAt")
        )
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = _dict(container.get("state"))
        waiting, terminated = _dict(state.get("waiting")), _dict(state.get("terminated"))
        if waiting.get("reason"):
            reason = str(waiting["reason"])
        elif terminated:
            reason = str(terminated.get("reason") or f"ExitCode:{terminated.get('exitCode')}")
        elif "running" in state:
            running = True
            if container.get("ready"):
                ready += 1
    if reason == "Completed" and running:
        reason = "Running"
    if _dict(obj.get("metadata")).get("deletionTimestamp"):
        reason = "Terminating"
    return reason, ready, total, restarts, last_restart


def _pod_row(obj: dict[str, Any], now: float) -> list[Any]:
    reason, ready, total, restarts, last_restart = _pod_status(obj)
    restart_text = str(restarts)
    if restarts and last_restart is not None:
        restart_text += f" ({human_duration(now - last_restart)} ago)"
    status = _dict(obj.get("status"))
    spec = _dict(obj.get("spec"))
    nominated = status.get("nominatedNodeName") or "<none>"
    gates = _list(spec.get("readinessGates"))
    return [
        _name(obj), f"{ready}/{total}", reason, restart_text, _age(obj, now),
        status.get("podIP") or "<none>", spec.get("nodeName") or "<none>", nominated,
        f"0/{len(gates)}" if gates else "<none>",
    ]  # fmt: skip


_POD_COLUMNS = [
    _NAME,
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column("Restarts", "The number of times the containers in this pod have been restarted "
            "and when the last container in this pod has restarted."),
    _AGE,
    _column("IP", "IP address allocated to the pod.", 1),
    _column("Node", "NodeName is a request to schedule this pod onto a specific node.", 1),
    _column("Nominated Node", "The node the scheduler nominated for this pod when preempting.",
            1),
    _column("Readiness Gates", "Pod readiness gates that must be true.", 1),
]  # fmt: skip


# ------------------------------------------------------------------ nodes


def _node_row(obj: dict[str, Any], now: float) -> list[Any]:
    status = _dict(obj.get("status"))
    ready = "Unknown"
    for condition in _list(status.get("conditions")):
        if _dict(condition).get("type") == "Ready":
            ready = "Ready" if condition.get("status") == "True" else "NotReady"
    if _dict(obj.get("spec")).get("unschedulable"):
        ready += ",SchedulingDisabled"
    labels = _dict(_dict(obj.get("metadata")).get("labels"))
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in labels if k.startswith(prefix) and k != prefix)
    info = _dict(status.get("nodeInfo"))
    addresses = {
        a.get("type"): a.get("address") for a in map(_dict, _list(status.get("addresses")))
    }
    return [
        _name(obj), ready, ",".join(roles) or "<none>", _age(obj, now),
        info.get("kubeletVersion") or "", addresses.get("InternalIP") or "<none>",
        addresses.get("ExternalIP") or "<none>", info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]  # fmt: skip


_NODE_COLUMNS = [
    _NAME, _column("Status"), _column("Roles"), _AGE, _column("Version"),
    _column("Internal-IP", priority=1), _column("External-IP", priority=1),
    _column("OS-Image", priority=1), _column("Kernel-Version", priority=1),
    _column("Container-Runtime", priority=1),
]  # fmt: skip


# ------------------------------------------------------------------ others


def _data_count(obj: dict[str, Any]) -> int:
    return len(_dict(obj.get("data"))) + len(_dict(obj.get("binaryData")))


def _configmap_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [_name(obj), _data_count(obj), _age(obj, now)]


def _secret_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [_name(obj), obj.get("type") or "Opaque", _data_count(obj), _age(obj, now)]


def _namespace_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [_name(obj), _dict(obj.get("status")).get("phase") or "", _age(obj, now)]


def _generic_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [_name(obj), _age(obj, now)]


_DATA = _column("Data", "The number of keys in data and binaryData.", kind="integer")

_PRINTERS: dict[ResourceType, tuple[list[dict[str, Any]], Row]] = {
    PODS: (_POD_COLUMNS, _pod_row),
    NODES: (_NODE_COLUMNS, _node_row),
    CONFIGMAPS: ([_NAME, _DATA, _AGE], _configmap_row),
    SECRETS: ([_NAME, _column("Type"), _DATA, _AGE], _secret_row),
    NAMESPACES: ([_NAME, _column("Status"), _AGE], _namespace_row),
}


def table(
    resource: ResourceType,
    objects: Iterable[dict[str, Any]],
    list_metadata: Mapping[str, Any],
    *,
    now: float,
    include_object: str = "",
    version: str = "v1",
) -> dict[str, Any]:
    """The Table of ``objects`` (one GET's object or one LIST page) with ages counted to
    ``now``; ``include_object`` is the request's ``includeObject`` (empty: ``Metadata``)."""
    include = include_object or "Metadata"
    if include not in ("None", "Metadata", "Object"):
        raise bad_request(f'includeObject: unsupported value "{include_object}"')
    columns, row = _PRINTERS.get(resource, ([_NAME, _AGE], _generic_row))
    api_version = f"meta.k8s.io/{version}"
    rows = []
    for obj in objects:
        entry: dict[str, Any] = {"cells": row(obj, now)}
        if include == "Object":
            entry["object"] = obj
        elif include == "Metadata":
            entry["object"] = {"kind": "PartialObjectMetadata", "apiVersion": api_version,
                               "metadata": obj.get("metadata") or {}}  # fmt: skip
        rows.append(entry)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": dict(list_metadata),
        "columnDefinitions": columns,
        "rows": rows,
    }
