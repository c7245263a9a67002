"""The HTTP front: request routing, discovery, LIST, WATCH streaming, mutations, and the
``/_sim/`` control endpoints, on a stdlib ``ThreadingHTTPServer`` (one thread per connection).

Responses are written as raw bytes in as few writes as possible with ``TCP_NODELAY`` (the
client reads watch streams line by line; Nagle plus delayed ACKs would add 40 ms stalls).
Watch responses use chunked transfer encoding, one chunk per coalesced batch of events.
Every thread this module starts is tracked so that :meth:`HttpFront.close` can end open
connections and join them: tests fail on leaked threads.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import math
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from informer_bus.apiserver_sim import objects
from informer_bus.apiserver_sim.faults import FaultState
from informer_bus.apiserver_sim.resources import (
    ResourceType,
    api_group_document,
    api_group_list_document,
    api_resource_list_document,
    api_versions_document,
    lookup_path,
    version_document,
)
from informer_bus.apiserver_sim.revision import StoredObject
from informer_bus.apiserver_sim.selectors import FieldSelector, LabelSelector
from informer_bus.apiserver_sim.settings import SimulatorSettings
from informer_bus.apiserver_sim.state import ClusterState, Subscription
from informer_bus.apiserver_sim.status import (
    ApiError,
    bad_request,
    conflict,
    expired,
    internal_error,
    invalid,
    too_large_resource_version,
)
from informer_bus.apiserver_sim.watch import WatchEncoder, error_line

__all__ = ["ControlHandler", "HttpFront"]

log = logging.getLogger(__name__)

ControlHandler = Callable[[str, str, dict[str, Any], dict[str, str]], tuple[int, Any]]
"""``(method, action, json_body, query) -> (http_status, json_document)`` for ``/_sim/*``."""

_CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
_WATCH_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: no-cache, private\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_TRUE = ("true", "1")


class _NotFoundPath(ApiError):
    def __init__(self) -> None:
        super().__init__(404, "NotFound", "the server could not find the requested resource")


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


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise bad_request(f'invalid resource version "{text}"')
    return value


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], front: HttpFront) -> None:
        self.front = front
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name="apiserver-sim-conn",
            daemon=True,
        )
        self.front._track(thread, request)
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self.front._untrack(threading.current_thread(), request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self.server.front.dispatch(self, "GET")

    def do_POST(self) -> None:
        self.server.front.dispatch(self, "POST")

    def do_PUT(self) -> None:
        self.server.front.dispatch(self, "PUT")

    def do_PATCH(self) -> None:
        self.server.front.dispatch(self, "PATCH")

    def do_DELETE(self) -> None:
        self.server.front.dispatch(self, "DELETE")


@dataclass(frozen=True, slots=True)
class _Route:
    """What a request's path names: a resource, maybe a namespace, an object, a subresource."""

    resource: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool

    def key(self) -> str:
        assert self.name is not None
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class HttpFront:
    """The listening socket, its threads, and the request handling on top of the store."""

    def __init__(
        self,
        state: ClusterState,
        faults: FaultState,
        settings: SimulatorSettings,
        control: ControlHandler,
    ) -> None:
        self.state = state
        self.faults = faults
        self.settings = settings
        self.control = control
        self._server: _Server | None = None
        self._serve_thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._sockets: set[socket.socket] = set()
        self._request = threading.local()  # per connection thread: after-response callbacks
        self.port = settings.port

    # ------------------------------------------------------------ lifecycle

    def open(self, port: int | None = None) -> None:
        """Bind (``OSError`` when the port is taken) and serve in a background thread."""
        server = _Server((self.settings.host, self.port if port is None else port), self)
        self._server = server
        self.port = server.server_address[1]
        self._serve_thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="apiserver-sim-serve",
            daemon=True,
        )
        self._serve_thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, cut every open connection, and join all threads."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._serve_thread is not None:
            self._serve_thread.join(timeout)
            self._serve_thread = None
        self.disconnect_all()
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                break
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                log.warning("apiserver-sim: %d connection threads did not stop", len(threads))
                break

    def disconnect_all(self) -> None:
        """Shut down every client socket (open watches and idle keep-alive connections)."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.state.wake()

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._sockets)

    def _track(self, thread: threading.Thread, sock: socket.socket) -> None:
        with self._lock:
            self._threads.add(thread)
            self._sockets.add(sock)

    def _untrack(self, thread: threading.Thread, sock: socket.socket) -> None:
        with self._lock:
            self._threads.discard(thread)
            self._sockets.discard(sock)

    # ------------------------------------------------------------ plumbing

    @staticmethod
    def _send(
        h: _Handler,
        code: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        phrase = HTTPStatus(code).phrase
        head = [
            f"HTTP/1.1 {code} {phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-cache, private",
        ]
        if headers:
            head.extend(f"{k}: {v}" for k, v in headers.items())
        if h.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if len(body) < 65536:
            h.wfile.write(data + body)
        else:
            h.wfile.write(data)
            h.wfile.write(body)

    def _send_json(self, h: _Handler, code: int, doc: Any) -> None:
        self._send(h, code, orjson.dumps(doc))

    def _send_error(self, h: _Handler, error: ApiError) -> None:
        self._send(h, error.code, error.body(), error.headers)

    @staticmethod
    def _read_body(h: _Handler) -> bytes:
        length = int(h.headers.get("Content-Length") or 0)
        return h.rfile.read(length) if length > 0 else b""

    def after_response(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the response to the request being handled in this thread has
        been written (a control action that cuts connections must not cut its own reply);
        outside a request, run it now."""
        pending: list[Callable[[], None]] | None = getattr(self._request, "after", None)
        if pending is None:
            action()
        else:
            pending.append(action)

    def dispatch(self, h: _Handler, method: str) -> None:
        self._request.after = []
        try:
            self._dispatch(h, method)
        finally:
            after, self._request.after = self._request.after, None
            for action in after:
                action()

    def _dispatch(self, h: _Handler, method: str) -> None:
        url = urlsplit(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        try:
            raw_body = self._read_body(h)
            path = url.path
            if path.startswith("/_sim/"):
                self._control(h, method, path[len("/_sim/") :], raw_body, query)
                return
            if path in ("/healthz", "/livez", "/readyz"):
                self._send(h, 200, b"ok", content_type="text/plain; charset=utf-8")
                return
            slow = self.faults.take_slow()
            if slow > 0:
                time.sleep(slow)
            failure = self.faults.take_failure()
            if failure is not None:
                raise failure
            self._api(h, method, path, query, raw_body)
        except ApiError as error:
            self._send_error(h, error)
        except (ConnectionError, TimeoutError):
            h.close_connection = True
        except OSError:
            h.close_connection = True
        except Exception as exc:  # the simulator must answer, not hang the client
            log.exception("apiserver-sim: %s %s failed", method, h.path)
            with contextlib.suppress(OSError):
                self._send_error(h, internal_error(repr(exc)))

    def _control(
        self, h: _Handler, method: str, action: str, raw: bytes, query: dict[str, str]
    ) -> None:
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            raise bad_request("control body must be JSON") from None
        if not isinstance(body, dict):
            raise bad_request("control body must be a JSON object")
        code, doc = self.control(method, action.strip("/"), body, query)
        self._send_json(h, code, doc)

    # ------------------------------------------------------------ routing

    def _api(self, h: _Handler, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        segs = [s for s in path.split("/") if s]
        if method == "GET":
            doc = self._discovery(segs, h)
            if doc is not None:
                self._send_json(h, 200, doc)
                return
        route = self._route(segs, query)
        if route.subresource not in (None, "status"):
            raise _NotFoundPath()
        handler = {
            ("GET", False): self._list_or_watch,
            ("GET", True): self._get,
            ("POST", False): self._create,
            ("PUT", True): self._replace,
            ("PATCH", True): self._patch,
            ("DELETE", True): self._delete,
            ("DELETE", False): self._delete_collection,
        }.get((method, route.name is not None))
        if handler is None:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        handler(h, route, query, raw)

    def _discovery(self, segs: list[str], h: _Handler) -> Any:
        if segs == ["version"]:
            return version_document()
        if segs == ["api"]:
            return api_versions_document(f"{self.settings.host}:{self.port}")
        if segs == ["apis"]:
            return api_group_list_document()
        if len(segs) == 2 and segs[0] == "api":
            return api_resource_list_document("", segs[1]) or _raise(_NotFoundPath())
        if len(segs) == 2 and segs[0] == "apis":
            return api_group_document(segs[1]) or _raise(_NotFoundPath())
        if len(segs) == 3 and segs[0] == "apis":
            return api_resource_list_document(segs[1], segs[2]) or _raise(_NotFoundPath())
        return None

    def _route(self, segs: list[str], query: dict[str, str]) -> _Route:
        if len(segs) >= 3 and segs[0] == "api":
            group, version, rest = "", segs[1], segs[2:]
        elif len(segs) >= 4 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise _NotFoundPath()
        watch = query.get("watch", "") in _TRUE
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            inner = lookup_path(group, version, rest[2])
            if inner is not None and inner.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise _NotFoundPath()
        resource = lookup_path(group, version, rest[0])
        if resource is None:
            raise _NotFoundPath()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if not resource.namespaced and namespace is not None:
            raise _NotFoundPath()
        if resource.namespaced and namespace is None and name is not None:
            raise _NotFoundPath()
        return _Route(resource, namespace, name, sub, watch)

    @staticmethod
    def _manager(h: _Handler, query: dict[str, str]) -> str:
        manager = query.get("fieldManager")
        if manager:
            return manager
        agent = h.headers.get("User-Agent") or "unknown"
        return agent.split("/", 1)[0] or "unknown"

    @staticmethod
    def _json_body(raw: bytes) -> Any:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise bad_request(f"the body of the request could not be decoded: {exc}") from None

    # ------------------------------------------------------------ reads

    def _get(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        obj = self.state.get(route.resource, route.key())
        self._send(h, 200, obj.raw)

    def _selectors(
        self, resource: ResourceType, query: dict[str, str]
    ) -> tuple[LabelSelector, FieldSelector]:
        labels = LabelSelector.parse(query.get("labelSelector"))
        supported = set(resource.field_values({}))
        fields = FieldSelector.parse(query.get("fieldSelector"), supported)
        return labels, fields

    def _wait_not_too_large(self, rv: int) -> None:
        if rv <= self.state.resource_version:
            return
        if not self.state.wait_for_rv(rv, self.settings.too_large_wait):
            raise too_large_resource_version(rv, self.state.resource_version)

    def _list_or_watch(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        if route.watch:
            self._watch(h, route, query)
        else:
            self._list(h, route, query)

    def _list(self, h: _Handler, route: _Route, query: dict[str, str]) -> None:
        resource = route.resource
        labels, fields = self._selectors(resource, query)
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
            elif snapshot < self.state.compacted_rv:
                fresh = _encode_continue(0, after, returned)
                raise expired(_CONTINUE_EXPIRED, continue_token=fresh)
        else:
            snapshot = self._list_snapshot(resource, rv_text, match, limit)
        page = self.state.list_page(
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
        body = b"".join((head[:-1], b',"items":[', b",".join(o.raw for o in page.items), b"]}"))
        self._send(h, 200, body)

    def _list_snapshot(
        self, resource: ResourceType, rv_text: str, match: str, limit: int
    ) -> int | None:
        """Which state a first page shows, per "Semantics for get and list" (None: newest)."""
        if match not in ("", "Exact", "NotOlderThan"):
            raise invalid(
                resource.list_kind, "", f'resourceVersionMatch: Unsupported value: "{match}"'
            )
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
        rv = _parse_rv(rv_text)
        self._wait_not_too_large(rv)
        exact = match == "Exact" or (not match and limit > 0)
        if not exact:
            return None
        compacted = self.state.compacted_rv
        if rv < compacted:
            raise expired(f"too old resource version: {rv} ({compacted})")
        return rv

    # ------------------------------------------------------------ watch

    def _watch(self, h: _Handler, route: _Route, query: dict[str, str]) -> None:  # noqa: C901, PLR0915
        resource = route.resource
        labels, fields = self._selectors(resource, query)
        bookmarks = query.get("allowWatchBookmarks", "") in _TRUE
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
            send_initial = query["sendInitialEvents"] in _TRUE
            initial_end = send_initial
            if rv_text and rv_text != "0":
                self._wait_not_too_large(_parse_rv(rv_text))
            since = None if send_initial else self.state.resource_version
            if not send_initial and rv_text and rv_text != "0":
                since = _parse_rv(rv_text)
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
                since = _parse_rv(rv_text)
                self._wait_not_too_large(since)
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
            encoder = WatchEncoder(resource, route.namespace, labels, fields)
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
    def _write_chunk(h: _Handler, parts: list[bytes]) -> None:
        size = sum(len(p) for p in parts)
        h.wfile.write(b"".join([b"%x\r\n" % size, *parts, b"\r\n"]))

    def _stream(  # noqa: C901 - one loop: stall, timeout, poll, bookmark, write, liveness
        self,
        h: _Handler,
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

    # ------------------------------------------------------------ writes

    def _create(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        if route.resource.namespaced and route.namespace is None:
            raise _NotFoundPath()
        body = self._json_body(raw)
        obj = objects.prepare_create(
            route.resource, body, route.namespace or "", self._manager(h, query)
        )
        stored = self.state.create(route.resource, obj)
        self._send(h, 201, stored.raw)

    def _replace(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        body = self._json_body(raw)
        resource = route.resource
        manager = self._manager(h, query)
        name = route.name or ""

        def mutate(old: dict[str, Any]) -> dict[str, Any]:
            if not isinstance(body, dict):
                raise bad_request("the body of the request must be an object")
            given = (body.get("metadata") or {}).get("resourceVersion")
            if given and given != old["metadata"]["resourceVersion"]:
                raise conflict(resource.plural, name, resource.group)
            new = body
            if route.subresource == "status":
                new = {**old, "status": body.get("status")}
            return objects.prepare_update(resource, old, new, manager)

        stored = self.state.update(resource, route.key(), mutate)
        self._send(h, 200, stored.raw)

    def _patch(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        patch = self._json_body(raw)
        resource = route.resource
        manager = self._manager(h, query)
        name = route.name or ""
        if content_type == "application/json-patch+json":
            apply: Callable[[Any, Any], Any] = objects.apply_json_patch
        elif content_type in (
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ):
            apply = objects.apply_merge_patch
        else:
            raise ApiError(
                415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                "accepted media types include: application/json-patch+json, "
                "application/merge-patch+json, application/strategic-merge-patch+json",
            )  # fmt: skip

        def mutate(old: dict[str, Any]) -> dict[str, Any]:
            current_rv = old["metadata"]["resourceVersion"]
            new = apply(old, patch)
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise bad_request("the patch removed the object's metadata")
            given = new["metadata"].get("resourceVersion")
            if given and given != current_rv:
                raise conflict(resource.plural, name, resource.group)
            return objects.prepare_update(resource, old, new, manager)

        stored = self.state.update(resource, route.key(), mutate)
        self._send(h, 200, stored.raw)

    def _delete(self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes) -> None:
        resource = route.resource
        options = self._json_body(raw) if raw else {}
        pre = (options or {}).get("preconditions") or {}
        name = route.name or ""

        def check(meta: dict[str, Any]) -> None:
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                why = "the ResourceVersion in the precondition does not match"
                raise conflict(resource.plural, name, resource.group, why)
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise conflict(resource.plural, name, resource.group,
                               "the UID in the precondition does not match")  # fmt: skip

        stored = self.state.delete(resource, route.key(), check)
        self._send(h, 200, stored.raw)

    def _delete_collection(
        self, h: _Handler, route: _Route, query: dict[str, str], raw: bytes
    ) -> None:
        labels, fields = self._selectors(route.resource, query)
        page = self.state.list_page(
            route.resource, route.namespace, snapshot_rv=None, after_key=None, limit=0,
            labels=labels, fields=fields,
        )  # fmt: skip
        deleted: list[bytes] = []
        for obj in page.items:
            with contextlib.suppress(ApiError):
                deleted.append(self.state.delete(route.resource, obj.key).raw)
        resource = route.resource
        head = orjson.dumps(
            {"kind": resource.list_kind, "apiVersion": resource.api_version,
             "metadata": {"resourceVersion": str(self.state.resource_version)}}
        )  # fmt: skip
        self._send(h, 200, head[:-1] + b',"items":[' + b",".join(deleted) + b"]}")


def _raise(error: ApiError) -> Any:
    raise error


def _peer_closed(sock: socket.socket) -> bool:
    """True when the client hung up (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
