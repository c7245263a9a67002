"""WATCH responses: checking a watch request's parameters (resourceVersion, watch-list's
``sendInitialEvents``, bookmarks, timeout) and streaming its events until the timeout, a
dropped watch, shutdown or a client that hung up.

The response uses chunked transfer encoding, one chunk per coalesced batch of events; armed
faults (stalls, malformed lines) act on the stream here.
"""

from __future__ import annotations

import math
import select
import socket
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

import orjson

from apiserver_sim import tables
from apiserver_sim.faults import FaultState
from apiserver_sim.lists import parse_rv, selectors, wait_not_too_large
from apiserver_sim.resources import ResourceType
from apiserver_sim.revision import StoredObject
from apiserver_sim.routes import TRUE, Route
from apiserver_sim.settings import SimulatorSettings
from apiserver_sim.state import ClusterState, Subscription
from apiserver_sim.status import ApiError, bad_request, invalid
from apiserver_sim.watch import WatchEncoder, error_line

__all__ = ["WatchStreamer"]

_WATCH_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class WatchStreamer:
    """Serves the watch requests of one simulator, on its store, faults and settings."""

    def __init__(
        self, state: ClusterState, faults: FaultState, settings: SimulatorSettings
    ) -> None:
        self.state = state
        self.faults = faults
        self.settings = settings

    def serve(self, h: BaseHTTPRequestHandler, route: Route, query: dict[str, str]) -> None:  # noqa: C901, PLR0915
        resource = route.resource
        labels, fields = selectors(resource, query)
        bookmarks = query.get("allowWatchBookmarks", "") in TRUE
        rv_text = query.get("resourceVersion") or ""
        match = query.get("resourceVersionMatch") or ""
        timeout = self.settings.watch_default_timeout
        if query.get("timeoutSeconds"):
            try:
                requested = float(query["timeoutSeconds"])
            except ValueError:
                raise bad_request("invalid timeoutSeconds") from None
            if requested > 0:
                timeout = requested
        kind = resource.kind
        initial_end = False
        if "sendInitialEvents" in query:
            if not self.settings.watch_list:
                raise invalid(kind, "", "resourceVersionMatch: Forbidden: resourceVersionMatch "
                              "is forbidden for watch")  # fmt: skip
            if match != "NotOlderThan":
                raise invalid(kind, "", "resourceVersionMatch: Forbidden: sendInitialEvents "
                              "requires setting resourceVersionMatch to NotOlderThan")  # fmt: skip
            if not bookmarks:
                raise invalid(kind, "", "allowWatchBookmarks: Forbidden: sendInitialEvents "
                              "requires setting allowWatchBookmarks to true")  # fmt: skip
            send_initial = query["sendInitialEvents"] in TRUE
            initial_end = send_initial
            if rv_text and rv_text != "0":
                wait_not_too_large(self.state, self.settings, parse_rv(rv_text))
            since = None if send_initial else self.state.resource_version
            if not send_initial and rv_text and rv_text != "0":
                since = parse_rv(rv_text)
        else:
            if match:
                raise invalid(
                    kind,
                    "",
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for "
                    "watch unless sendInitialEvents is provided",
                )
            if not rv_text or rv_text == "0":
                since = None
            else:
                since = parse_rv(rv_text)
                wait_not_too_large(self.state, self.settings, since)
        try:
            sub, initial = self.state.subscribe(resource, route.namespace, labels, fields, since)
        except ApiError as error:
            if error.code != 410:
                raise
            h.wfile.write(_WATCH_HEAD)
            self._write_chunk(h, [error_line(error)])
            h.wfile.write(b"0\r\n\r\n")
            return
        try:
            encoder = WatchEncoder(resource, route.namespace, labels, fields,
                                   self._table_rows(h, resource, query))  # fmt: skip
            self._stream(
                h,
                sub,
                initial,
                initial_end=initial_end,
                encoder=encoder,
                bookmarks=bookmarks,
                timeout=timeout,
            )
        finally:
            sub.close()

    def _table_rows(
        self, h: BaseHTTPRequestHandler, resource: ResourceType, query: dict[str, str]
    ) -> Callable[[bytes], bytes] | None:
        """When the client asks for Tables (``kubectl get -w``): each event's object as a
        one-row Table, aged at the time it is sent."""
        version = tables.wants_table(h.headers.get("Accept") or "")
        if version is None:
            return None
        include = query.get("includeObject", "")
        tables.table(resource, [], {}, now=0.0, include_object=include)  # 400 before streaming

        def row(raw: bytes) -> bytes:
            obj = orjson.loads(raw)
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            doc = tables.table(resource, [obj], meta, now=self.state.wall_clock(),
                               include_object=include, version=version)  # fmt: skip
            return orjson.dumps(doc)

        return row

    def _hold_for_stall(self, sub: Subscription) -> bool:
        """While a stall is armed, wait (waking for drops/shutdown) and report True."""
        stalled = self.faults.stall_remaining()
        if stalled <= 0:
            return False
        with self.state.changed:
            if sub.generation == self.state._watch_generation:
                self.state.changed.wait(min(stalled, 0.25))
        return sub.generation == self.state._watch_generation

    @staticmethod
    def _write_chunk(h: BaseHTTPRequestHandler, parts: list[bytes]) -> None:
        size = sum(len(p) for p in parts)
        h.wfile.write(b"".join([b"%x\r\n" % size, *parts, b"\r\n"]))

    def _stream(  # noqa: C901 - one loop: stall, timeout, poll, bookmark, write, liveness
        self,
        h: BaseHTTPRequestHandler,
        sub: Subscription,
        initial: list[StoredObject],
        *,
        initial_end: bool,
        encoder: WatchEncoder,
        bookmarks: bool,
        timeout: float,
    ) -> None:
        h.wfile.write(_WATCH_HEAD)
        limit = self.settings.max_write_bytes
        batch = max(16, limit // 4096)
        for start in range(0, len(initial), batch):
            first: list[bytes] = []
            encoder.initial(initial[start : start + batch], first)
            self._write_chunk(h, first)
        if initial_end:
            self._write_chunk(h, [encoder.bookmark(sub.progress_rv, initial_events_end=True)])
        now = time.monotonic()
        deadline = now + timeout
        interval = self.settings.bookmark_interval
        next_bookmark = now + interval if bookmarks else math.inf
        last_write = now
        parts: list[bytes] = []  # kept across iterations while a stall holds them back
        while True:
            if self._hold_for_stall(sub):
                continue
            now = time.monotonic()
            expired = now >= deadline  # hand over what is already there, then end
            wait = 0.0 if expired else min(deadline, next_bookmark, now + 1.0) - now
            status, events = sub.poll(wait, batch)
            if status != "ok":
                break
            if events:
                encoder.encode(events, parts)
            now = time.monotonic()
            if now >= next_bookmark:
                parts.append(encoder.bookmark(sub.progress_rv))
                next_bookmark = now + interval
            if self.faults.stall_remaining() > 0:
                continue
            if parts:
                if self.faults.malformed_armed():
                    if _peer_closed(h.connection):  # the armed line is for a live watch
                        h.close_connection = True
                        return
                    self.faults.corrupt_write(parts)
                self._write_chunk(h, parts)
                parts = []
                last_write = now
            elif now - last_write >= 1.0:
                last_write = now
                if _peer_closed(h.connection):
                    h.close_connection = True
                    return
            if expired:
                break
        if parts:
            self._write_chunk(h, parts)
        h.wfile.write(b"0\r\n\r\n")


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client hung up (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
