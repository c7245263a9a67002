"""What the apiserver does to an object on its way into storage.

Create fills uid, creationTimestamp, generation and managedFields; update keeps the identity
fields, bumps generation only when the spec-like part changed, refreshes the caller's
managedFields entry and confines the write to what its endpoint may change (a type's status
subresource owns ``.status``); patches (JSON merge, strategic merge, JSON patch) produce the
new object. Nothing here touches state: callers run these inside the store's
critical section.
"""

from __future__ import annotations

import copy
import random
import re
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from apiserver_sim.resources import ResourceType
from apiserver_sim.status import ApiError, bad_request, invalid

__all__ = [
    "Scope",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "fields_v1",
    "key_of",
    "new_uid",
    "prepare_create",
    "prepare_update",
    "timestamp",
    "unchanged",
]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_IDENTITY = ("uid", "creationTimestamp", "namespace", "name")


def timestamp(when: datetime | None = None) -> str:
    """RFC 3339 at second precision, as Kubernetes renders ``metav1.Time``."""
    return (when or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid(rng: random.Random | None = None) -> str:
    if rng is None:
        return str(uuid.uuid4())
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def fields_v1(obj: Any, depth: int = 0) -> dict[str, Any]:
    """A FieldsV1 set shaped like the server's: ``f:`` per map key, lists collapsed to ``.``."""
    out: dict[str, Any] = {}
    if not isinstance(obj, dict):
        return out
    for key, value in obj.items():
        if depth == 0 and key in ("apiVersion", "kind", "status"):
            continue
        if depth == 1 and key in ("resourceVersion", "uid", "creationTimestamp", "managedFields",
                                  "generation", "name", "namespace"):  # fmt: skip
            continue
        if isinstance(value, dict):
            out[f"f:{key}"] = {".": {}, **fields_v1(value, depth + 1)} if value else {}
        else:
            out[f"f:{key}"] = {}
    return out


def _managed_entry(
    manager: str, operation: str, api_version: str, obj: Any, when: str, *, subresource: str = ""
) -> Any:
    """A managedFields entry; through a subresource it names it and holds only ``.status``."""
    entry: dict[str, Any] = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": when,
        "fieldsType": "FieldsV1",
    }
    if subresource == "status":
        status = obj.get("status")
        fields = {".": {}, **fields_v1(status, 2)} if isinstance(status, dict) and status else {}
        entry["fieldsV1"] = {"f:status": fields} if "status" in obj else {}
        entry["subresource"] = subresource
    else:
        entry["fieldsV1"] = fields_v1(obj)
    return entry


def _check_type(resource: ResourceType, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise bad_request("the body of the request was in an unknown format: expected an object")
    kind = obj.get("kind")
    api_version = obj.get("apiVersion")
    if kind not in (None, "", resource.kind) or api_version not in (None, "", resource.api_version):
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API "
            f"version ({resource.api_version}) or kind ({kind}) is not {resource.kind}"
        )
    metadata = obj.get("metadata")
    if metadata is None:
        obj["metadata"] = metadata = {}
    if not isinstance(metadata, dict):
        raise bad_request("metadata must be an object")
    obj["kind"] = resource.kind
    obj["apiVersion"] = resource.api_version
    return metadata


def _check_namespace(resource: ResourceType, metadata: dict[str, Any], namespace: str) -> None:
    if resource.namespaced:
        given = metadata.get("namespace")
        if given and given != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        metadata["namespace"] = namespace
    else:
        metadata.pop("namespace", None)


def prepare_create(
    resource: ResourceType,
    body: Any,
    namespace: str,
    manager: str,
    *,
    rng: random.Random | None = None,
    when: str | None = None,
) -> dict[str, Any]:
    """A new object ready to store (resourceVersion is assigned by the store)."""
    obj: dict[str, Any] = copy.deepcopy(body)
    metadata = _check_type(resource, obj)
    _check_namespace(resource, metadata, namespace)
    name = metadata.get("name")
    if not name:
        prefix = metadata.get("generateName")
        if not prefix:
            raise invalid(resource.kind, "", "name or generateName is required", "metadata.name")
        pick = rng or random.Random()
        name = prefix + "".join(pick.choice(_GENERATE_ALPHABET) for _ in range(5))
        metadata["name"] = name
    if not isinstance(name, str) or not _NAME.match(name):
        raise invalid(
            resource.kind,
            str(name),
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.'",
            "metadata.name",
        )
    now = when or timestamp()
    metadata["uid"] = new_uid(rng)
    metadata["creationTimestamp"] = now
    metadata["generation"] = 1
    metadata.pop("resourceVersion", None)
    metadata.pop("deletionTimestamp", None)
    metadata["managedFields"] = [_managed_entry(manager, "Update", resource.api_version, obj, now)]
    if resource is not None and resource.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    if resource.kind == "Pod" and not obj.get("status"):
        # What the pod strategy stores before a scheduler or kubelet has seen the pod.
        obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj.get("spec"))}
    return obj


def _qos_class(spec: Any) -> str:
    """BestEffort without any request or limit, else Burstable (Guaranteed is not told)."""
    containers = spec.get("containers") if isinstance(spec, dict) else None
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, dict) and container.get("resources"):
            return "Burstable"
    return "BestEffort"


def key_of(resource: ResourceType, obj: dict[str, Any]) -> str:
    """``namespace/name`` (or ``name`` for a cluster-scoped type) of a prepared object."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if resource.namespaced else str(meta["name"])


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


Scope = Literal["whole", "main", "status"]
"""What an update may change. ``whole``: everything in the body (the Python API's writes, which
stand for any writer, kubelet included); ``main``: a PUT or PATCH of the resource itself, which
keeps the stored ``.status`` of a type with a status subresource; ``status``: a write through
that subresource, which changes ``.status`` alone."""


def _confine(
    resource: ResourceType, old: dict[str, Any], obj: dict[str, Any], scope: Scope
) -> dict[str, Any]:
    """``obj`` cut down to what a write of ``scope`` may change of ``old``.

    The apiserver's status strategies do this: through ``/status`` the stored object is kept
    whole but for ``.status`` (labels, annotations and spec included; a body without a status
    removes it); through the main resource the stored status is put back. Controllers rely on
    it: a spec writer cannot clobber the status another wrote, and the other way round.
    """
    if scope == "whole" or not resource.status_subresource:
        return obj
    if scope == "status":
        kept: dict[str, Any] = copy.deepcopy(old)
        if "status" in obj:
            kept["status"] = obj["status"]
        else:
            kept.pop("status", None)
        return kept
    if "status" in old:
        obj["status"] = copy.deepcopy(old["status"])
    else:
        obj.pop("status", None)
    return obj


def prepare_update(
    resource: ResourceType,
    old: dict[str, Any],
    body: Any,
    manager: str,
    *,
    when: str | None = None,
    scope: Scope = "whole",
) -> dict[str, Any]:
    """The stored form of a replacement of ``old`` by ``body`` through ``scope`` (see
    :data:`Scope`); the status subresource's managedFields entry is its manager's own."""
    obj = copy.deepcopy(body) if body is not old else body
    metadata = _check_type(resource, obj)
    old_meta = old["metadata"]
    for name in ("name", "namespace"):
        given = metadata.get(name)
        if given and given != old_meta.get(name):
            raise bad_request(f"the {name} of the object ({given}) does not match the request")
    given_uid = metadata.get("uid")
    if given_uid and given_uid != old_meta.get("uid"):
        raise ApiError(409, "Conflict", f"Precondition failed: UID in object meta: {given_uid}")
    obj = _confine(resource, old, obj, scope)
    metadata = obj["metadata"]
    for name in _IDENTITY:
        if name in old_meta:
            metadata[name] = old_meta[name]
    generation = int(old_meta.get("generation", 1))
    if _spec_part(obj) != _spec_part(old):
        generation += 1
    metadata["generation"] = generation
    now = when or timestamp()
    subresource = "status" if scope == "status" and resource.status_subresource else ""
    entries = [
        e
        for e in old_meta.get("managedFields", [])
        if isinstance(e, dict)
        and (e.get("manager") != manager or e.get("subresource", "") != subresource)
    ]
    entries.append(_managed_entry(manager, "Update", resource.api_version, obj, now,
                                  subresource=subresource))  # fmt: skip
    metadata["managedFields"] = entries
    return obj


def unchanged(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether ``new`` (from :func:`prepare_update`) stores nothing ``old`` did not hold.

    The apiserver skips such a write: the object keeps its resourceVersion, its managedFields
    are not re-stamped and watchers see no event. A controller that PUTs what it already
    wrote must not wake itself (or other watchers) again.
    """

    def significant(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in obj["metadata"].items()
                if k not in ("managedFields", "resourceVersion")}  # fmt: skip
        return {**obj, "metadata": meta}

    return significant(old) == significant(new)


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes; objects merge; anything else replaces)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "ports": "containerPort", "volumes": "name", "volumeMounts": "mountPath",
    "volumeDevices": "devicePath", "imagePullSecrets": "name", "hostAliases": "ip",
    "conditions": "type", "ownerReferences": "uid", "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}  # fmt: skip
"""The merge key of the lists of the served built-in types that merge rather than replace
(``patchMergeKey`` in the Go types), for patches that do not name it in a
``$setElementOrder`` directive."""
_MERGED_PRIMITIVES = ("finalizers",)
"""Lists of strings a strategic merge patch adds to (``patchStrategy: merge``)."""
_DIRECTIVE = "$patch"
_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def apply_strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch as kubectl computes it for built-in types: JSON merge patch,
    except that lists with a merge key (``containers`` by ``name``...) merge element by
    element, and the directives ``$patch`` (``replace``, ``delete``), ``$retainKeys``,
    ``$setElementOrder/LIST`` and ``$deleteFromPrimitiveList/LIST`` are obeyed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value, patch.get(_ORDER + key))
        elif isinstance(value, dict):
            merged = apply_strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = value
    _list_directives(result, patch)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _list_directives(result: dict[str, Any], patch: dict[str, Any]) -> None:
    """``$deleteFromPrimitiveList/LIST`` and ``$setElementOrder/LIST`` applied to ``result``."""
    for key, value in patch.items():
        for prefix in (_DELETE_PRIMITIVES, _ORDER):
            name = key[len(prefix) :]
            if not key.startswith(prefix) or not isinstance(result.get(name), list):
                continue
            if prefix == _DELETE_PRIMITIVES:
                result[name] = [item for item in result[name] if item not in value]
            else:
                result[name] = _reorder(result[name], value, _merge_key(name, value))


def _strip(value: Any) -> Any:
    """``value`` without directives (what is stored when a patch replaces a whole part)."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _merge_key(name: str, order: Any) -> str | None:
    if isinstance(order, list) and order and isinstance(order[0], dict) and len(order[0]) == 1:
        return str(next(iter(order[0])))
    return _MERGE_KEYS.get(name)


def _merge_list(name: str, target: Any, patch: list[Any], order: Any) -> list[Any]:
    """One list of a strategic merge patch: merged by key, added to, or replaced."""
    current = target if isinstance(target, list) else []
    if any(isinstance(item, dict) and item.get(_DIRECTIVE) == "replace" for item in patch):
        return [_strip(i) for i in patch
                if not (isinstance(i, dict) and i.get(_DIRECTIVE) == "replace")]  # fmt: skip
    key = _merge_key(name, order)
    if key is None or not all(isinstance(item, dict) for item in patch):
        if name in _MERGED_PRIMITIVES:
            return current + [item for item in patch if item not in current]
        return _strip(patch)  # type: ignore[no-any-return]
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        at = next((i for i, old in enumerate(merged)
                   if isinstance(old, dict) and old.get(key) == item.get(key)), None)  # fmt: skip
        if item.get(_DIRECTIVE) == "delete":
            if at is not None:
                del merged[at]
        elif at is None:
            merged.append(_strip(item))
        else:
            merged[at] = apply_strategic_merge_patch(merged[at], item)
    return merged


def _reorder(items: list[Any], order: Any, key: str | None) -> list[Any]:
    """``items`` in the order a ``$setElementOrder`` directive gives; others keep theirs, last."""
    if not isinstance(order, list):
        return items

    def ident(item: Any) -> Any:
        return orjson.dumps(item.get(key) if key and isinstance(item, dict) else item)

    rank = {ident(entry): i for i, entry in enumerate(order)}
    return sorted(items, key=lambda item: rank.get(ident(item), len(rank)))


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def apply_json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, test, copy, move."""
    if not isinstance(ops, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = _apply_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error "
                           f"in our request: json patch {op!r}: {exc!r}") from None  # fmt: skip
    return doc


def _apply_op(doc: Any, op: Any) -> Any:  # noqa: C901 - one branch per RFC 6902 op
    kind = op["op"]
    parts = _pointer(op["path"])
    if kind == "test":
        node = doc
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if node != op["value"]:
            raise ValueError("test failed")
        return doc
    if kind in ("copy", "move"):
        src = _pointer(op["from"])
        node = doc
        for part in src:
            node = node[int(part)] if isinstance(node, list) else node[part]
        value = copy.deepcopy(node)
        if kind == "move":
            doc = _apply_op(doc, {"op": "remove", "path": op["from"]})
        return _apply_op(doc, {"op": "add", "path": op["path"], "value": value})
    if not parts:
        return copy.deepcopy(op["value"]) if kind in ("add", "replace") else None
    parent = _parent(doc, parts)
    last = parts[-1]
    if kind == "remove":
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    elif kind in ("add", "replace"):
        value = copy.deepcopy(op["value"])
        if isinstance(parent, list):
            if kind == "add":
                parent.insert(len(parent) if last == "-" else int(last), value)
            else:
                parent[int(last)] = value
        else:
            if kind == "replace" and last not in parent:
                raise KeyError(last)
            parent[last] = value
    else:
        raise ValueError(f"unknown op {kind!r}")
    return doc
