"""Which resources the reflector lists and watches, and where the API server serves them.

A resource is configured as text (flags, env vars), kubectl-style, because operators already
know that syntax: ``pods``, ``deployments.v1.apps``, ``widgets.example.com@shop``,
``pods@shop?labelSelector=app%3Dweb`` (:class:`~common.resource_ids.ResourceSpec`, the syntax
every informer-bus tool checks names with). :func:`resolve` turns it into a URL path and a kind by
reading the discovery documents as raw JSON (``orjson``): the ``kubernetes`` client's typed
discovery builds model objects for every resource of every group, which is slow and pointless
when we need one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.resource_ids import SPEC_SYNTAX, ResourceSpec, likely_meant
from reflector_svc.api_errors import ApiStatusError, UnknownResourceError
from reflector_svc.transport import get_json

__all__ = ["ResolvedResource", "ResourceSpec", "UnknownResourceError", "resolve"]
# UnknownResourceError is defined with the other API errors in reflector_svc.api_errors and
# re-exported here, where callers of resolve() look for it.

SYNTAX = SPEC_SYNTAX
"""The accepted syntax, quoted in every parse error (the rule itself is in ``common``)."""


@dataclass(frozen=True)
class ResolvedResource:
    """A :class:`ResourceSpec` after discovery: the version actually served, the object kind
    (LIST items omit it, so we stamp it back), the scope, and the collection URL path."""

    spec: ResourceSpec
    version: str
    kind: str
    namespaced: bool
    list_path: str

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise (the objects' apiVersion)."""
        return f"{self.spec.group}/{self.version}" if self.spec.group else self.version

    @property
    def resource_id(self) -> str:
        return self.spec.resource_id


def _group_version_path(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _get_or_none(api_client: Any, path: str, timeout: float) -> Any:
    """GET a discovery document; ``None`` on 404 (not served), other errors propagate."""
    try:
        return get_json(api_client, path, timeout=timeout)
    except ApiStatusError as error:
        if error.status == 404:
            return None
        raise


def _served_groups(api_client: Any, timeout: float) -> dict[str, str]:
    """``{group: preferred version}`` of every non-core group (``/apis``)."""
    doc = get_json(api_client, "/apis", timeout=timeout)
    entries = doc.get("groups") if isinstance(doc, dict) else None
    groups: dict[str, str] = {}
    for entry in entries or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        preferred = entry.get("preferredVersion") or {}
        version = preferred.get("version") if isinstance(preferred, dict) else None
        if not version:
            versions = entry.get("versions") or [{}]
            version = versions[0].get("version") if isinstance(versions[0], dict) else None
        if isinstance(version, str):
            groups[entry["name"]] = version
    return groups


def _preferred_version(api_client: Any, spec: ResourceSpec, timeout: float) -> str:
    if not spec.group:
        doc = get_json(api_client, "/api", timeout=timeout)
        versions = doc.get("versions") if isinstance(doc, dict) else None
        if not versions or not isinstance(versions[0], str):
            raise UnknownResourceError(f"{spec}: the server lists no core API versions at /api")
        return "v1" if "v1" in versions else versions[0]
    doc = _get_or_none(api_client, f"/apis/{spec.group}", timeout)
    if isinstance(doc, dict):
        preferred = doc.get("preferredVersion")
        if isinstance(preferred, dict) and isinstance(preferred.get("version"), str):
            return str(preferred["version"])
        versions = doc.get("versions") or []
        if versions and isinstance(versions[0], dict) and versions[0].get("version"):
            return str(versions[0]["version"])
    raise UnknownResourceError(_group_not_served_message(api_client, spec, timeout))


def _resources(doc: Any) -> list[dict[str, Any]]:
    """Top-level resources of an APIResourceList (subresources like ``pods/status`` dropped)."""
    if not isinstance(doc, dict):
        return []
    return [
        r
        for r in doc.get("resources") or ()
        if isinstance(r, dict) and isinstance(r.get("name"), str) and "/" not in r["name"]
    ]


def resolve(api_client: Any, spec: ResourceSpec, *, timeout: float = 30.0) -> ResolvedResource:
    """Find ``spec`` through discovery (``/api``, ``/apis/GROUP``, ``/api[s]/.../VERSION``).

    Raises :class:`~reflector_svc.api_errors.UnknownResourceError` (with close matches) when the
    group, version or resource is not served, the resource cannot be listed and watched, or a
    namespace is given for a cluster-scoped resource; transport and server failures raise the
    other :mod:`reflector_svc.api_errors` errors.
    """
    version = spec.version or _preferred_version(api_client, spec, timeout)
    gv_path = _group_version_path(spec.group, version)
    doc = _get_or_none(api_client, gv_path, timeout)
    if doc is None:
        raise UnknownResourceError(_unknown_version_message(api_client, spec, version, timeout))
    entries = _resources(doc)
    entry = next((r for r in entries if r["name"] == spec.plural), None)
    if entry is None:
        raise UnknownResourceError(_unknown_resource_message(api_client, spec, version, entries))
    verbs = entry.get("verbs") or []
    missing = [v for v in ("list", "watch") if v not in verbs]
    if missing:
        raise UnknownResourceError(
            f"{spec}: {spec.plural} in {gv_path} does not support {' and '.join(missing)}"
        )
    kind = entry.get("kind")
    if not isinstance(kind, str) or not kind:
        raise UnknownResourceError(f"{spec}: discovery at {gv_path} gives {spec.plural} no kind")
    namespaced = bool(entry.get("namespaced"))
    if spec.namespace and not namespaced:
        raise UnknownResourceError(
            f"{spec}: {spec.plural} is cluster-scoped; drop '@{spec.namespace}'"
        )
    if spec.namespace:
        list_path = f"{gv_path}/namespaces/{spec.namespace}/{spec.plural}"
    else:
        list_path = f"{gv_path}/{spec.plural}"
    return ResolvedResource(
        spec=spec, version=version, kind=kind, namespaced=namespaced, list_path=list_path
    )


def _unknown_version_message(
    api_client: Any, spec: ResourceSpec, version: str, timeout: float
) -> str:
    if not spec.group:
        return f"{spec}: core API version {version!r} is not served (try {spec.plural}.v1)"
    doc = _get_or_none(api_client, f"/apis/{spec.group}", timeout)
    if not isinstance(doc, dict):
        return _group_not_served_message(api_client, spec, timeout)
    versions = [str(v.get("version")) for v in doc.get("versions") or () if isinstance(v, dict)]
    return (
        f"{spec}: version {version!r} of API group {spec.group!r} is not served"
        f" (served: {', '.join(versions) or 'none'})"
    )


def _group_not_served_message(api_client: Any, spec: ResourceSpec, timeout: float) -> str:
    served = sorted(_served_groups(api_client, timeout))
    return f"{spec}: API group {spec.group!r} is not served" + (
        f" (served groups: {', '.join(served)})" if served else ""
    )


def _unknown_resource_message(
    api_client: Any, spec: ResourceSpec, version: str, entries: list[dict[str, Any]]
) -> str:
    where = f"{spec.group}/{version}" if spec.group else f"core/{version}"
    hints: list[str] = []
    for r in entries:
        aliases = {str(r.get("singularName") or ""), str(r.get("kind") or "").lower()}
        aliases.update(str(s) for s in r.get("shortNames") or ())
        if spec.plural in aliases:
            hints.append(r["name"] + (f".{spec.group}" if spec.group else ""))
    served = [r["name"] + (f".{spec.group}" if spec.group else "") for r in entries]
    if not spec.group:
        served += _matches_in_other_groups(api_client, spec.plural)
    wanted = f"{spec.plural}.{spec.group}" if spec.group else spec.plural
    hints += likely_meant(wanted, served)
    unique = list(dict.fromkeys(hints))
    message = f"{spec}: the server does not serve resource {spec.plural!r} in {where}"
    if unique:
        message += f"; did you mean {' or '.join(unique)}?"
    return message


def _matches_in_other_groups(api_client: Any, plural: str) -> list[str]:
    """``plural.group`` for every non-core group serving ``plural`` (best effort: this only
    improves an error message, so failures are ignored)."""
    found: list[str] = []
    try:
        groups = _served_groups(api_client, 10.0)
        for group, version in sorted(groups.items()):
            doc = _get_or_none(api_client, _group_version_path(group, version), 10.0)
            if any(r["name"] == plural for r in _resources(doc)):
                found.append(f"{plural}.{group}")
    except Exception:  # only decorates an error that is already being raised
        return found
    return found
