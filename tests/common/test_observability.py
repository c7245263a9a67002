"""Metrics/health HTTP server and structured logging (common/observability.py).

The server is exercised with real HTTP requests over a socket (http.client), on a free port.
"""

from __future__ import annotations

import gzip
import http.client
import io
import logging
import socket
import threading
import time
from collections.abc import Iterator

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from common.observability import (
    Heartbeat,
    JsonFormatter,
    ObservabilityServer,
    RedactingFilter,
    combine_checks,
    configure_logging,
    parse_log_level,
)


def get(
    server: ObservabilityServer, path: str, method: str = "GET", **headers: str
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


class State:
    """Mutable answers for the probes."""

    def __init__(self) -> None:
        self.alive = (True, "loop alive")
        self.ready = (False, "shard 3 not synced")

    def healthz(self) -> tuple[bool, str]:
        return self.alive

    def readyz(self) -> tuple[bool, str]:
        return self.ready


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("ib_test_deltas", "Deltas seen by the test", ["type"], registry=registry).labels(
        "Added"
    ).inc(3)
    return registry


@pytest.fixture
def state() -> State:
    return State()


@pytest.fixture
def server(registry: CollectorRegistry, state: State) -> Iterator[ObservabilityServer]:
    with ObservabilityServer(registry, healthz=state.healthz, readyz=state.readyz) as server:
        yield server


# --- HTTP ----------------------------------------------------------------------------------------


def test_metrics_expose_the_given_registry_only(
    server: ObservabilityServer, registry: CollectorRegistry
) -> None:
    status, headers, body = get(server, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain")
    text = body.decode()
    assert 'ib_test_deltas_total{type="Added"} 3.0' in text
    # the process-global default registry (python_gc_*, process_*) is not exposed
    assert "python_gc_objects_collected_total" not in text
    Gauge("ib_test_late", "Registered after start", registry=registry).set(7)
    assert "ib_test_late 7.0" in get(server, "/metrics")[2].decode()


def test_metrics_negotiate_openmetrics_and_gzip(server: ObservabilityServer) -> None:
    status, headers, body = get(server, "/metrics", Accept="application/openmetrics-text")
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert body.decode().rstrip().endswith("# EOF")
    status, headers, body = get(server, "/metrics", **{"Accept-Encoding": "gzip"})
    assert headers["content-encoding"] == "gzip"
    assert b"ib_test_deltas_total" in gzip.decompress(body)


def test_probes_reflect_the_callables(server: ObservabilityServer, state: State) -> None:
    status, headers, body = get(server, "/healthz")
    assert (status, orjson.loads(body)) == (200, {"status": "ok", "detail": "loop alive"})
    assert headers["content-type"] == "application/json"
    status, _, body = get(server, "/readyz")
    assert (status, orjson.loads(body)) == (
        503,
        {"status": "failing", "detail": "shard 3 not synced"},
    )

    state.ready = (True, "all shards synced")
    state.alive = (False, "loop stuck for 61.0 s")
    assert get(server, "/readyz")[0] == 200
    status, _, body = get(server, "/healthz")
    assert (status, orjson.loads(body)["detail"]) == (503, "loop stuck for 61.0 s")
    assert get(server, "/healthz?verbose=1")[0] == 503  # the query string does not matter


def test_a_raising_check_is_failing_not_fatal(registry: CollectorRegistry) -> None:
    def broken() -> tuple[bool, str]:
        raise ConnectionError("redis down")

    with ObservabilityServer(registry, readyz=broken) as server:
        status, _, body = get(server, "/readyz")
        assert status == 503
        assert orjson.loads(body)["detail"] == "check raised ConnectionError: redis down"
        assert get(server, "/healthz")[0] == 200  # no check configured: ok
        assert get(server, "/readyz")[0] == 503  # and the server still answers


def test_unknown_paths_head_and_other_methods(server: ObservabilityServer) -> None:
    assert get(server, "/")[0] == 404
    assert get(server, "/metrics/extra")[0] == 404
    status, headers, body = get(server, "/healthz", method="HEAD")
    assert (status, body) == (200, b"")
    assert int(headers["content-length"]) > 0
    assert get(server, "/healthz", method="POST")[0] == 501


def test_requests_are_logged_at_debug_only(
    server: ObservabilityServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="common.observability"):
        get(server, "/healthz")
    (record,) = [r for r in caplog.records if "/healthz" in r.getMessage()]
    assert record.levelno == logging.DEBUG


def test_port_zero_url_stop_joins_and_lifecycle(registry: CollectorRegistry) -> None:
    server = ObservabilityServer(registry)
    with pytest.raises(RuntimeError):
        _ = server.port
    server.start()
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"
    names = [t.name for t in threading.enumerate()]
    assert f"observability-http[127.0.0.1:{server.port}]" in names
    with pytest.raises(RuntimeError):
        server.start()
    port = server.port
    server.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("observability-http")]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    server.stop()  # idempotent
    with pytest.raises(RuntimeError):
        server.start()


def test_an_idle_client_does_not_block_stop(registry: CollectorRegistry) -> None:
    server = ObservabilityServer(registry, request_timeout=0.3)
    server.start()
    idle = socket.create_connection(("127.0.0.1", server.port))
    try:
        time.sleep(0.05)  # the server accepted it and a request thread waits for a request line
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
    finally:
        idle.close()


def test_two_servers_in_one_process_do_not_collide() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    Counter("ib_first", "first", registry=first).inc()
    Counter("ib_second", "second", registry=second).inc()
    with ObservabilityServer(first) as a, ObservabilityServer(second) as b:
        assert a.port != b.port
        a_text, b_text = get(a, "/metrics")[2], get(b, "/metrics")[2]
    assert b"ib_first_total" in a_text
    assert b"ib_second" not in a_text
    assert b"ib_second_total" in b_text


def test_bad_arguments(registry: CollectorRegistry) -> None:
    with pytest.raises(ValueError, match="port"):
        ObservabilityServer(registry, port=70000)
    with pytest.raises(TypeError, match="CollectorRegistry"):
        ObservabilityServer(object())  # type: ignore[arg-type]
    with ObservabilityServer(registry) as taken, pytest.raises(OSError):
        ObservabilityServer(registry, port=taken.port).start()


def test_heartbeat_and_combined_checks() -> None:
    now = [100.0]
    beat = Heartbeat(5.0, name="watch loop", clock=lambda: now[0])
    assert beat.check()[0]  # creation counts as a beat
    now[0] += 4.0
    beat.beat()
    now[0] += 4.0
    assert beat.check() == (True, "watch loop alive (4.0 s since last progress)")
    now[0] += 2.0
    assert beat.check() == (False, "watch loop has not made progress for 6.0 s")
    with pytest.raises(ValueError):
        Heartbeat(0)

    synced = (False, "not synced")
    check = combine_checks(beat.check, lambda: synced)
    assert check() == (False, "watch loop has not made progress for 6.0 s; not synced")
    beat.beat()
    synced = (True, "synced")
    assert check() == (True, "ok")


# --- logging -------------------------------------------------------------------------------------


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """Restore the root logger's handlers and level after configure_logging changed them."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield root
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_lines_parse_and_carry_extras(root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging("INFO", json=True, stream=stream)
    logger = logging.getLogger("informer_bus.test")
    logger.debug("not shown")
    logger.info(
        "published %d deltas", 12, extra={"shard": 3, "resource": "pods", "level": "x", "b": b"z"}
    )
    try:
        raise KeyError("gone")
    except KeyError:
        logger.exception("failed")
    first, second = (orjson.loads(line) for line in lines(stream))
    assert first["message"] == "published 12 deltas"
    assert (first["level"], first["logger"]) == ("INFO", "informer_bus.test")
    assert (first["shard"], first["resource"]) == (3, "pods")
    assert first["level_"] == "x"  # an extra never replaces a base field
    assert first["b"] == "b'z'"  # not JSON-encodable: written as str()
    assert first["timestamp"].endswith("Z")
    assert "T" in first["timestamp"]
    assert second["level"] == "ERROR"
    assert "KeyError: 'gone'" in second["exception"]


def test_json_formatter_survives_unencodable_values() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "big", (), None)
    record.huge = 2**70
    data = orjson.loads(JsonFormatter().format(record))
    assert data["huge"] == str(2**70)
    assert data["message"] == "big"


def test_text_format_is_readable_with_extras(root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    configure_logging("debug", json=False, stream=stream)
    logging.getLogger("informer_bus.test").debug(
        "hello %s", "world", extra={"shard": 3, "k": "a b"}
    )
    (line,) = lines(stream)
    assert "DEBUG" in line
    assert "informer_bus.test: hello world shard=3 k='a b'" in line


def test_configure_logging_replaces_only_its_own_handler(root_logger: logging.Logger) -> None:
    before = list(root_logger.handlers)
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", json=True, stream=first)
    configure_logging("warning", json=True, stream=second)
    assert len(root_logger.handlers) == len(before) + 1
    assert all(h in root_logger.handlers for h in before)
    logging.getLogger("informer_bus.test").warning("once")
    assert first.getvalue() == ""
    assert len(lines(second)) == 1
    assert root_logger.level == logging.WARNING


def test_redaction_masks_secrets_everywhere(root_logger: logging.Logger) -> None:
    stream = io.StringIO()
    redactor = configure_logging("info", json=True, redact=["s3cr@t", ""], stream=stream)
    logger = logging.getLogger("informer_bus.test")
    logger.info("password is s3cr@t")
    logger.info("connecting to %s", "redis://:s3cr%40t@redis:6379/0")
    logger.info("auth", extra={"header": "Bearer s3cr@t"})
    try:
        raise ConnectionError("AUTH s3cr@t rejected")
    except ConnectionError:
        logger.exception("redis %s", "down")
    redactor.add_secret("tok-123")
    logger.info("token %s", "tok-123")
    output = stream.getvalue()
    assert "s3cr" not in output
    assert "tok-123" not in output
    records = [orjson.loads(line) for line in lines(stream)]
    assert records[0]["message"] == "password is ***"
    assert records[1]["message"] == "connecting to redis://:***@redis:6379/0"
    assert records[2]["header"] == "Bearer ***"
    assert records[3]["message"] == "redis down"
    assert "AUTH *** rejected" in records[3]["exception"]
    assert records[4]["message"] == "token ***"


def test_redaction_prefers_the_longest_secret_and_tolerates_bad_formats() -> None:
    redactor = RedactingFilter(["abc", "abcdef"], mask="<hidden>")
    assert redactor.redact("x abcdef y abc") == "x <hidden> y <hidden>"
    assert RedactingFilter().redact("abc") == "abc"
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d abc", ("not a number",), None)
    assert redactor.filter(record)  # left for the handler to report, not raised into the caller


@pytest.mark.parametrize("level", ["verbose", "", "10", "info\nroot"])
def test_bad_level_is_a_clear_one_line_error(level: str, root_logger: logging.Logger) -> None:
    handlers = list(root_logger.handlers)
    with pytest.raises(ValueError, match="invalid log level") as caught:
        configure_logging(level, json=True)
    assert "\n" not in str(caught.value)
    assert "debug, info, warning, error, critical" in str(caught.value)
    assert root_logger.handlers == handlers  # nothing changed


def test_level_names_are_case_insensitive() -> None:
    assert parse_log_level("Warning") == logging.WARNING
    assert parse_log_level(" warn ") == logging.WARNING
    assert parse_log_level("CRITICAL") == logging.CRITICAL
