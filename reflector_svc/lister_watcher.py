"""The ListerWatcher facade: LIST pages and WATCH streams of one resolved resource.

What the reflector's :class:`~reflector_svc.reflector.ListerWatcher` protocol asks for, over
the real API: the query of each request, sent by :mod:`reflector_svc.transport`, pages parsed
by :mod:`reflector_svc.pager`, watches read by :mod:`reflector_svc.watch_stream` and decoded by
:mod:`reflector_svc.watch_decoder`; every failure a typed error of
:mod:`reflector_svc.api_errors`.
"""

from __future__ import annotations

import urllib3
from kubernetes.client import ApiClient

from reflector_svc.pager import list_query, parse_list_page
from reflector_svc.resources import ResolvedResource
from reflector_svc.transport import (
    DEFAULT_CONNECT_TIMEOUT,
    raise_for_status,
    read_all,
    request_timeout,
    send,
)
from reflector_svc.watch_decoder import DEFAULT_MAX_LINE_BYTES, WatchDecoder
from reflector_svc.watch_events import ListPage
from reflector_svc.watch_stream import DEFAULT_READ_SIZE, WatchStream

__all__ = ["KubeSource"]


class KubeSource:
    """LIST pages and WATCH streams of one resolved resource, raw and typed-error."""

    def __init__(
        self,
        api_client: ApiClient,
        resolved: ResolvedResource,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        read_size: int = DEFAULT_READ_SIZE,
    ) -> None:
        if max_line_bytes < 1024:
            raise ValueError(f"max_line_bytes must be >= 1024, got {max_line_bytes}")
        if read_size < 1024:
            raise ValueError(f"read_size must be >= 1024, got {read_size}")
        self.api_client = api_client
        self.resolved = resolved
        self.connect_timeout = connect_timeout
        self.max_line_bytes = max_line_bytes
        self.read_size = read_size
        spec = resolved.spec
        self._selectors: list[tuple[str, str]] = []
        if spec.label_selector:
            self._selectors.append(("labelSelector", spec.label_selector))
        if spec.field_selector:
            self._selectors.append(("fieldSelector", spec.field_selector))

    def list_page(
        self,
        *,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
        timeout: float = 60.0,
    ) -> ListPage:
        """One LIST request (:func:`~reflector_svc.pager.list_query`: with ``continue_token``
        the resourceVersion and its match are not sent).

        ``timeout`` bounds the connect and each read of the response. Raises
        :class:`ResourceExpiredError` (``continue_expired`` set for a continue token),
        :class:`TooLargeResourceVersionError`, :class:`TooManyRequestsError`,
        :class:`ApiStatusError`, :class:`ApiUnavailableError`, :class:`MalformedResponseError`.
        """
        query = list_query(
            self._selectors,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            limit=limit,
            continue_token=continue_token,
        )
        path = self.resolved.list_path
        resp = send(self.api_client, path, query, request_timeout(self.connect_timeout, timeout))
        raise_for_status(resp, continue_requested=bool(continue_token))
        resolved = self.resolved
        return parse_list_page(
            path, read_all(resp, path), kind=resolved.kind, api_version=resolved.api_version
        )

    def watch(
        self,
        *,
        resource_version: str | None,
        timeout_seconds: int,
        allow_bookmarks: bool = True,
        send_initial_events: bool = False,
        inactivity_timeout: float,
    ) -> WatchStream:
        """A WATCH from ``resource_version`` (``None``: the server starts with synthetic ADDED
        events for the current state), ended by the server after ``timeout_seconds``.

        ``send_initial_events`` makes it a watch-list (``sendInitialEvents=true`` with
        ``resourceVersionMatch=NotOlderThan``; bookmarks are then required and forced on).
        ``inactivity_timeout`` is the socket read timeout: no bytes for that long raises
        :class:`WatchInactiveError`; a line that is not a usable event ends it with
        :class:`MalformedWatchEventError`. Nothing is sent until the stream is opened.
        """
        if timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0, got {timeout_seconds}")
        if inactivity_timeout <= 0:
            raise ValueError(f"inactivity_timeout must be > 0, got {inactivity_timeout}")
        query = [*self._selectors, ("watch", "true")]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if send_initial_events:
            query.append(("sendInitialEvents", "true"))
            query.append(("resourceVersionMatch", "NotOlderThan"))
            allow_bookmarks = True
        if allow_bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        query.append(("timeoutSeconds", str(int(timeout_seconds))))
        decoder = WatchDecoder(self.max_line_bytes, watch_list=send_initial_events)
        timeout = urllib3.Timeout(
            connect=min(self.connect_timeout, inactivity_timeout), read=inactivity_timeout
        )
        return WatchStream(
            self.api_client,
            self.resolved.list_path,
            query,
            decoder=decoder,
            timeout=timeout,
            read_size=self.read_size,
        )
