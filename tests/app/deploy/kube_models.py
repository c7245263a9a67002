"""Manifests checked against the Kubernetes API's own types: the ``kubernetes`` client's models
(generated from the API's OpenAPI schema) for the built-in kinds, offline.

The models drop unknown keys without a word, so :func:`unknown_fields` walks the document
against each model's attribute map: a misspelt ``readinesProbe`` would deserialise fine and
simply be missing.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes.client

__all__ = ["deserialise", "model_name", "unknown_fields"]


def model_name(document: dict[str, Any]) -> str:
    """``apps/v1`` ``Deployment`` -> ``V1Deployment``: the client's model for the document."""
    version = str(document["apiVersion"]).rsplit("/", 1)[-1]
    return f"{version[0].upper()}{version[1:]}{document['kind']}"


def deserialise(data: Any, type_name: str) -> Any:
    """``data`` as the client's model ``type_name`` (types and required fields checked)."""
    with kubernetes.client.ApiClient() as client:
        return client._ApiClient__deserialize(data, type_name)


def unknown_fields(data: Any, type_name: str, where: str = "") -> list[str]:
    """Every key of ``data`` that is no field of ``type_name`` (recursively)."""
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
