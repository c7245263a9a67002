"""The HTTP front: the listening socket and its connection threads, request dispatch (health,
``/_sim/`` control endpoints, injected failures, discovery, then the resource handlers), GET
and the mutations; LIST pages are built in :mod:`~apiserver_sim.lists` and
WATCH streams in :mod:`~apiserver_sim.watch_stream`. It runs on a stdlib
``ThreadingHTTPServer`` (one thread per connection).

Responses are written as raw bytes in as few writes as possible with ``TCP_NODELAY`` (the
client reads watch streams line by line; Nagle plus delayed ACKs would add 40 ms stalls).
Every thread this module starts is tracked so that :meth:`HttpFront.close` can end open
connections and join them: tests fail on leaked threads.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from apiserver_sim import objects, tables
from apiserver_sim.admission import require_namespace
from apiserver_sim.conflicts import ConflictCounter
from apiserver_sim.faults import FaultState
from apiserver_sim.fixtures import wall_timestamp
from apiserver_sim.lists import list_body, selectors
from apiserver_sim.openapi import openapi
from apiserver_sim.routes import NotFoundPath, Route, discovery, parse_route
from apiserver_sim.settings import SimulatorSettings
from apiserver_sim.state import ClusterState
from apiserver_sim.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    delete_success,
    internal_error,
)
from apiserver_sim.watch_stream import WatchStreamer

__all__ = ["ControlHandler", "HttpFront"]

log = logging.getLogger(__name__)

ControlHandler = Callable[[str, str, dict[str, Any], dict[str, str]], tuple[int, Any]]
"""``(method, action, json_body, query) -> (http_status, json_document)`` for ``/_sim/*``."""

_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
"""The Kubernetes verb of a request by HTTP method (a collection's DELETE is
``deletecollection``)."""


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
        self.conflicts = ConflictCounter()
        """Every 409 answered, by resource, verb and reason (kept across restarts)."""
        self._watches = WatchStreamer(state, faults, settings)
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
        if method == "GET" and segs[:1] == ["openapi"]:
            document = openapi(segs, h.headers.get("Accept") or "")
            if document is None:
                raise NotFoundPath()
            self._send(h, 200, document[0], content_type=document[1])
            return
        if method == "GET":
            doc = discovery(segs, f"{self.settings.host}:{self.port}")
            if doc is not None:
                self._send_json(h, 200, doc)
                return
        route = parse_route(segs, query)
        if route.subresource is not None:
            if route.subresource != "status" or not route.resource.status_subresource:
                raise NotFoundPath()
            if method not in ("GET", "PUT", "PATCH"):
                raise _method_not_allowed()
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
            raise _method_not_allowed()
        try:
            handler(h, route, query, raw)
        except ApiError as error:
            if error.code == 409:
                self._count_conflict(method, route, error)
            raise

    def _count_conflict(self, method: str, route: Route, error: ApiError) -> None:
        """Count a 409 before it is answered, so a client that got it finds it counted."""
        resource = route.resource.qualified
        if route.subresource:
            resource += "/" + route.subresource
        verb = "deletecollection" if method == "DELETE" and not route.name else _VERBS[method]
        self.conflicts.record(resource, verb, error.reason)

    def _now(self) -> str:
        return wall_timestamp(self.state.wall_clock())

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

    def _get(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        obj = self.state.get(route.resource, route.key())
        version = tables.wants_table(h.headers.get("Accept") or "")
        if version is None or route.subresource is not None:
            self._send(h, 200, obj.raw)
            return
        meta = {"resourceVersion": str(obj.rv)}
        self._send_table(h, route, [obj.decode()], meta, query=query, version=version)

    def _list_or_watch(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        if route.watch:
            self._watches.serve(h, route, query)
            return
        body = list_body(self.state, self.settings, route, query)
        version = tables.wants_table(h.headers.get("Accept") or "")
        if version is None:
            self._send(h, 200, body)
            return
        page = orjson.loads(body)
        self._send_table(h, route, page["items"], page["metadata"], query=query, version=version)

    def _send_table(
        self,
        h: _Handler,
        route: Route,
        items: list[dict[str, Any]],
        meta: dict[str, Any],
        *,
        query: dict[str, str],
        version: str,
    ) -> None:
        """What ``kubectl get`` asks for: the objects as a Table (see :mod:`.tables`)."""
        doc = tables.table(
            route.resource, items, meta, now=self.state.wall_clock(),
            include_object=query.get("includeObject", ""), version=version,
        )  # fmt: skip
        self._send_json(h, 200, doc)

    # ------------------------------------------------------------ writes

    def _create(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        if route.resource.namespaced and route.namespace is None:
            raise NotFoundPath()
        body = self._json_body(raw)
        require_namespace(self.state, route)
        obj = objects.prepare_create(
            route.resource, body, route.namespace or "", self._manager(h, query), when=self._now()
        )
        if _dry_run(query):
            try:
                self.state.get(route.resource, objects.key_of(route.resource, obj))
            except ApiError:
                self._send_json(h, 201, obj)
                return
            raise already_exists(route.resource.plural, obj["metadata"]["name"],
                                 route.resource.group)  # fmt: skip
        stored = self.state.create(route.resource, obj)
        self._send(h, 201, stored.raw)

    def _replace(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        body = self._json_body(raw)
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be an object")
        resource = route.resource
        manager = self._manager(h, query)
        scope = _scope(route)
        when = self._now()
        metadata = body.get("metadata")
        given = metadata.get("resourceVersion") if isinstance(metadata, dict) else None

        def mutate(old: dict[str, Any]) -> dict[str, Any] | None:
            _check_version(route, given, old)
            new = objects.prepare_update(resource, old, body, manager, scope=scope, when=when)
            return None if objects.unchanged(old, new) else new

        self._send(h, 200, self._update(route, mutate, dry=_dry_run(query)))

    def _patch(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        content_type = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        patch = self._json_body(raw)
        resource = route.resource
        manager = self._manager(h, query)
        scope = _scope(route)
        when = self._now()
        accepted = ["application/json-patch+json", "application/merge-patch+json"]
        if not resource.custom:
            accepted.append("application/strategic-merge-patch+json")
        if content_type not in accepted:
            raise ApiError(
                415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                f"accepted media types include: {', '.join(accepted)}",
            )  # fmt: skip
        apply: Callable[[Any, Any], Any] = {
            "application/merge-patch+json": objects.apply_merge_patch,
            "application/strategic-merge-patch+json": objects.apply_strategic_merge_patch,
        }.get(content_type, objects.apply_json_patch)

        def mutate(old: dict[str, Any]) -> dict[str, Any] | None:
            # The patch applies to the whole stored object (a status patch may carry a
            # resourceVersion in its metadata); the scope then keeps what it may not change.
            new = apply(old, patch)
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise bad_request("the patch removed the object's metadata")
            _check_version(route, new["metadata"].get("resourceVersion"), old)
            new = objects.prepare_update(resource, old, new, manager, scope=scope, when=when)
            return None if objects.unchanged(old, new) else new

        self._send(h, 200, self._update(route, mutate, dry=_dry_run(query)))

    def _update(
        self,
        route: Route,
        mutate: Callable[[dict[str, Any]], dict[str, Any] | None],
        *,
        dry: bool,
    ) -> bytes:
        """The stored object after ``mutate`` (see :meth:`ClusterState.update`), once the
        object is found and admitted; a dry run answers what would be stored and stores
        nothing."""

        def admitted(old: dict[str, Any]) -> dict[str, Any] | None:
            require_namespace(self.state, route)
            return mutate(old)

        if not dry:
            return self.state.update(route.resource, route.key(), admitted).raw
        old = self.state.get(route.resource, route.key())
        new = admitted(old.decode())
        if new is None:
            return old.raw
        new["metadata"]["resourceVersion"] = str(old.rv)
        return orjson.dumps(new)

    def _delete(self, h: _Handler, route: Route, query: dict[str, str], raw: bytes) -> None:
        resource = route.resource
        options = self._json_body(raw) if raw else None
        if not isinstance(options or {}, dict):
            raise bad_request("the body of a DELETE must be DeleteOptions (an object)")
        pre = (options or {}).get("preconditions") or {}
        name = route.name or ""

        def check(meta: dict[str, Any]) -> None:
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                why = "the ResourceVersion in the precondition does not match"
                raise conflict(resource.plural, name, resource.group, why)
            if pre.get("uid") and pre["uid"] != meta.get("uid"):
                raise conflict(resource.plural, name, resource.group,
                               "the UID in the precondition does not match")  # fmt: skip

        if _dry_run(query):
            stored = self.state.get(resource, route.key())
            check(stored.decode_metadata())
        else:
            stored = self.state.delete(resource, route.key(), check)
        if resource.returns_deleted_object:
            self._send(h, 200, stored.raw)
        else:
            done = delete_success(resource.plural, name, resource.group, stored.uid)
            self._send_json(h, 200, done)

    def _delete_collection(
        self, h: _Handler, route: Route, query: dict[str, str], raw: bytes
    ) -> None:
        labels, fields = selectors(route.resource, query)
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


def _dry_run(query: dict[str, str]) -> bool:
    """Whether the write is a server-side dry run (``dryRun=All``): checked and answered as
    if done, but nothing is stored (``kubectl apply --dry-run=server``)."""
    value = query.get("dryRun")
    if value is None or value == "":
        return False
    if value != "All":
        raise bad_request(f'Invalid dry run argument: "{value}" (only "All" is supported)')
    return True


def _scope(route: Route) -> objects.Scope:
    """What a write through ``route`` may change (see :data:`objects.Scope`)."""
    return "status" if route.subresource == "status" else "main"


def _check_version(route: Route, given: Any, old: dict[str, Any]) -> None:
    """Optimistic concurrency: a write that names a resourceVersion other than the stored one
    is refused with 409 Conflict; one that names none is unconditional."""
    if given and str(given) != old["metadata"]["resourceVersion"]:
        resource = route.resource
        raise conflict(resource.plural, route.name or "", resource.group)


def _method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )
