"""LIST responses: the snapshot a page shows ("Semantics for get and list"), continue tokens,
and the page as bytes; and the request parameters LIST shares with WATCH (selectors,
resourceVersions, waiting out a "too large" one).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from apiserver_sim.resources import ResourceType
from apiserver_sim.routes import Route
from apiserver_sim.selectors import FieldSelector, LabelSelector, parse_selectors
from apiserver_sim.settings import SimulatorSettings
from apiserver_sim.state import ClusterState
from apiserver_sim.status import (
    bad_request,
    expired,
    invalid,
    too_large_resource_version,
)

__all__ = ["list_body", "parse_rv", "selectors", "wait_not_too_large"]

_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def _encode_continue(rv: int, key: str, returned: int) -> str:
    doc = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": key, "n": returned})
    return base64.urlsafe_b64encode(doc).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str, int]:
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if doc.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown version")
        return int(doc["rv"]), str(doc["start"]), int(doc.get("n", 0))
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise bad_request(f"invalid continue token: {exc}") from None


def parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value


def selectors(resource: ResourceType, query: dict[str, str]) -> tuple[LabelSelector, FieldSelector]:
    return parse_selectors(resource, query.get("labelSelector"), query.get("fieldSelector"))


def wait_not_too_large(state: ClusterState, settings: SimulatorSettings, rv: int) -> None:
    if rv <= state.resource_version:
        return
    if not state.wait_for_rv(rv, settings.too_large_wait):
        raise too_large_resource_version(rv, state.resource_version)


def list_body(
    state: ClusterState, settings: SimulatorSettings, route: Route, query: dict[str, str]
) -> bytes:
    """The response to a LIST (one page of it)."""
    resource = route.resource
    labels, fields = selectors(resource, query)
    try:
        limit = max(0, int(query.get("limit") or 0))
    except ValueError:
        raise bad_request(f"invalid limit {query.get('limit')!r}") from None
    token = query.get("continue") or ""
    rv_text = query.get("resourceVersion") or ""
    match = query.get("resourceVersionMatch") or ""
    after: str | None = None
    returned = 0
    snapshot: int | None
    if token:
        if (rv_text and rv_text != "0") or match:
            raise bad_request("specifying resource version is not allowed when using continue")
        snapshot, after, returned = _decode_continue(token)
        if snapshot == 0:  # an "inconsistent" token: continue on the newest state
            snapshot = None
        elif snapshot < state.compacted_rv:
            fresh = _encode_continue(0, after, returned)
            raise expired(_CONTINUE_EXPIRED, continue_token=fresh)
    else:
        snapshot = _list_snapshot(state, settings, resource, rv_text, match=match, limit=limit)
    page = state.list_page(
        resource,
        route.namespace,
        snapshot_rv=snapshot,
        after_key=after,
        limit=limit,
        labels=labels,
        fields=fields,
        returned_before=returned,
    )
    meta: dict[str, Any] = {"resourceVersion": str(page.rv)}
    if page.more and page.items:
        meta["continue"] = _encode_continue(
            page.rv if snapshot is not None or not token else 0,
            page.items[-1].key,
            returned + len(page.items),
        )
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
    head = orjson.dumps(
        {"kind": resource.list_kind, "apiVersion": resource.api_version, "metadata": meta}
    )
    return b"".join((head[:-1], b',"items":[', b",".join(o.raw for o in page.items), b"]}"))


def _list_snapshot(
    state: ClusterState,
    settings: SimulatorSettings,
    resource: ResourceType,
    rv_text: str,
    *,
    match: str,
    limit: int,
) -> int | None:
    """Which state a first page shows, per "Semantics for get and list" (None: newest)."""
    if match not in ("", "Exact", "NotOlderThan"):
        raise invalid(resource.list_kind, "", f'resourceVersionMatch: Unsupported value: "{match}"')
    if match and not rv_text:
        raise invalid(
            resource.list_kind,
            "",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided",
        )
    if not rv_text or rv_text == "0":
        if match == "Exact":
            raise invalid(
                resource.list_kind,
                "",
                'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden '
                'for resourceVersion "0"',
            )
        return None
    rv = parse_rv(rv_text)
    wait_not_too_large(state, settings, rv)
    exact = match == "Exact" or (not match and limit > 0)
    if not exact:
        return None
    compacted = state.compacted_rv
    if rv < compacted:
        raise expired(f"too old resource version: {rv} ({compacted})")
    return rv
