"""The list pager: a consistent LIST of any size, one page at a time (client-go's
``tools/pager``).

A LIST is asked ``limit`` objects at a time; each answer carries a ``continue`` token that pins
the snapshot of the first page, so the pages together are one consistent list at the first
page's resourceVersion. Objects stream through (the reflector diffs page by page) instead of
being held all at once. When a token expires mid-list (410, the snapshot was compacted) the
pages seen so far cannot be completed: :class:`ContinueExpiredError` tells the caller, which
redoes the LIST unpaginated at the original RV (reference 1.6) and diffs it from scratch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import orjson

from reflector_svc.api_errors import MalformedResponseError, ResourceExpiredError
from reflector_svc.watch_events import ListPage

__all__ = [
    "ContinueExpiredError",
    "ListInterruptedError",
    "follow_pages",
    "list_query",
    "parse_list_page",
]


class ContinueExpiredError(Exception):
    """A continue token expired in the middle of a paginated LIST (reference 1.6)."""


class ListInterruptedError(Exception):
    """Stop was requested in the middle of a paginated LIST: the rest is not fetched (a long
    list is never finished first on shutdown or step-down)."""


def list_query(
    selectors: Sequence[tuple[str, str]],
    *,
    resource_version: str | None,
    resource_version_match: str | None,
    limit: int,
    continue_token: str | None,
) -> list[tuple[str, str]]:
    """The query of one LIST page. With ``continue_token`` the resourceVersion and its match
    are not sent (the token pins the snapshot; the server rejects both together)."""
    query = list(selectors)
    if limit > 0:
        query.append(("limit", str(limit)))
    if continue_token:
        query.append(("continue", continue_token))
    else:
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if resource_version_match:
            query.append(("resourceVersionMatch", resource_version_match))
    return query


def parse_list_page(path: str, body: bytes, *, kind: str, api_version: str) -> ListPage:
    """One LIST answer's body as a :class:`ListPage`, ``kind``/``apiVersion`` stamped on the
    items (LIST items omit them). Anything but the promised shape raises
    :class:`MalformedResponseError`: a list the reflector cannot trust is relisted later."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponseError(f"LIST {path}: body is not JSON: {exc}") from None
    if type(doc) is not dict:
        raise MalformedResponseError(f"LIST {path}: body is not a JSON object")
    items = doc.get("items") or []
    meta = doc.get("metadata")
    if type(items) is not list or type(meta) is not dict:
        raise MalformedResponseError(f"LIST {path}: no items list or no metadata")
    rv = meta.get("resourceVersion")
    if not isinstance(rv, str) or not rv:
        raise MalformedResponseError(f"LIST {path}: no metadata.resourceVersion")
    for item in items:
        if type(item) is not dict:
            raise MalformedResponseError(f"LIST {path}: an item is not a JSON object")
        if "kind" not in item:
            item["kind"] = kind
        if "apiVersion" not in item:
            item["apiVersion"] = api_version
    remaining = meta.get("remainingItemCount")
    return ListPage(
        items=items,
        resource_version=rv,
        continue_token=meta.get("continue") or None,
        remaining_item_count=remaining if isinstance(remaining, int) else None,
    )


def follow_pages(
    first: ListPage,
    next_page: Callable[[str], ListPage],
    *,
    stopped: Callable[[], bool],
) -> Iterator[ListPage]:
    """``first``, then every page its continue tokens lead to (``next_page(token)``).

    Raises :class:`ContinueExpiredError` when a token expired, :class:`ListInterruptedError`
    when ``stopped()`` before a page is fetched.
    """
    yield first
    token = first.continue_token
    while token:
        if stopped():
            raise ListInterruptedError
        try:
            page = next_page(token)
        except ResourceExpiredError as exc:
            raise ContinueExpiredError(str(exc)) from exc
        yield page
        token = page.continue_token
