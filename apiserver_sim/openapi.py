"""The OpenAPI v3 documents kubectl reads before it writes: ``/openapi/v3`` (one entry per
group version) and ``/openapi/v3/api/v1``, ``/openapi/v3/apis/GROUP/VERSION``.

``kubectl apply`` and ``create`` validate what they send (unless ``--validate=false``). A
kubectl of 1.27 or later first asks ``/openapi/v3`` whether the PATCH of the object's type
takes the ``fieldValidation`` query parameter; when it does, the server validates
(``fieldValidation=Strict``) and kubectl downloads no schema. Without these documents it falls
back to ``/openapi/v2``, and with neither it refuses to apply anything.

``kubectl create -f`` (or ``apply -f``) of a ``List`` is the exception: a List has no endpoint to
ask, so kubectl checks its items itself, against the OpenAPI v2 document (``/openapi/v2``, in
protobuf), and without one it refuses the whole file ("the server could not find the requested
resource; ... turn validation off with --validate=false"). The v2 document served here defines
no types: kubectl skips the items it finds no schema for, as it does for any type a real
server's document lacks, and they go to the server one by one.

The schemas are deliberately open (any ``spec``, ``status`` or other member): this server
keeps what it is sent. The PATCH operations list the JSON and merge patch types only, though
built-in types also take strategic merge patches: kubectl then computes its strategic merge
patch from its own compiled-in types (which know every list's merge key) instead of from these
schemas, which know none. Server-side apply (``apply-patch+yaml``) is not served.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import orjson

from apiserver_sim.resources import RESOURCES, ResourceType, version_document

__all__ = ["openapi"]

_PREFIX = "openapi/v3"
_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""The content type of the v2 document in protobuf; clients ask for it as ``...v2@v1.0+...``,
which Go's media type parser refuses in a response."""
_QUERY = ("dryRun", "fieldManager", "fieldValidation", "pretty")
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def _gv_path(resource: ResourceType) -> str:
    """``api/v1`` or ``apis/GROUP/VERSION``: a group version's key in ``/openapi/v3``."""
    if resource.group:
        return f"apis/{resource.group}/{resource.version}"
    return f"api/{resource.version}"


def _schema_name(resource: ResourceType) -> str:
    if not resource.group:
        return f"io.k8s.api.core.{resource.version}.{resource.kind}"
    reversed_group = ".".join(reversed(resource.group.split(".")))
    return f"{reversed_group}.{resource.version}.{resource.kind}"


def _gvk(resource: ResourceType) -> dict[str, str]:
    return {"group": resource.group, "version": resource.version, "kind": resource.kind}


def _parameters(*names: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True},
         "description": f"the {name} query parameter"}
        for name in names
    ]  # fmt: skip


def _path_parameter(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "uniqueItems": True}}  # fmt: skip


def _operation(resource: ResourceType, action: str, verb: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(resource)}"}
    operation: dict[str, Any] = {
        "operationId": f"{verb}{resource.kind}",
        "responses": {"200": {"description": "OK",
                              "content": {"application/json": {"schema": ref}}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(resource),
    }  # fmt: skip
    if action in ("post", "put", "patch"):
        operation["parameters"] = _parameters(*_QUERY)
        types = _PATCH_TYPES if action == "patch" else ("application/json",)
        schema = {"type": "object"} if action == "patch" else ref
        operation["requestBody"] = {
            "content": {media: {"schema": schema} for media in types},
            "required": True,
        }
    return operation


def _paths(resource: ResourceType) -> dict[str, Any]:
    base = "/" + _gv_path(resource)
    scope = f"{base}/namespaces/{{namespace}}" if resource.namespaced else base
    collection = f"{scope}/{resource.plural}"
    item = f"{collection}/{{name}}"
    path_params = [_path_parameter("name")]
    if resource.namespaced:
        path_params.append(_path_parameter("namespace"))
    paths: dict[str, Any] = {
        collection: {
            "get": _operation(resource, "list", "list"),
            "post": _operation(resource, "post", "create"),
            "delete": _operation(resource, "deletecollection", "deleteCollection"),
            "parameters": path_params[1:],
        },
        item: {
            "get": _operation(resource, "get", "read"),
            "put": _operation(resource, "put", "replace"),
            "patch": _operation(resource, "patch", "patch"),
            "delete": _operation(resource, "delete", "delete"),
            "parameters": path_params,
        },
    }
    if resource.namespaced:
        paths[f"{base}/{resource.plural}"] = {"get": _operation(resource, "list", "listAll")}
    if resource.status_subresource:
        paths[f"{item}/status"] = {
            "get": _operation(resource, "get", "readStatus"),
            "put": _operation(resource, "put", "replaceStatus"),
            "patch": _operation(resource, "patch", "patchStatus"),
            "parameters": path_params,
        }
    return paths


def _schema(resource: ResourceType) -> dict[str, Any]:
    return {
        "description": f"{resource.kind}, as the simulator stores it (any members are kept).",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [_gvk(resource)],
    }


@functools.cache
def _documents() -> dict[str, bytes]:
    """Every group version's document, by its path under ``/openapi/v3/``."""
    grouped: dict[str, list[ResourceType]] = {}
    for resource in RESOURCES:
        grouped.setdefault(_gv_path(resource), []).append(resource)
    info = {"title": "Kubernetes", "version": version_document()["gitVersion"]}
    docs = {}
    for path, resources in grouped.items():
        doc = {
            "openapi": "3.0.0",
            "info": info,
            "paths": {k: v for r in resources for k, v in _paths(r).items()},
            "components": {"schemas": {_schema_name(r): _schema(r) for r in resources}},
        }
        docs[path] = orjson.dumps(doc)
    return docs


def _openapi_v3(segs: list[str]) -> bytes | None:
    """The document a GET of ``segs`` (``openapi``, ``v3``, ...) asks for, or ``None``."""
    docs = _documents()
    if len(segs) == 2:
        paths = {}
        for path, body in docs.items():
            digest = hashlib.sha512(body).hexdigest().upper()
            paths[path] = {"serverRelativeURL": f"/{_PREFIX}/{path}?hash={digest}"}
        return orjson.dumps({"paths": paths})
    return docs.get("/".join(segs[2:]))


def _varint(number: int) -> bytes:
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2: a string or an embedded message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


@functools.cache
def _openapi_v2(protobuf: bool) -> bytes:
    """The v2 document: Swagger 2.0, this server's title and version, no paths and no type
    definitions; in protobuf, gnostic's ``openapi.v2.Document`` (``swagger`` is field 1,
    ``info`` 2 with its ``title`` 1 and ``version`` 2, ``paths`` 8), which kubectl reads."""
    title, version = "Kubernetes", version_document()["gitVersion"]
    if not protobuf:
        return orjson.dumps(
            {"swagger": "2.0", "info": {"title": title, "version": version}, "paths": {}}
        )
    info = _field(1, title.encode()) + _field(2, version.encode())
    return _field(1, b"2.0") + _field(2, info) + _field(8, b"")


def openapi(segs: list[str], accept: str) -> tuple[bytes, str] | None:
    """The body and content type of the document a GET of ``segs`` asks for (``accept``: its
    Accept header), or ``None`` when it names none."""
    if segs == ["openapi", "v2"]:
        protobuf = "proto-openapi.spec.v2" in accept
        return _openapi_v2(protobuf), _V2_PROTOBUF if protobuf else "application/json"
    if segs[:2] != _PREFIX.split("/"):
        return None
    body = _openapi_v3(segs)
    return None if body is None else (body, "application/json")
