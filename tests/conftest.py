from __future__ import annotations

import gc
import os
import sys
import threading
import time
import tracemalloc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import settings

from common.settings import REDIS_URL_ENV
from tests.support import inherited_signals, socket_origins
from tests.support.redis_server import RedisServer

socket_origins.install()
inherited_signals.give_children_the_default_stop_signals()
# Every command falls back on $REDIS_URL (common/settings.py): the developer's must not reach a
# service or tool under test, which is told where its Redis is (the tests' own redis-server).
os.environ.pop(REDIS_URL_ENV, None)

# Fixtures defined beside what they serve, registered here for every test.
pytest_plugins = ["tests.support.simulator", "tests.support.bus"]

# No Hypothesis deadline: a timed assertion, and on a loaded 2-core machine a 0.1 ms example
# can take 250 ms once (seen in tests/processor/ownership/test_assignment.py). Per-test timeouts
# remain.
settings.register_profile("informer-bus", deadline=None)
settings.load_profile("informer-bus")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(Path(tmp_path_factory.mktemp("redis")))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on a flushed private database: each test starts from an empty Redis."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


_LEAKS: list[str] = []
"""Unclosed resources found by the per-module collection, reported in the terminal summary."""


@pytest.fixture(scope="module", autouse=True)
def leaks_are_collected_and_reported_per_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """Collect garbage after each module and report what it finds unclosed, naming the module.

    Without it, a socket left in a reference cycle surfaced at the next full collection as an
    error in whatever later, unrelated test ran then (filterwarnings=error), so the failure
    pointed at the wrong code and came and went with the collector's timing. Reported here,
    not failed, with the stack that created the socket (``tests/support/socket_origins.py``):
    one leak of this kind shows up now and then in a full run and has never been reproduced
    alone, so each report is the evidence to find its owner with.
    """
    yield
    unraisable: list[Any] = []
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            gc.collect()
    finally:
        sys.unraisablehook = previous_hook
    found = [_with_origin(str(w.message), w.source) for w in caught]
    found += [_with_origin(repr(u.exc_value), u.object) for u in unraisable]
    _LEAKS.extend(f"{request.node.nodeid}: {what}" for what in found)


def _with_origin(what: str, source: object) -> str:
    """``what``, and the stack that created ``source`` (a socket), or where tracemalloc saw it
    allocated (``python -X tracemalloc=25 -m pytest``), when known."""
    origin = socket_origins.origin_of(source)
    if origin is not None:
        return f"{what}\n  created by:\n{origin}"
    traced = tracemalloc.get_object_traceback(source) if source is not None else None
    if traced is not None:
        return f"{what}\n  allocated at:\n" + "\n".join(traced.format(most_recent_first=True))
    return what


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand the leaks found to the controller, which prints them."""
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:
        worker_output["leaks"] = list(_LEAKS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist, in the controller: collect what a finished worker found."""
    _LEAKS.extend(getattr(node, "workeroutput", {}).get("leaks", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _LEAKS:
        terminalreporter.section("unclosed resources found after a module (see conftest.py)")
        for line in _LEAKS:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves threads running: shutdown must be clean."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 2.0
    while True:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"
