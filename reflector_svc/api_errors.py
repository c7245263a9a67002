"""The typed errors of the Kubernetes API, and their classification from a ``Status``.

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

Pure: no socket, no client. The transport (:mod:`reflector_svc.transport`) and the watch
decoder (:mod:`reflector_svc.watch_decoder`) raise these; the reflector branches on them.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

import orjson

__all__ = [
    "EXCERPT_BYTES",
    "ApiStatusError",
    "ApiUnavailableError",
    "KubeError",
    "MalformedResponseError",
    "MalformedWatchEventError",
    "ResourceExpiredError",
    "SourceConfigError",
    "TooLargeResourceVersionError",
    "TooManyRequestsError",
    "UnknownResourceError",
    "WatchInactiveError",
    "WatchListUnsupportedError",
    "error_from_status",
    "one_line",
]

EXCERPT_BYTES: Final = 200
"""How much of a bad line or error body an error quotes."""


class KubeError(Exception):
    """Base of every error the API modules raise: the reflector catches this, nothing broader."""


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
        self.excerpt = bytes(line[:EXCERPT_BYTES])
        self.line_bytes: int | None = len(line) if whole else None
        cut = "" if whole and len(line) <= EXCERPT_BYTES else "..."
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


class _ClassifiedStatusError(ApiStatusError):
    """An :class:`ApiStatusError` whose class says what it means: built from a message, with
    the status and reason the server usually sends for it unless the real ones are given."""

    default_status = 500
    default_reason = "InternalError"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            self.default_status if status is None else status,
            self.default_reason if reason is None else reason,
            message,
            details,
        )


class TooLargeResourceVersionError(_ClassifiedStatusError):
    """The requested resourceVersion is newer than the server has seen (504 with a
    ``ResourceVersionTooLarge`` cause): relist with resourceVersion "" (reference 1.7)."""

    default_status = 504
    default_reason = "Timeout"


class WatchListUnsupportedError(_ClassifiedStatusError):
    """The server rejected ``sendInitialEvents`` (422, or 400 from some versions): fall back to
    LIST + WATCH (reference 1.13)."""

    default_status = 422
    default_reason = "Invalid"


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
        text = body[:EXCERPT_BYTES].decode("utf-8", "replace") if isinstance(body, bytes) else ""
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


def one_line(exc: BaseException) -> str:
    """An exception as one short line for a log or an error message (its type if it is mute)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
