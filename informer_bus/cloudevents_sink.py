"""``informer-bus subscribe --sink URL``: POST each event to an HTTP receiver until it takes it.

The subscriber sends one event at a time and asks for the next delta only once the receiver
answered 2xx, so with ``--group`` a delta is acknowledged on the bus exactly when a receiver
accepted it (at least once: a crash between the 2xx and the acknowledgement sends it again,
with the same ``id``). Why one at a time: acknowledgement in stream order is what lets a
restarted durable subscriber resume without a gap, and a receiver that is down simply holds the
subscriber back (backpressure) instead of piling up events in memory.

What an answer means (the rule a Knative sink's delivery spec also follows):

* 2xx: accepted.
* connection refused or reset, no answer within ``timeout``, 408, 429 and 5xx: transient; the
  same request is sent again after an exponential backoff with jitter (``common.backoff``:
  ``backoff`` seconds doubling up to ``backoff_max``, each delay drawn from ``[d, 2d)``),
  forever: giving up would lose the delta, and the receiver coming back is the normal end.
* any other answer (4xx, or 1xx/3xx, which a receiver has no business sending): a permanent
  refusal. Sending it again would be refused again and block every later event, so it is
  skipped (acknowledged with ``--group``) with one line on stderr naming the event's id, the
  status and the start of the reply, and counted as ``refused``.

Nothing here reads Redis: the caller owns the subscription and its acknowledgements.
"""

from __future__ import annotations

import dataclasses
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
import urllib3
from urllib3.exceptions import HTTPError

from common.backoff import Backoff
from informer_bus.cloudevents import CONTENT_TYPE_STRUCTURED

__all__ = [
    "Delivery",
    "HttpSink",
    "SinkMode",
    "SinkOptions",
    "SinkStats",
    "SinkStopped",
    "check_sink_url",
]

_TRANSIENT_STATUSES: Final = frozenset({408, 429})
_BODY_EXCERPT: Final = 200
_FIRST_WARNING: Final = 3
"""Attempts before a struggling delivery is reported (then again at every doubling)."""


class SinkMode(enum.StrEnum):
    """The CloudEvents HTTP content modes."""

    BINARY = "binary"
    """Attributes as ``ce-*`` headers, the object as the body (``application/json``)."""
    STRUCTURED = "structured"
    """The whole event as the body (``application/cloudevents+json``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SinkOptions:
    url: str
    mode: SinkMode = SinkMode.BINARY
    timeout: float = 10.0
    """Seconds for connecting and for the answer; a request past it is retried."""
    backoff: float = 0.1
    backoff_max: float = 10.0


def check_sink_url(url: str) -> str:
    """``url`` if it is an ``http://`` or ``https://`` URL with a host, else ``ValueError``
    (one line)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme not in {"http", "https"} or not host:
        raise ValueError(f"--sink must be an http:// or https:// URL with a host, got {url!r}")
    return url


class Delivery(enum.Enum):
    ACCEPTED = "accepted"
    REFUSED = "refused"


class SinkStopped(Exception):
    """A stop was requested before the receiver accepted the event in hand (not acknowledged)."""


@dataclasses.dataclass
class SinkStats:
    """What the sink did so far; :meth:`summary` is the progress line."""

    sent: int = 0
    """Events the receiver accepted."""
    retried: int = 0
    """Attempts that failed transiently and were repeated."""
    refused: int = 0
    """Events the receiver refused for good (skipped)."""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def summary(self) -> str:
        elapsed = time.monotonic() - self.started
        return (
            f"sink: {self.sent} sent, {self.retried} retried, {self.refused} refused "
            f"in {elapsed:.1f} s"
        )


class HttpSink:
    """POSTs events to one URL (:mod:`informer_bus.cloudevents_sink` says how it retries).

    ``stop``: set to abandon an event still being retried (:class:`SinkStopped`); a POST in
    flight is finished first (``timeout`` bounds it), so a 2xx is never ignored. ``say``: where
    the one-line reports go (stderr for the command).
    """

    def __init__(
        self,
        options: SinkOptions,
        *,
        stop: threading.Event,
        say: Callable[[str], None],
        stats: SinkStats | None = None,
    ) -> None:
        self.options = options
        self.stats = stats or SinkStats()
        self._stop = stop
        self._say = say
        self._backoff = Backoff(initial=options.backoff, maximum=options.backoff_max)
        # No urllib3 retries or redirects: every attempt is counted and decided here.
        self._timeout = urllib3.Timeout(connect=options.timeout, read=options.timeout)
        self._pool = urllib3.PoolManager(num_pools=1, maxsize=1)

    def close(self) -> None:
        self._pool.clear()

    def deliver(self, event: Mapping[str, Any]) -> Delivery:
        """Send ``event`` (structured-mode JSON: attributes plus ``data``) until the receiver
        accepts or refuses it for good; :class:`SinkStopped` if a stop comes first."""
        if self._stop.is_set():  # asked to stop while the delta was read: do not start
            raise SinkStopped(event["id"])
        body, headers = self._request(event)
        attempts = 0
        while True:
            attempts += 1
            status, detail = self._attempt(body, headers)
            if status is not None and 200 <= status < 300:
                self.stats.sent += 1
                self._backoff.reset()
                if attempts > _FIRST_WARNING:
                    self._say(f"sink: event {event['id']} accepted after {attempts} attempts")
                return Delivery.ACCEPTED
            if status is not None and not _transient(status):
                self.stats.refused += 1
                self._say(
                    f"sink: refused for good (skipped): event {event['id']} "
                    f"({event['type']} {event.get('subject', '')}): HTTP {status} {detail}"
                )
                return Delivery.REFUSED
            self.stats.retried += 1
            delay = self._backoff.next_delay()
            if attempts >= _FIRST_WARNING and attempts & (attempts - 1) == 0:
                self._say(
                    f"sink: event {event['id']} not delivered after {attempts} attempts "
                    f"({detail}); retrying in {delay:.2f} s"
                )
            if self._stop.wait(delay):
                raise SinkStopped(event["id"])

    def _request(self, event: Mapping[str, Any]) -> tuple[bytes, dict[str, str]]:
        if self.options.mode is SinkMode.STRUCTURED:
            return orjson.dumps(event), {"content-type": CONTENT_TYPE_STRUCTURED}
        headers: dict[str, str] = {}
        body = b""
        for name, value in event.items():
            if name == "data":
                body = orjson.dumps(value)
            elif name == "datacontenttype":
                headers["content-type"] = value
            else:
                headers[f"ce-{name}"] = _header_value(value)
        return body, headers

    def _attempt(self, body: bytes, headers: dict[str, str]) -> tuple[int | None, str]:
        """The receiver's status and the start of its reply, or ``None`` and why none came."""
        try:
            response = self._pool.request(
                "POST",
                self.options.url,
                body=body,
                headers=headers,
                retries=False,
                redirect=False,
                timeout=self._timeout,
            )
        except (HTTPError, OSError) as exc:
            return None, _describe(exc)
        excerpt = response.data[:_BODY_EXCERPT].decode(errors="replace")
        return response.status, " ".join(excerpt.split())


def _transient(status: int) -> bool:
    return status >= 500 or status in _TRANSIENT_STATUSES


def _describe(exc: BaseException) -> str:
    """One line for a failed attempt: urllib3 wraps the socket error it met, which says more."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException) and str(reason):
        exc = reason
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


_SAFE_HEADER_BYTES: Final = frozenset(range(0x21, 0x7F)) - {ord('"'), ord("%")}


def _header_value(value: Any) -> str:
    """An attribute as a ``ce-*`` header value: booleans as ``true``/``false``, and the
    characters the HTTP binding says to percent-encode (space, ``"``, ``%``, anything outside
    printable ASCII) encoded as UTF-8 bytes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if all(ord(char) in _SAFE_HEADER_BYTES for char in text):
        return text
    return "".join(
        chr(byte) if byte in _SAFE_HEADER_BYTES else f"%{byte:02X}" for byte in text.encode()
    )
