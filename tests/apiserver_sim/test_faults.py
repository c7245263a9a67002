"""Point 8: every fault, through the Python API and the /_sim/ HTTP control endpoints."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, watch

from apiserver_sim import Simulator
from apiserver_sim.faults import BAD_LINES, MALFORMED_LINE
from tests.support.objects import pod
from tests.support.simulator import FAST
from tests.support.watch_http import raw_lines


def _control(http: urllib3.PoolManager, sim: Simulator, action: str, **body: Any) -> Any:
    resp = http.request("POST", f"{sim.url}/_sim/{action}", body=orjson.dumps(body),
                        headers={"Content-Type": "application/json"})  # fmt: skip
    assert resp.status in (200, 202), resp.data
    return orjson.loads(resp.data)


class _Collector(threading.Thread):
    """Runs one Watch.stream (with a server-side timeout) and records events."""

    def __init__(self, v1: client.CoreV1Api, rv: str, timeout: int = 3) -> None:
        super().__init__(name="test-watch")
        self.v1, self.rv, self.timeout = v1, rv, timeout
        self.events: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.started_at = time.monotonic()
        self.ended_at = 0.0

    def run(self) -> None:
        try:
            for event in watch.Watch().stream(
                self.v1.list_namespaced_pod, "default", resource_version=self.rv,
                timeout_seconds=self.timeout,
            ):  # fmt: skip
                self.events.append({**event, "at": time.monotonic()})
        except BaseException as exc:
            self.error = exc
        self.ended_at = time.monotonic()


def _wait_watching(sim: Simulator, count: int = 1) -> None:
    """Until ``count`` watches are open on the server (a liveness deadline, not a timing)."""
    deadline = time.monotonic() + 20
    while sim.active_watches != count:
        assert time.monotonic() < deadline
        time.sleep(0.01)


@pytest.mark.parametrize("via_http", [False, True])
def test_drop_watches(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager, via_http: bool
) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    collector = _Collector(v1, rv, timeout=30)
    collector.start()
    _wait_watching(sim)
    dropped = _control(http, sim, "drop-watches")["dropped"] if via_http else sim.drop_watches()
    assert dropped == 1
    collector.join(20)  # far below the watch's own 30 s timeout: the drop ended it
    assert not collector.is_alive() and collector.error is None
    _wait_watching(sim, 0)


def test_stall_watches(sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    collector = _Collector(v1, rv, timeout=3)
    collector.start()
    _wait_watching(sim)
    _control(http, sim, "stall-watches", seconds=0.6)
    stalled_at = time.monotonic()
    sim.create("pods", pod("during-stall"))
    collector.join(10)
    assert [e["type"] for e in collector.events] == ["ADDED"]
    assert collector.events[0]["at"] - stalled_at >= 0.5


def test_compact_via_http(sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    sim.create("pods", pod("a"))
    compacted = _control(http, sim, "compact")["compacted"]
    assert int(compacted) == sim.resource_version
    _, lines = raw_lines(http, f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}")
    assert lines[0]["object"]["code"] == 410


def test_silent_mutations_emit_no_event_but_change_state(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    v1.create_namespaced_pod("default", pod("kept"))
    v1.create_namespaced_pod("default", pod("gone"))
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    sim.silent_create("pods", pod("ghost"))
    sim.silent_update("pods", "default/kept", {"metadata": {"labels": {"silently": "changed"}}})
    _control(http, sim, "silent-delete", resource="pods", key="default/gone")
    touched = _control(http, sim, "silent-mutation", resource="pods", count=1)["touched"]
    assert touched == ["default/ghost"]
    w = watch.Watch()
    events = list(w.stream(v1.list_namespaced_pod, "default", resource_version=rv,
                           allow_watch_bookmarks=True, timeout_seconds=1))  # fmt: skip
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert int(w.resource_version) == sim.resource_version  # RV moved past the missed window
    listed = {p.metadata.name: p for p in v1.list_namespaced_pod("default").items}
    assert set(listed) == {"kept", "ghost"}
    assert listed["kept"].metadata.labels["silently"] == "changed"


def test_restart_keeps_state_and_rv_counter(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    v1.create_namespaced_pod("default", pod("before"))
    rv_before = v1.list_namespaced_pod("default").metadata.resource_version
    collector = _Collector(v1, rv_before, timeout=30)
    collector.start()
    _wait_watching(sim)
    port = sim.port
    sim.restart(downtime=0.2)
    collector.join(20)  # the restart ended it (its own timeout is 30 s)
    assert not collector.is_alive()
    assert sim.port == port
    after = v1.create_namespaced_pod("default", pod("after"))
    assert int(after.metadata.resource_version) > int(rv_before)
    assert {p.metadata.name for p in v1.list_namespaced_pod("default").items} == {"before", "after"}
    # history survived: a watch from the old RV replays what happened since
    events = list(watch.Watch().stream(v1.list_namespaced_pod, "default",
                                       resource_version=rv_before, timeout_seconds=1))  # fmt: skip
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "after")]
    # and through the control endpoint (asynchronous: answers 202 first)
    _control(http, sim, "restart", downtime=0.1)
    deadline = time.monotonic() + 5
    while True:
        try:
            assert v1.read_namespaced_pod("after", "default").metadata.name == "after"
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_malformed_lines(sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    sim.create("pods", pod("a"))
    _control(http, sim, "malformed", count=1)
    _, lines = raw_lines(
        http, f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    )
    assert lines[0] == MALFORMED_LINE.rstrip(b"\n")  # not JSON
    assert lines[1]["type"] == "ADDED"


@pytest.mark.parametrize("after_first_line", [False, True], ids=["first", "after-first-line"])
@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_malformed_lines_of_every_kind_in_either_place(
    sim: Simulator, http: urllib3.PoolManager, kind: str, after_first_line: bool
) -> None:
    rv = sim.resource_version
    sim.create("pods", pod("a"))
    sim.create("pods", pod("b"))
    armed = _control(http, sim, "malformed", count=1, kind=kind, afterFirstLine=after_first_line)
    assert armed == {"pending": 1}
    resp = http.request(
        "GET", f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    )
    lines = resp.data.split(b"\n")[:-1]
    bad = BAD_LINES[kind].rstrip(b"\n")
    assert lines.count(bad) == 1 and lines.index(bad) == (1 if after_first_line else 0)
    lines.remove(bad)
    events = [orjson.loads(line) for line in lines]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]
    assert sim.faults.snapshot().malformed_pending == 0


def test_malformed_lines_refuse_an_unknown_kind(sim: Simulator, http: urllib3.PoolManager) -> None:
    resp = http.request("POST", f"{sim.url}/_sim/malformed",
                        body=orjson.dumps({"kind": "nonsense"}),
                        headers={"Content-Type": "application/json"})  # fmt: skip
    assert resp.status == 400 and b"truncated" in resp.data
    assert sim.faults.snapshot().malformed_pending == 0


def test_fail_next_500(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.fail_next(2, status=500)
    for _ in range(2):
        with pytest.raises(client.ApiException) as exc:
            v1.list_namespaced_pod("default")
        assert exc.value.status == 500
        assert '"reason":"InternalError"' in exc.value.body
    assert v1.list_namespaced_pod("default").items == []


def test_fail_next_429_carries_retry_after(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    sim.fail_next(1, status=429, retry_after=2)
    resp = http.request("GET", f"{sim.url}/api/v1/pods", retries=False)
    assert resp.status == 429
    assert resp.headers["Retry-After"] == "2"
    assert orjson.loads(resp.data)["reason"] == "TooManyRequests"
    # The official client (urllib3) honours Retry-After on 429 and then succeeds.
    sim.fail_next(1, status=429, retry_after=1)
    started = time.monotonic()
    assert v1.list_namespaced_pod("default").items == []
    assert time.monotonic() - started >= 0.9


def test_fail_next_via_http_hits_watches_too(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    _control(http, sim, "fail-next", count=1, status=500)
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(v1.list_namespaced_pod, "default", timeout_seconds=1))
    assert exc.value.status == 500


def test_slow_responses(sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    _control(http, sim, "slow", seconds=0.3)
    started = time.monotonic()
    v1.list_namespaced_pod("default")
    assert time.monotonic() - started >= 0.3
    assert sim.faults.snapshot().slowed_requests == 1
    sim.slow_responses(0)
    v1.list_namespaced_pod("default")
    # Not timed (machines are noisy): the server's own counter says it did not delay it.
    stats = orjson.loads(http.request("GET", f"{sim.url}/_sim/stats").data)
    assert stats["faults"]["slow_seconds"] == 0
    assert stats["faults"]["slowed_requests"] == 1


def test_stop_right_after_a_restart_was_asked_for_does_not_race_it() -> None:
    """A test that asks for a restart and stops the simulator at once: the reply's callback (in
    the server thread, after the reply is written) may not have run yet. stop() must neither
    fail on the restart thread nor leave it to reopen the port afterwards."""
    simulator = Simulator(FAST).start()
    port = simulator.port
    try:
        simulator.front._request.after = []  # inside a request whose reply is not written yet
        assert simulator._control_action("POST", "restart", {"downtime": 0})[0] == 202
    finally:
        simulator.stop()  # was: RuntimeError "cannot join thread before it is started"
    assert not any(t.name == "apiserver-sim-restart" for t in threading.enumerate())
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
