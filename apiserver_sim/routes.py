"""What a request's path names: discovery documents, or a resource (maybe in a namespace), an
object of it, a subresource, and whether it is a watch; anything else is a 404 NotFound Status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apiserver_sim.resources import (
    ResourceType,
    api_group_document,
    api_group_list_document,
    api_resource_list_document,
    api_versions_document,
    lookup_path,
    version_document,
)
from apiserver_sim.status import ApiError

__all__ = ["TRUE", "NotFoundPath", "Route", "discovery", "parse_route"]

TRUE = ("true", "1")
"""The query values that mean a boolean flag is set."""


class NotFoundPath(ApiError):
    def __init__(self) -> None:
        super().__init__(404, "NotFound", "the server could not find the requested resource")


@dataclass(frozen=True, slots=True)
class Route:
    """What a request's path names: a resource, maybe a namespace, an object, a subresource."""

    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool

    def key(self) -> str:
        assert self.name is not None
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def discovery(segs: list[str], address: str) -> Any:
    """The discovery document a GET of ``segs`` asks for (``None``: not a discovery path);
    ``address`` (``host:port``) is where clients reach this server."""
    if segs == ["version"]:
        return version_document()
    if segs == ["api"]:
        return api_versions_document(address)
    if segs == ["apis"]:
        return api_group_list_document()
    if len(segs) == 2 and segs[0] == "api":
        return api_resource_list_document("", segs[1]) or _raise(NotFoundPath())
    if len(segs) == 2 and segs[0] == "apis":
        return api_group_document(segs[1]) or _raise(NotFoundPath())
    if len(segs) == 3 and segs[0] == "apis":
        return api_resource_list_document(segs[1], segs[2]) or _raise(NotFoundPath())
    return None


def parse_route(segs: list[str], query: dict[str, str]) -> Route:
    if len(segs) >= 3 and segs[0] == "api":
        group, version, rest = "", segs[1], segs[2:]
    elif len(segs) >= 4 and segs[0] == "apis":
        group, version, rest = segs[1], segs[2], segs[3:]
    else:
        raise NotFoundPath()
    watch = query.get("watch", "") in TRUE
    if rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        inner = lookup_path(group, version, rest[2])
        if inner is not None and inner.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise NotFoundPath()
    resource = lookup_path(group, version, rest[0])
    if resource is None:
        raise NotFoundPath()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if not resource.namespaced and namespace is not None:
        raise NotFoundPath()
    if resource.namespaced and namespace is None and name is not None:
        raise NotFoundPath()
    return Route(resource, namespace, name, sub, watch)


def _raise(error: ApiError) -> Any:
    raise error
