"""Resource ids and resource specs: the one rule every informer-bus tool checks a resource with.

A *spec* is what the reflector is configured with, kubectl-style (``pods``,
``deployments.v1.apps``, ``pods@shop?labelSelector=app%3Dweb``); its *resource id*
(``plural[.group][@namespace]``) names the resource in every Redis key. The reflector, the
processor, ``status`` and ``subscribe`` all check names here, so a name one of them refuses is
refused by all of them with the same reason, and a name one accepts the others accept too: a
processor can no longer wait for ``x!!bogus``, which no reflector could ever publish.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

from common.shard_routing import ShardKeyChoice

__all__ = [
    "ID_SYNTAX",
    "SPEC_SYNTAX",
    "ResourceSpec",
    "check_resource_id",
    "likely_meant",
    "resource_id_from",
    "word_forms",
]

SPEC_SYNTAX: Final = (
    "PLURAL[.VERSION][.GROUP][@NAMESPACE][?labelSelector=...&fieldSelector=...&shardKey=...] "
    "(e.g. pods, pods.v1, deployments.v1.apps, widgets.example.com@shop, "
    "pods@shop?labelSelector=app%3Dweb, configmaps?shardKey=owner)"
)
"""The reflector's ``--resource`` syntax, quoted in every parse error of a spec."""

ID_SYNTAX: Final = (
    "PLURAL[.GROUP][@NAMESPACE], the reflector's --resource without version or selectors "
    "(e.g. pods, deployments.apps, widgets.example.com@shop)"
)
"""The resource id syntax, quoted in every parse error of an id."""

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_PLURAL_RE = re.compile(_LABEL)
_NAMESPACE_RE = re.compile(_LABEL)
_GROUP_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# Kubernetes API versions follow this convention (v1, v2beta1, v1alpha3); it is what tells the
# version segment of ``deployments.v1.apps`` apart from the first label of a group.
_VERSION_RE = re.compile(r"v[1-9][0-9]*(?:(?:alpha|beta)[1-9][0-9]*)?")
_QUERY_KEYS = ("labelSelector", "fieldSelector", "shardKey")
_MAX_NAMESPACE = 63
_MAX_GROUP = 253


_BY_KEY: Final = ShardKeyChoice()


class _Invalid(ValueError):
    """Why a text is no spec, without the syntax hint (each caller adds its own)."""


@dataclass(frozen=True)
class ResourceSpec:
    """One resource to reflect, as configured (before discovery).

    ``version`` is ``None`` when the preferred version must be found by discovery. ``group`` is
    ``""`` for the core group (pods, configmaps, ...). ``namespace`` is ``None`` to watch all
    namespaces.
    """

    plural: str
    version: str | None = None
    group: str = ""
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    shard_key: ShardKeyChoice = _BY_KEY
    """What the resource's objects are sharded by (``?shardKey=owner``; default: their key)."""

    @classmethod
    def parse(cls, text: str) -> ResourceSpec:
        """Parse kubectl-like text; ``ValueError`` (one line, quoting the syntax) when invalid."""
        try:
            return cls._parse(text)
        except _Invalid as why:
            raise ValueError(
                f"invalid resource {str(text)!r}: {why}; expected {SPEC_SYNTAX}"
            ) from None

    @classmethod
    def _parse(cls, text: str) -> ResourceSpec:
        if not isinstance(text, str) or not text or text != text.strip():
            raise _Invalid("empty or surrounded by whitespace")
        head, sep, query = text.partition("?")
        if sep and not query:
            raise _Invalid("empty query after '?'")
        resource, at, namespace = head.partition("@")
        if at:
            if not namespace:
                raise _Invalid("empty namespace after '@'")
            if len(namespace) > _MAX_NAMESPACE or not _NAMESPACE_RE.fullmatch(namespace):
                raise _Invalid(f"namespace {namespace!r} is not a DNS label")
        parts = resource.split(".")
        plural = parts[0]
        if not _PLURAL_RE.fullmatch(plural):
            raise _Invalid(f"resource name {plural!r} is not a lowercase DNS label")
        version: str | None = None
        rest = parts[1:]
        if rest and _VERSION_RE.fullmatch(rest[0]):
            version, rest = rest[0], rest[1:]
        group = ".".join(rest)
        if rest and (len(group) > _MAX_GROUP or not _GROUP_RE.fullmatch(group)):
            raise _Invalid(f"API group {group!r} is not a DNS subdomain")
        selectors = _parse_query(query) if sep else {}
        try:
            shard_key = ShardKeyChoice.parse(selectors.get("shardKey", "key"))
        except ValueError as why:
            raise _Invalid(str(why)) from None
        return cls(
            plural=plural,
            version=version,
            group=group,
            namespace=namespace if at else None,
            label_selector=selectors.get("labelSelector"),
            field_selector=selectors.get("fieldSelector"),
            shard_key=shard_key,
        )

    @property
    def resource_id(self) -> str:
        """``plural[.group][@namespace]``: the name of this resource in Redis keys.

        The version is left out on purpose: upgrading ``v1beta1`` to ``v1`` serves the same
        objects, so it must keep the same streams and checkpoints. Parsing guarantees the id
        holds no ``{``, ``}`` or whitespace (it sits inside a Redis Cluster hash tag).
        """
        rid = f"{self.plural}.{self.group}" if self.group else self.plural
        return f"{rid}@{self.namespace}" if self.namespace else rid

    def __str__(self) -> str:
        parts = [self.plural]
        if self.version:
            parts.append(self.version)
        if self.group:
            parts.append(self.group)
        text = ".".join(parts)
        if self.namespace:
            text += f"@{self.namespace}"
        query = [
            f"{key}={value}"
            for key, value in (
                ("labelSelector", self.label_selector),
                ("fieldSelector", self.field_selector),
                ("shardKey", None if self.shard_key.by_object_key else str(self.shard_key)),
            )
            if value
        ]
        return text + ("?" + "&".join(query) if query else "")


def _parse_query(query: str) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise _Invalid(f"malformed query {query!r}") from None
    found: dict[str, str] = {}
    for key, value in pairs:
        if key not in _QUERY_KEYS:
            raise _Invalid(f"unknown query parameter {key!r} (only {', '.join(_QUERY_KEYS)})")
        if key in found:
            raise _Invalid(f"{key} given twice")
        if not value.strip():
            raise _Invalid(f"empty {key}")
        if any(ch in value for ch in "\r\n\0"):
            raise _Invalid(f"{key} contains a control character")
        found[key] = value
    return found


def check_resource_id(text: str) -> str:
    """``text`` when it is a resource id exactly as a reflector names its keys; ``ValueError``
    (one line, quoting the id syntax) otherwise, e.g. for ``x!!bogus``, or for a spec with a
    version or selectors (``deployments.v1.apps``), whose id the message gives.

    For services, which must name their keys exactly: a tool that reads may accept a spec
    (:func:`resource_id_from`)."""
    try:
        spec = ResourceSpec._parse(text)
    except _Invalid as why:
        raise ValueError(f"invalid resource {str(text)!r}: {why}; expected {ID_SYNTAX}") from None
    if spec.resource_id != text:
        raise ValueError(
            f"invalid resource {text!r}: a resource id has no version or selectors; "
            f"the id of this spec is {spec.resource_id!r}"
        )
    return text


def resource_id_from(text: str) -> str:
    """The resource id of ``text``, an id or a reflector ``--resource`` spec (pasted as is:
    ``deployments.v1.apps`` -> ``deployments.apps``); ``ValueError`` (one line) when it is
    neither."""
    return ResourceSpec.parse(text).resource_id


def _plural_of(resource: str) -> str:
    """``widgets`` of ``widgets.example.com@shop``."""
    return resource.partition("@")[0].partition(".")[0]


def word_forms(resource: str) -> list[str]:
    """``resource`` with its plural's singular or plural instead (``pod`` <-> ``pods``,
    ``ingress`` <-> ``ingresses``), group and namespace kept: the ids a missing one is most
    often a slip of, tried one by one where nothing can list what exists."""
    plural = _plural_of(resource)
    rest = resource[len(plural) :]
    stems = {plural + "s", plural + "es", plural.removesuffix("s"), plural.removesuffix("es")}
    return sorted(f"{stem}{rest}" for stem in stems if stem and stem != plural)


def likely_meant(wanted: str, known: Iterable[str]) -> list[str]:
    """The names of ``known`` that ``wanted`` (a resource id, or a plural) is likely a slip of,
    best first: the same plural in another API group or namespace (``widgets`` for
    ``widgets.example.com``), its singular or plural (``pod`` for ``pods``), then names spelt
    alike. The one rule behind every "did you mean" about a resource: the reflector's (names
    the API server serves) and the readers' (ids published in Redis)."""
    candidates = [name for name in dict.fromkeys(known) if name != wanted]
    plural = _plural_of(wanted)
    forms = {_plural_of(form) for form in word_forms(plural)}
    same = [name for name in candidates if _plural_of(name) == plural]
    neighbours = [name for name in candidates if _plural_of(name) in forms]
    alike = difflib.get_close_matches(wanted, candidates, n=3, cutoff=0.6)
    return list(dict.fromkeys([*same, *neighbours, *alike]))
