"""One open WATCH: the HTTP response's lifecycle, read a network read at a time.

The request is sent late (on the first use), so whoever must stop the watch holds the stream
before anything blocks; :meth:`WatchStream.close` works from any thread, even while another is
blocked reading (the socket is shut down under it). What the bytes mean is
:mod:`reflector_svc.watch_decoder`'s business.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from typing import Final

import urllib3
from kubernetes.client import ApiClient
from urllib3.exceptions import HTTPError, ReadTimeoutError

from reflector_svc.api_errors import WatchInactiveError, one_line
from reflector_svc.transport import discard, raise_for_status, send, shutdown
from reflector_svc.watch_decoder import LineFramer, WatchDecoder
from reflector_svc.watch_events import WatchEvent

__all__ = ["DEFAULT_READ_SIZE", "WatchStream"]

log = logging.getLogger(__name__)

DEFAULT_READ_SIZE: Final = 64 << 10
"""Bytes asked of the socket per read of a watch stream; each read becomes one batch.

Measured on 3.5 KB pods: 16 KiB reads parse ~70k events/s, 64 KiB ~40k, 256 KiB ~26k, because
a bigger batch keeps more freshly parsed objects alive at once (cache misses, and the cyclic GC
traverses them: ``gc.freeze()`` plus a higher gen-0 threshold brings 64 KiB to ~59k). 64 KiB
(~19 pods) is the compromise with the publisher, which pays one Redis round trip per batch.
"""


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
        decoder: WatchDecoder,
        timeout: urllib3.Timeout,
        read_size: int = DEFAULT_READ_SIZE,
    ) -> None:
        # The request, sent on open: all the stream needs of the client, path and query.
        self._request = functools.partial(send, api_client, path, query, timeout, watch=True)
        self.path = path
        self.inactivity_timeout = timeout.read_timeout
        self._decoder = decoder
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
        self.more_waiting = False
        """Whether the last read filled its whole buffer: more was already there to read (a
        burst), so the next batch follows at once (the publisher waits for it:
        :mod:`reflector_svc.pipeline`)."""

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
        resp = self._request()
        raise_for_status(resp, watch_list_requested=self._decoder.watch_list)
        with self._lock:
            if not self._is_closed():
                self._resp = resp
                return self
        discard(resp)
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
                    shutdown(resp)
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
            discard(resp)

    def __enter__(self) -> WatchStream:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
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
        framer = LineFramer(self._decoder.max_line_bytes)
        parse_lines = self._decoder.parse_lines
        try:
            while True:
                data = self._read(resp)
                if not data:
                    clean = self.end_reason == "server"
                    return
                events, error = parse_lines(framer.feed(data))
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
                log.debug("watch %s: connection lost: %s", self.path, one_line(exc))
            return b""
        finally:
            with self._lock:
                self._reading = False
        self.more_waiting = len(data) >= self._read_size
        if data:
            self.bytes_read += len(data)
        else:
            self.end_reason = "closed" if self._is_closed() else "server"
        return data
