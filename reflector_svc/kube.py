"""The reflector's only door to the Kubernetes API: client loading, raw LIST pages, raw WATCH
streams, and the typed errors the reflector's ListAndWatch loop branches on.

Why raw: the official client turns every object into model instances (~1 ms per Pod) and its
``Watch`` decodes every line twice. We keep what it does well (kubeconfig/in-cluster loading,
auth headers and token refresh, TLS settings, the urllib3 connection pool) and read the bytes
ourselves: ``orjson`` on the LIST body and on each watch line, objects stay plain dicts.

Why typed errors: client-go's reflector acts differently on a 410 (relist), a "too large
resource version" (relist with RV ""), a 422 to a watch-list request (fall back to LIST), a 429
(back off) and a refused connection (back off, re-watch). Each is classified here, once, from
the ``Status`` body and the HTTP status, so the loop never parses messages.

Why a bad watch line ends the watch: a line that is not a usable event (not JSON, not an
object, no object, an unknown type, over the size limit) may have been a change. Skipping it
would let the next event's resourceVersion claim it was seen; ending the stream right after
the events before it (:class:`MalformedWatchEventError`, as client-go's decoder ends a watch
with an error) lets the reflector re-watch from the last event it processed, so the server
sends that position again and nothing is lost.

Why no automatic retries: urllib3 (and the client's retry options) would retry 429s with
Retry-After and refused connections silently; the reflector must see them to back off with
jitter and to count them. Every request here passes ``retries=False``.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import config as _kube_config
from kubernetes.client import ApiClient, Configuration
from urllib3.exceptions import HTTPError, ReadTimeoutError

from common.keys import Obj

if TYPE_CHECKING:
    from reflector_svc.resources import ResolvedResource

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_READ_SIZE",
    "INITIAL_EVENTS_END",
    "ApiStatusError",
    "ApiUnavailableError",
    "KubeError",
    "KubeSource",
    "ListPage",
    "MalformedResponseError",
    "MalformedWatchEventError",
    "OverlongLine",
    "ResourceExpiredError",
    "SourceConfigError",
    "TooLargeResourceVersionError",
    "TooManyRequestsError",
    "UnknownResourceError",
    "WatchEvent",
    "WatchInactiveError",
    "WatchListUnsupportedError",
    "WatchStream",
    "error_from_status",
    "get_json",
    "load_api_client",
]

log = logging.getLogger(__name__)

kube_config: Any = _kube_config  # the loaders are untyped; one Any here beats ignores below

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to establish a TCP (and TLS) connection before :class:`ApiUnavailableError`."""
DEFAULT_MAX_LINE_BYTES = 16 << 20
"""Longest watch line accepted (the apiserver's own request limit is ~3 MiB per object)."""
DEFAULT_READ_SIZE = 64 << 10
"""Bytes asked of the socket per read of a watch stream; each read becomes one batch.

Measured on 3.5 KB pods: 16 KiB reads parse ~70k events/s, 64 KiB ~40k, 256 KiB ~26k, because
a bigger batch keeps more freshly parsed objects alive at once (cache misses, and the cyclic GC
traverses them: ``gc.freeze()`` plus a higher gen-0 threshold brings 64 KiB to ~59k). 64 KiB
(~19 pods) is the compromise with the publisher, which pays one Redis round trip per batch.
"""
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The BOOKMARK annotation that ends the initial events of a watch-list (KEP-3157)."""

_USER_AGENT = "informer-bus-reflector/0.1"
_ERROR_BODY_LIMIT = 1 << 20
_PREFIX_BYTES = 200
_EVENT_TYPES = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))


# ---------------------------------------------------------------------------------- errors


class KubeError(Exception):
    """Base of every error this module raises: the reflector catches this, nothing broader."""


class SourceConfigError(KubeError):
    """No usable connection settings (bad kubeconfig path or context, not in a cluster, bad
    URL). Fatal at startup: retrying cannot fix a configuration."""


class UnknownResourceError(KubeError):
    """Discovery found no such group, version or resource (or it cannot be listed/watched)."""


class ApiUnavailableError(KubeError):
    """The API server could not be reached or stopped answering (connection refused or reset,
    connect or read timeout, TLS failure): back off and try again."""


class WatchInactiveError(ApiUnavailableError):
    """A watch delivered no bytes at all (not even a bookmark) for its inactivity timeout.

    A subclass of :class:`ApiUnavailableError` because the cure is the same (reconnect), but
    distinct so that silent hangs are counted and logged as such.
    """


class MalformedResponseError(KubeError):
    """A 2xx response whose body is not the JSON the API promises (e.g. a LIST without
    ``metadata.resourceVersion``): the reflector cannot trust it and relists later."""


class MalformedWatchEventError(KubeError):
    """A watch line that is not a usable event. It ends the stream, after the events before
    it were delivered: resume from the last event processed (a re-watch, not a relist).

    ``reason`` is a short fixed label (``invalid_json``, ``not_an_object``, ``no_object``,
    ``unknown_type``, ``line_too_long``: safe as a metric label), ``detail`` the parser's
    words, ``excerpt`` the line's first bytes (at most 200) and ``line_bytes`` its length
    (``None`` for an over-long line, whose end was never held).
    """

    def __init__(self, reason: str, detail: str, line: bytes, *, whole: bool = True) -> None:
        self.reason = reason
        self.detail = detail
        self.excerpt = bytes(line[:_PREFIX_BYTES])
        self.line_bytes: int | None = len(line) if whole else None
        cut = "" if whole and len(line) <= _PREFIX_BYTES else "..."
        size = f"{self.line_bytes} bytes" if self.line_bytes is not None else "over the limit"
        super().__init__(f"{detail}: {self.excerpt!r}{cut} ({size})")


class ApiStatusError(KubeError):
    """The API server answered with an error ``Status`` (or a non-2xx HTTP status).

    ``status`` is the Status ``code`` (the HTTP status when the body has none), ``reason`` the
    machine-readable Status reason (``NotFound``, ``Expired``, ...), ``details`` the raw
    ``details`` object when there was one.
    """

    def __init__(
        self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}


class ResourceExpiredError(ApiStatusError):
    """410 Gone/Expired, on a LIST or inside a WATCH: the requested resourceVersion (or the
    snapshot behind a continue token) has been compacted away.

    ``continue_expired`` tells the two cases apart: an expired continue token (reference 1.6:
    redo the LIST unpaginated at the original RV) versus "too old resource version" (1.7/1.10:
    relist). ``continue_token`` is the fresh, inconsistent token the server may offer.
    """

    def __init__(
        self,
        message: str,
        *,
        continue_expired: bool = False,
        continue_token: str | None = None,
        status: int = 410,
        reason: str = "Expired",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message, details)
        self.continue_expired = continue_expired
        self.continue_token = continue_token


class TooLargeResourceVersionError(ApiStatusError):
    """The requested resourceVersion is newer than the server has seen (504 with a
    ``ResourceVersionTooLarge`` cause): relist with resourceVersion "" (reference 1.7)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 504,
        reason: str = "Timeout",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message, details)


class WatchListUnsupportedError(ApiStatusError):
    """The server rejected ``sendInitialEvents`` (422, or 400 from some versions): fall back to
    LIST + WATCH (reference 1.13)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 422,
        reason: str = "Invalid",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message, details)


class TooManyRequestsError(ApiStatusError):
    """429: the server is shedding load. ``retry_after`` (seconds) is from the Retry-After
    header or ``details.retryAfterSeconds``, ``None`` when the server gave no hint."""

    def __init__(
        self,
        retry_after: float | None = None,
        message: str = "Too many requests, please try again later.",
        *,
        status: int = 429,
        reason: str = "TooManyRequests",
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(status, reason, message, details)
        self.retry_after = retry_after


def _retry_after(header: str | None, details: Mapping[str, Any]) -> float | None:
    if header:
        try:
            return max(0.0, float(header))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(header)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                return max(0.0, when.timestamp() - time.time())
    seconds = details.get("retryAfterSeconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return max(0.0, float(seconds))
    return None


def _has_cause(details: Mapping[str, Any], reason: str) -> bool:
    causes = details.get("causes")
    return isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason") == reason for c in causes
    )


def error_from_status(
    http_status: int,
    body: bytes | Mapping[str, Any] | None,
    *,
    retry_after: str | None = None,
    continue_requested: bool = False,
    watch_list_requested: bool = False,
) -> ApiStatusError:
    """Classify an error response (or a watch ERROR event's object) into a typed error.

    ``body`` is the raw response body or an already decoded Status. The Status ``code`` wins
    over ``http_status`` because watch ERROR events arrive inside a 200 response.
    ``continue_requested``/``watch_list_requested`` say what the request asked for, which is
    how a 410 to a continue token and a 400/422 to ``sendInitialEvents`` are recognised.
    """
    doc: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            doc = None
    if not isinstance(doc, Mapping):
        text = body[:_PREFIX_BYTES].decode("utf-8", "replace") if isinstance(body, bytes) else ""
        doc = {"message": " ".join(text.split()) or f"HTTP {http_status}"}
    code = doc.get("code")
    status = code if isinstance(code, int) and code >= 400 else http_status
    reason = str(doc.get("reason") or _http_reason(status))
    message = str(doc.get("message") or reason)
    raw_details = doc.get("details")
    details: Mapping[str, Any] = raw_details if isinstance(raw_details, Mapping) else {}
    if status == 410 or reason in ("Expired", "Gone"):
        metadata = doc.get("metadata")
        token = metadata.get("continue") if isinstance(metadata, Mapping) else None
        return ResourceExpiredError(
            message,
            continue_expired=continue_requested or "continue parameter" in message,
            continue_token=token or None,
            status=status,
            reason=reason,
            details=details,
        )
    if _has_cause(details, "ResourceVersionTooLarge") or "Too large resource version" in message:
        return TooLargeResourceVersionError(message, status=status, reason=reason, details=details)
    if watch_list_requested and status in (400, 422):
        return WatchListUnsupportedError(message, status=status, reason=reason, details=details)
    if status == 429:
        return TooManyRequestsError(
            _retry_after(retry_after, details), message, reason=reason, details=details
        )
    return ApiStatusError(status, reason, message, details)


def _http_reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return "Unknown"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# ---------------------------------------------------------------------------------- client


def load_api_client(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    url: str | None = None,
) -> Any:
    """A ``kubernetes.client.ApiClient`` with its own fresh ``Configuration`` (never the
    process-wide default, so several sources in one process cannot clobber each other).

    Typed ``Any`` on purpose: the client's methods are unannotated, so under strict mypy every
    call on a precisely typed ``ApiClient`` (even ``close()``) would be an error for callers.

    Exactly one source: ``url`` (plain, no auth: the simulator or a ``kubectl proxy``),
    ``in_cluster`` (service account), or a kubeconfig (``kubeconfig``, else ``$KUBECONFIG``,
    else ``~/.kube/config``; ``context`` picks a context, default the current one).
    Anything unusable raises :class:`SourceConfigError` with a one-line message.
    """
    if url is not None and in_cluster:
        raise SourceConfigError("choose one source: an explicit URL or in-cluster config")
    if (url is not None or in_cluster) and (kubeconfig or context):
        raise SourceConfigError(
            "kubeconfig/context cannot be combined with an explicit URL or in-cluster config"
        )
    configuration = Configuration()
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceConfigError(f"API URL {url!r} must look like http(s)://host:port")
        configuration.host = url.rstrip("/")
    elif in_cluster:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except Exception as exc:  # ConfigException, OSError: all mean "not usable here"
            raise SourceConfigError(f"in-cluster config: {_one_line(exc)}") from None
    else:
        _load_kubeconfig(configuration, kubeconfig, context)
    client = ApiClient(configuration)
    client.user_agent = _USER_AGENT
    return client


def _load_kubeconfig(configuration: Any, kubeconfig: str | None, context: str | None) -> None:
    # Resolved here, not by the loader: it reads $KUBECONFIG once, at import time.
    paths = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    existing = [p for p in paths.split(os.pathsep) if p and os.path.isfile(os.path.expanduser(p))]
    if not existing:
        raise SourceConfigError(f"kubeconfig not found: {paths}")
    where = f"kubeconfig {paths}" + (f" context {context!r}" if context else "")
    try:
        kube_config.load_kube_config(
            config_file=paths,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # ConfigException, YAML and OS errors from the loader
        raise SourceConfigError(f"{where}: {_one_line(exc)}") from None
    if not configuration.host:
        raise SourceConfigError(f"{where}: no server address")
    configuration.host = configuration.host.rstrip("/")


def _send(
    api_client: ApiClient,
    path: str,
    query: list[tuple[str, str]],
    timeout: urllib3.Timeout,
    *,
    watch: bool = False,
) -> urllib3.BaseHTTPResponse:
    """GET ``path`` through the client's pool with its auth headers; body left unread.

    ``param_serialize`` applies the client's default headers and bearer token (calling the
    token refresh hook of exec/in-cluster credentials); the pool manager carries TLS, client
    certificates and proxy settings. ``retries=False`` keeps 429s and refused connections
    visible.
    """
    try:
        _, url, headers, _, _ = api_client.param_serialize(
            "GET",
            path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
    except Exception as exc:  # a failed credential refresh is transient: retry later
        raise ApiUnavailableError(f"cannot prepare GET {path}: {_one_line(exc)}") from exc
    pool: urllib3.PoolManager = api_client.rest_client.pool_manager
    try:
        return pool.request(
            "GET", url, headers=headers, timeout=timeout, preload_content=False, retries=False
        )
    except ReadTimeoutError as exc:
        if watch:
            raise WatchInactiveError(
                f"GET {path}: no response within {timeout.read_timeout}s"
            ) from exc
        raise ApiUnavailableError(
            f"GET {path}: no response within {timeout.read_timeout}s"
        ) from exc
    except (HTTPError, OSError) as exc:
        raise ApiUnavailableError(f"GET {path}: {_one_line(exc)}") from exc


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Close a response whose connection may hold unread bytes, and give the (closed)
    connection back to the pool so its slot is not lost."""
    resp.close()
    resp.release_conn()


def _read_all(resp: urllib3.BaseHTTPResponse, path: str) -> bytes:
    try:
        data = resp.read()
    except ReadTimeoutError as exc:
        _discard(resp)
        raise ApiUnavailableError(f"GET {path}: read timed out") from exc
    except (HTTPError, OSError) as exc:
        _discard(resp)
        raise ApiUnavailableError(f"GET {path}: connection lost: {_one_line(exc)}") from exc
    resp.release_conn()
    return data


def _raise_for_status(
    resp: urllib3.BaseHTTPResponse,
    *,
    continue_requested: bool = False,
    watch_list_requested: bool = False,
) -> None:
    if 200 <= resp.status < 300:
        return
    try:
        body = resp.read(_ERROR_BODY_LIMIT)
    except (HTTPError, OSError):
        body = b""
    finally:
        _discard(resp)
    raise error_from_status(
        resp.status,
        body,
        retry_after=resp.headers.get("Retry-After"),
        continue_requested=continue_requested,
        watch_list_requested=watch_list_requested,
    )


def _timeout(connect: float, read: float) -> urllib3.Timeout:
    return urllib3.Timeout(connect=min(connect, read), read=read)


def get_json(
    api_client: ApiClient,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    timeout: float = 30.0,
) -> Any:
    """GET ``path`` and decode it with orjson (discovery documents, small reads).

    Errors are typed like every other request; a body that is not JSON raises
    :class:`MalformedResponseError`.
    """
    resp = _send(api_client, path, query or [], _timeout(DEFAULT_CONNECT_TIMEOUT, timeout))
    _raise_for_status(resp)
    data = _read_all(resp, path)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponseError(f"GET {path}: body is not JSON: {exc}") from None


# ---------------------------------------------------------------------------------- LIST


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a LIST: ``items`` as plain dicts (with ``kind``/``apiVersion`` stamped on,
    since LIST items omit them), the list ``resource_version``, the ``continue_token`` for the
    next page (``None`` on the last), and the server's ``remaining_item_count`` hint."""

    items: list[Obj]
    resource_version: str
    continue_token: str | None
    remaining_item_count: int | None


class WatchEvent(NamedTuple):
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK; ``obj`` the object.

    A NamedTuple because a watch burst creates one per event and tuples are the cheapest
    immutable record Python has.
    """

    type: str
    obj: Obj


# ---------------------------------------------------------------------------------- WATCH


class OverlongLine(bytes):
    """Stands, in a framer's output, for a line longer than the limit: only its first bytes
    (at most 200) are kept, so that it is reported where it was, in order with the others."""

    __slots__ = ()


class _LineFramer:
    """Splits a byte stream into lines without ever holding more than ``max_line`` bytes of an
    unfinished line: an over-long line comes out once, in its place, as an
    :class:`OverlongLine`, and the rest of it is skipped up to its newline."""

    __slots__ = ("_max", "_parts", "_size", "_skipping")

    def __init__(self, max_line: int) -> None:
        self._max = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False

    @property
    def pending(self) -> int:
        """Bytes of the unfinished line held right now."""
        return self._size

    def feed(self, data: bytes) -> list[bytes]:
        """Complete lines found in ``data`` (without their ``\\n``), in order."""
        pieces = data.split(b"\n")
        tail = pieces.pop()
        if pieces:
            if self._skipping:
                self._skipping = False
                pieces[0] = b""
            elif self._parts:
                self._parts.append(pieces[0])
                pieces[0] = b"".join(self._parts)
                self._parts = []
                self._size = 0
            if len(data) > self._max or len(pieces[0]) > self._max:
                limit = self._max
                pieces = [
                    OverlongLine(line[:_PREFIX_BYTES]) if len(line) > limit else line
                    for line in pieces
                ]
        if tail and not self._skipping:
            if self._size + len(tail) > self._max:
                # Too long before its end arrived: it comes out now, after the lines before it.
                start = self._parts[0] if self._parts else tail
                pieces.append(OverlongLine(start[:_PREFIX_BYTES]))
                self._parts = []
                self._size = 0
                self._skipping = True
            else:
                self._parts.append(tail)
                self._size += len(tail)
        return pieces


class WatchStream(Iterator[WatchEvent]):
    """An open (or about to open) WATCH: a context manager, an iterator of
    :class:`WatchEvent`, and (:meth:`batches`) an iterator of the lists of events that arrived
    together.

    The request is sent on :meth:`open`, ``__enter__`` or the first ``next()``, so whoever
    must stop the watch can hold the stream before anything blocks. Iteration ends when the
    server closes the stream (``timeoutSeconds`` reached, watch dropped) or :meth:`close` is
    called; it raises the typed error of an ERROR event (410 ->
    :class:`ResourceExpiredError`), :class:`MalformedWatchEventError` at the first line that is
    not a usable event (after the events before it), and :class:`WatchInactiveError` when
    nothing at all arrived for ``inactivity_timeout`` seconds. ``end_reason`` says why it
    ended: ``"server"`` (clean end of the HTTP response), ``"closed"`` (:meth:`close`),
    ``"broken"`` (connection lost mid-stream, which client-go also treats as an ordinary end:
    re-watch from the last RV).
    """

    def __init__(
        self,
        api_client: ApiClient,
        path: str,
        query: list[tuple[str, str]],
        *,
        connect_timeout: float,
        inactivity_timeout: float,
        watch_list: bool,
        max_line_bytes: int,
        read_size: int,
    ) -> None:
        self._api_client = api_client
        self.path = path
        self._query = query
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=inactivity_timeout)
        self.inactivity_timeout = inactivity_timeout
        self._watch_list = watch_list
        self._max_line = max_line_bytes
        self._read_size = read_size
        self._lock = threading.Lock()
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._opened = False
        self._closed = False
        self._reading = False
        self._released = False
        self._batch_iter: Iterator[list[WatchEvent]] = self._batches()
        self._iter: Iterator[WatchEvent] = self._events()
        self.end_reason: str | None = None
        self.bytes_read = 0

    # ------------------------------------------------------------ lifecycle

    def open(self) -> WatchStream:
        """Send the request and check its status (idempotent; a no-op after :meth:`close`).

        Raises the typed error of a non-2xx answer (:class:`WatchListUnsupportedError`,
        :class:`TooManyRequestsError`, :class:`TooLargeResourceVersionError`, ...) or
        :class:`ApiUnavailableError`. Blocking here is bounded by the connect timeout plus the
        inactivity timeout; :meth:`close` during it takes effect as soon as it returns.
        """
        with self._lock:
            if self._opened or self._closed:
                return self
            self._opened = True
        resp = _send(self._api_client, self.path, self._query, self._timeout, watch=True)
        _raise_for_status(resp, watch_list_requested=self._watch_list)
        with self._lock:
            if not self._is_closed():
                self._resp = resp
                return self
        _discard(resp)
        return self

    def close(self) -> None:
        """Stop the watch; safe from any thread, any number of times.

        When another thread is blocked reading, the socket is shut down under it (its read
        returns at once and its iteration ends quietly, releasing the connection); otherwise
        the connection is closed here.
        """
        with self._lock:
            first = not self._closed
            self._closed = True
            resp = self._resp
            if resp is None or self._released:
                return
            if self._reading:
                if first:
                    _shutdown(resp)
                return
            # Also on a later call: a close that came during a read which then returned data
            # left the release to a reader that may stop iterating without finishing (the
            # reflector does on a stop); its own close on the way out releases here.
            self._release(resp, clean=False)

    def _release(self, resp: urllib3.BaseHTTPResponse, *, clean: bool) -> None:
        """Give the connection back: reusable after a clean end, closed otherwise (unread
        bytes would corrupt the next request on it). Caller holds ``_lock``."""
        if self._released:
            return
        self._released = True
        if clean:
            resp.release_conn()
        else:
            _discard(resp)

    def __enter__(self) -> WatchStream:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (from any thread)."""
        return self._closed

    def _is_closed(self) -> bool:
        # A call, not an attribute read: another thread flips the flag, and mypy would
        # otherwise narrow it to the value seen under the lock.
        return self._closed

    # ------------------------------------------------------------ iteration

    def __iter__(self) -> Iterator[WatchEvent]:
        return self._iter

    def __next__(self) -> WatchEvent:
        return next(self._iter)

    def batches(self) -> Iterator[list[WatchEvent]]:
        """The events as they arrive: one non-empty list per network read, in order.

        What a publisher wants (one Redis round trip per arrival, however bursty) and the
        cheapest way to consume a stream. An ERROR event ends it after the batch of the
        events that preceded it. Use either this or plain iteration on one stream, not both.
        """
        return self._batch_iter

    def _events(self) -> Iterator[WatchEvent]:
        for batch in self._batch_iter:
            for event in batch:
                yield event
                if self._closed:
                    self.end_reason = "closed"
                    return

    def _batches(self) -> Iterator[list[WatchEvent]]:
        self.open()
        resp = self._resp
        if resp is None:
            self.end_reason = "closed"
            return
        clean = False
        framer = _LineFramer(self._max_line)
        try:
            while True:
                data = self._read(resp)
                if not data:
                    clean = self.end_reason == "server"
                    return
                events, error = self._parse_lines(framer.feed(data))
                if events:
                    yield events
                if self._closed:
                    self.end_reason = "closed"
                    return
                if error is not None:
                    raise error
        finally:
            with self._lock:
                self._release(resp, clean=clean and not self._closed)

    def _parse_lines(self, lines: list[bytes]) -> tuple[list[WatchEvent], KubeError | None]:
        """Events of complete lines, stopping at an ERROR event or a bad line (the error is
        returned, not raised, so the events before it are delivered first)."""
        events: list[WatchEvent] = []
        parse = self._parse
        for line in lines:
            try:
                event = parse(line)
            except (ApiStatusError, MalformedWatchEventError) as error:
                return events, error
            if event is not None:
                events.append(event)
        return events, None

    def _read(self, resp: urllib3.BaseHTTPResponse) -> bytes:
        """The next bytes, or ``b""`` when the stream ended (``end_reason`` set)."""
        with self._lock:
            if self._closed:
                self.end_reason = "closed"
                return b""
            self._reading = True
        try:
            data = resp.read1(self._read_size)
        except ReadTimeoutError as exc:
            if self._is_closed():
                self.end_reason = "closed"
                return b""
            raise WatchInactiveError(
                f"watch {self.path}: no bytes for {self.inactivity_timeout}s"
            ) from exc
        except (HTTPError, OSError, ValueError, AttributeError) as exc:
            # ValueError/AttributeError: what a read on a socket shut down by close() may
            # raise, depending on where the other thread interrupted it.
            if self._is_closed():
                self.end_reason = "closed"
            else:
                self.end_reason = "broken"
                log.debug("watch %s: connection lost: %s", self.path, _one_line(exc))
            return b""
        finally:
            with self._lock:
                self._reading = False
        if data:
            self.bytes_read += len(data)
        else:
            self.end_reason = "closed" if self._is_closed() else "server"
        return data

    def _parse(self, line: bytes) -> WatchEvent | None:
        """The event of one line; ``None`` for an empty line; raises the typed error of an
        ERROR event, or :class:`MalformedWatchEventError`."""
        if not line:
            return None
        if type(line) is OverlongLine:
            detail = f"line longer than {self._max_line} bytes"
            raise MalformedWatchEventError("line_too_long", detail, line, whole=False)
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise MalformedWatchEventError("invalid_json", f"invalid JSON: {exc}", line) from None
        if type(doc) is not dict:
            raise MalformedWatchEventError("not_an_object", "event is not a JSON object", line)
        etype = doc.get("type")
        obj = doc.get("object")
        if type(etype) is str and etype in _EVENT_TYPES:  # a list or dict is unhashable
            if type(obj) is not dict or type(obj.get("metadata")) is not dict:
                detail = f"{etype} event without an object with metadata"
                raise MalformedWatchEventError("no_object", detail, line)
            return WatchEvent(etype, obj)
        if etype == "ERROR":
            if isinstance(obj, dict):
                raise error_from_status(500, obj, watch_list_requested=self._watch_list)
            raise ApiStatusError(500, "InternalError", f"watch ERROR event without a Status: {obj}")
        detail = f"unknown event type {str(etype)[:40]!r}"
        raise MalformedWatchEventError("unknown_type", detail, line)


def _shutdown(resp: urllib3.BaseHTTPResponse) -> None:
    """Shut the response's socket down so that a read blocked in another thread returns."""
    try:
        resp.shutdown()
    except (OSError, ValueError, RuntimeError):
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------------------------- source


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
        """One LIST request. With ``continue_token`` the resourceVersion and its match are
        not sent (the token pins the snapshot; the server rejects both together).

        ``timeout`` bounds the connect and each read of the response. Raises
        :class:`ResourceExpiredError` (``continue_expired`` set for a continue token),
        :class:`TooLargeResourceVersionError`, :class:`TooManyRequestsError`,
        :class:`ApiStatusError`, :class:`ApiUnavailableError`, :class:`MalformedResponseError`.
        """
        query = list(self._selectors)
        if limit > 0:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        else:
            if resource_version:
                query.append(("resourceVersion", resource_version))
            if resource_version_match:
                query.append(("resourceVersionMatch", resource_version_match))
        path = self.resolved.list_path
        resp = _send(self.api_client, path, query, _timeout(self.connect_timeout, timeout))
        _raise_for_status(resp, continue_requested=bool(continue_token))
        return self._page(path, _read_all(resp, path))

    def _page(self, path: str, body: bytes) -> ListPage:
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
        kind = self.resolved.kind
        api_version = self.resolved.api_version
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
        return WatchStream(
            self.api_client,
            self.resolved.list_path,
            query,
            connect_timeout=min(self.connect_timeout, inactivity_timeout),
            inactivity_timeout=inactivity_timeout,
            watch_list=send_initial_events,
            max_line_bytes=self.max_line_bytes,
            read_size=self.read_size,
        )
