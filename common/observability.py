"""Metrics and health endpoints, and structured logging, shared by both services.

Both the reflector and the processors are long-running processes that something else watches:
Prometheus scrapes ``/metrics``, Kubernetes (or compose) probes ``/healthz`` and ``/readyz``,
and a log pipeline ingests stderr. This module keeps those concerns identical in both services.

* :class:`ObservabilityServer`: a stdlib ``ThreadingHTTPServer`` in one non-daemon thread that
  :meth:`~ObservabilityServer.stop` shuts down and joins, so tests and clean shutdowns leave no
  thread behind. ``/metrics`` exposes the :class:`~prometheus_client.CollectorRegistry` it is
  given -- never the global default registry, so several servers in one test process (or a
  library that registers on the default) do not collide or leak series into each other.
  ``/healthz`` answers "is the process loop alive" (restart me if not), ``/readyz`` "should I
  get traffic / count as synced" (wait if not); each is a callable returning ``(ok, detail)``.
  :class:`Heartbeat` turns a loop's iterations into such a liveness check: a loop that is stuck
  without raising (the silent failure reference: faust-streaming#432) stops beating.
* :func:`configure_logging`: JSON lines (one object per record, orjson, ``extra=`` fields kept)
  or readable text on stderr, with a :class:`RedactingFilter` that masks configured secrets
  (the Redis password, API tokens) wherever they appear in a record -- message, arguments,
  exception text, extra fields -- because a connection error that prints a URL must not put a
  credential into the logs.
"""

from __future__ import annotations

import gzip
import logging
import re
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Final, Protocol
from urllib.parse import quote, urlsplit

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

__all__ = [
    "LOG_LEVELS",
    "HealthCheck",
    "Heartbeat",
    "JsonFormatter",
    "ObservabilityServer",
    "ProbedService",
    "RedactingFilter",
    "TextFormatter",
    "combine_checks",
    "configure_logging",
    "parse_log_level",
    "serve_probes",
]

log = logging.getLogger(__name__)

HealthCheck = Callable[[], tuple[bool, str]]
"""A probe: ``(ok, detail)``. ``detail`` explains a failure (and may say what is fine)."""


def _always_ok() -> tuple[bool, str]:
    return True, "no check configured"


def combine_checks(*checks: HealthCheck) -> HealthCheck:
    """One check that passes when all pass; it reports every failure's detail, or ``"ok"``."""

    def combined() -> tuple[bool, str]:
        failures = []
        for check in checks:
            ok, detail = check()
            if not ok:
                failures.append(detail)
        return (False, "; ".join(failures)) if failures else (True, "ok")

    return combined


class Heartbeat:
    """Liveness of a loop: the loop calls :meth:`beat` every iteration, :meth:`check` probes it.

    A loop that blocks forever or spins without progress does not raise; the only symptom is
    that it stops coming back. :meth:`check` fails once the last beat is older than
    ``max_age`` seconds. Creation counts as a beat, so a starting loop has ``max_age`` to begin.
    Thread-safe (a float assignment); ``clock`` is for tests.
    """

    def __init__(
        self, max_age: float, *, name: str = "loop", clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not max_age > 0:
            raise ValueError(f"max_age must be > 0, got {max_age!r}")
        self._max_age = max_age
        self._name = name
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        """Record that the loop made progress now."""
        self._last = self._clock()

    def check(self) -> tuple[bool, str]:
        """``(True, ...)`` while the last beat is at most ``max_age`` seconds old."""
        age = self._clock() - self._last
        if age > self._max_age:
            return False, f"{self._name} has not made progress for {age:.1f} s"
        return True, f"{self._name} alive ({age:.1f} s since last progress)"


# --- HTTP server ---------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    """Joins its request threads on close (non-daemon), and never does reverse DNS on bind."""

    daemon_threads = False
    block_on_close = True

    def __init__(
        self,
        address: tuple[str, int],
        registry: CollectorRegistry,
        healthz: HealthCheck,
        readyz: HealthCheck,
        request_timeout: float,
    ) -> None:
        self.registry = registry
        self.healthz = healthz
        self.readyz = readyz
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        # The handler's socket timeout: a client that connects and sends nothing must not pin a
        # request thread (and so stop(), which joins them) forever.
        handler = type("_TimedHandler", (_Handler,), {"timeout": request_timeout})
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a DNS lookup that can hang for seconds.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is not our error; keep it out of stderr.
        log.debug("error serving %s", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "informer-bus"

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def _dispatch(self, *, send_body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            self._metrics(send_body)
        elif path == "/healthz":
            self._probe(self.server.healthz, send_body)
        elif path == "/readyz":
            self._probe(self.server.readyz, send_body)
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found\n", send_body)

    def _metrics(self, send_body: bool) -> None:
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(self.server.registry)
        headers = []
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        self._send(200, content_type, body, send_body, headers)

    def _probe(self, check: HealthCheck, send_body: bool) -> None:
        try:
            ok, detail = check()
        except Exception as error:  # a broken check means "not healthy", not a dead server
            ok, detail = False, f"check raised {type(error).__name__}: {error}"
        body = orjson.dumps({"status": "ok" if ok else "failing", "detail": detail}) + b"\n"
        self._send(200 if ok else 503, "application/json", body, send_body)

    def _send(
        self,
        status: int,
        content_type: str,
        body: bytes,
        send_body: bool,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Probes arrive every few seconds: access logs at debug only.
        log.debug("%s %s", self.address_string(), format % args)


class ObservabilityServer:
    """Serves ``/metrics``, ``/healthz`` and ``/readyz`` for one process (module docstring).

    ``registry``: what ``/metrics`` exposes (text format, OpenMetrics if asked, gzip if
    accepted). ``healthz`` / ``readyz``: checks returning ``(ok, detail)``; 200 with
    ``{"status": "ok", "detail": ...}`` when ok, else 503 with ``"failing"`` and the detail (a
    check that raises counts as failing). ``None`` always passes. Anything else is a 404.
    ``host`` defaults to loopback; containers pass ``"0.0.0.0"`` (or ``"::"``) so probes and
    scrapers can reach it. ``port=0`` picks a free port, see :attr:`port` / :attr:`url`.
    ``request_timeout`` bounds how long an idle client can hold a connection thread.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        healthz: HealthCheck | None = None,
        readyz: HealthCheck | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout: float = 10.0,
    ) -> None:
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(f"registry must be a CollectorRegistry, got {type(registry).__name__}")
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer in 0..65535, got {port!r}")
        self._registry = registry
        self._healthz = healthz or _always_ok
        self._readyz = readyz or _always_ok
        self._host = host
        self._requested_port = port
        self._request_timeout = request_timeout
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self) -> None:
        """Bind and serve in a thread. Raises ``OSError`` if the address is taken."""
        with self._lock:
            if self._server is not None or self._stopped:
                raise RuntimeError("an ObservabilityServer can be started only once")
            server = _Server(
                (self._host, self._requested_port),
                self._registry,
                self._healthz,
                self._readyz,
                self._request_timeout,
            )
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name=f"observability-http[{self._host}:{server.server_port}]",
                daemon=False,
            )
            self._thread.start()
        log.info("serving /metrics, /healthz, /readyz on %s", self.url)

    def stop(self) -> None:
        """Stop serving, close the socket, and join the server and request threads. Idempotent."""
        with self._lock:
            server, thread = self._server, self._thread
            self._stopped = True
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()  # returns once serve_forever has left its loop
        server.server_close()  # joins in-flight request threads
        thread.join()

    @property
    def port(self) -> int:
        """The bound port (the free port chosen for ``port=0``). Only while started."""
        server = self._server
        if server is None:
            raise RuntimeError("the server is not running")
        return server.server_port

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server (IPv6 hosts in brackets)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> ObservabilityServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ProbedService(Protocol):
    """What a service shows on its probes: its metrics registry and its two health checks."""

    @property
    def registry(self) -> CollectorRegistry: ...

    def healthz(self) -> tuple[bool, str]: ...

    def readyz(self) -> tuple[bool, str]: ...


def serve_probes(service: ProbedService, *, host: str, port: int) -> ObservabilityServer:
    """Start serving ``service``'s ``/metrics``, ``/healthz`` and ``/readyz`` (every service
    the same way); stop the returned server when the service stops."""
    server = ObservabilityServer(
        service.registry, healthz=service.healthz, readyz=service.readyz, host=host, port=port
    )
    server.start()
    return server


# --- logging -------------------------------------------------------------------------------------

LOG_LEVELS: Final[dict[str, int]] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
"""The level names :func:`configure_logging` accepts (any case)."""

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRS: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)
_HANDLER_MARK: Final = "_informer_bus_handler"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and k[:1] != "_"}


def parse_log_level(level: str) -> int:
    """The ``logging`` level for a name such as ``"info"``; ``ValueError`` (one line) otherwise."""
    number = LOG_LEVELS.get(level.strip().lower()) if isinstance(level, str) else None
    if number is None:
        raise ValueError(
            f"invalid log level {level!r}: expected one of debug, info, warning, error, critical"
        )
    return number


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``timestamp`` (UTC, ISO 8601, ms), ``level``, ``logger``,
    ``message``, then every ``extra=`` field, and ``exception`` / ``stack`` when present.

    Log pipelines index fields, not prose: ``extra={"shard": 3}`` becomes a queryable
    ``"shard": 3``. An extra named like a base field gets a trailing ``_`` instead of replacing
    it; values orjson cannot encode are written as ``str(value)``.
    """

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            payload["exception"] = record.exc_text
        if record.stack_info:
            payload["stack"] = self.formatStack(record.stack_info)
        for key, value in _extras(record).items():
            payload[f"{key}_" if key in payload else key] = value
        try:
            return orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits
            safe = {k: v if isinstance(v, str) else repr(v) for k, v in payload.items()}
            return orjson.dumps(safe).decode()


class TextFormatter(logging.Formatter):
    """``2024-05-01 12:00:00,123 INFO    logger: message key=value ...`` for humans."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = _extras(record)
        if not extras:
            return text
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in extras.items())
        head, sep, tail = text.partition("\n")  # keep fields on the message line
        return f"{head} {fields}{sep}{tail}"


def _text_value(value: object) -> str:
    text = str(value)
    return repr(text) if not text or any(c.isspace() for c in text) else text


class RedactingFilter(logging.Filter):
    """Masks secrets anywhere in a record: message and args, exception text, string extras.

    Installed on a handler, it sees every record that handler writes (from any logger) and
    rewrites the record in place, so the secret never reaches the formatter. Each secret is also
    masked in its URL-encoded form (a password inside ``redis://:p%40ss@host``). Longer secrets
    are matched first, so one that contains another is masked whole. Empty strings are ignored.
    :meth:`add_secret` adds one later (a token read after startup); thread-safe.
    """

    def __init__(self, secrets: Iterable[str] = (), *, mask: str = "***") -> None:
        super().__init__()
        self._mask = mask
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, secret: str) -> None:
        """Mask ``secret`` (and its URL-encoded form) from now on."""
        if not secret:
            return
        with self._lock:
            self._secrets.update({secret, quote(secret, safe="")})
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, ordered)))

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by the mask."""
        pattern = self._pattern
        return text if pattern is None else pattern.sub(self._mask, text)

    def filter(self, record: logging.LogRecord) -> bool:
        if self._pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it for the handler to report
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        for key, value in _extras(record).items():
            if isinstance(value, str):
                setattr(record, key, self.redact(value))
        return True


def configure_logging(
    level: str,
    json: bool,
    *,
    redact: Iterable[str] = (),
    stream: IO[str] | None = None,
) -> RedactingFilter:
    """Send all logs to ``stream`` (stderr) as JSON lines or text, at ``level`` and above.

    Replaces the handler an earlier call installed (so it is safe to call again, e.g. after
    parsing settings) and leaves other handlers alone (pytest's capture, a host application's).
    ``redact``: secrets to mask; the returned :class:`RedactingFilter` takes more later.
    Raises ``ValueError`` for an unknown level, before changing anything.
    """
    number = parse_log_level(level)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
            old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    redactor = RedactingFilter(redact)
    handler.addFilter(redactor)
    root.addHandler(handler)
    root.setLevel(number)
    return redactor
