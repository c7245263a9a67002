"""``subscribe --output cloudevents`` and ``--sink URL``: the event mapping, and delivery to a
real HTTP receiver that fails on purpose, checked with the official CloudEvents SDK."""

from __future__ import annotations

import random
import resource
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
import redis
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from common.deltas import DeltaType
from common.publication import ResourceLayout
from common.redis_layout import ShardKeys
from common.shard_routing import ShardKeyChoice
from common.wire import DeltaEnvelope
from informer_bus.cloudevents import EventMapper, event_id, event_type
from informer_bus.subscription import SubscribedDelta
from tests.reflector.publisher.support import TS, added, deleted, delta, obj, updated
from tests.support.bus import Bus
from tests.support.redis_server import RedisServer
from tests.support.subscribe_cli import (
    PROGRAM,
    SHARDS,
    Publisher,
    json_lines,
    run_subscribe,
    start_subscribe,
)
from tests.support.waiting import wait_until

PREFIX = "dev.knative.apiserver.resource."
SHORT = {"Added": "add", "Updated": "update", "Deleted": "delete"}
GROUP = "ce"


def expected_id(kind: str, key: str, rv: str) -> str:
    return f"uid-{key}/{rv}/{SHORT[kind]}"


def parse(headers: dict[str, str], body: bytes) -> BaseCloudEvent:
    """The SDK's reading of a request: binary mode if any ce-* header, else structured."""
    return from_http(HTTPMessage(headers, body), JSONFormat(), CloudEvent)


class Receiver:
    """A real HTTP receiver on a free port that misbehaves on purpose.

    Each request draws a fate: a 500 (``fail``), the connection closed without an answer before
    the event is recorded (``drop``) or after it (``lost_answer``: processed, but the sender
    cannot know, so it sends it again), else the event is parsed with the SDK, recorded, and
    answered 202 -- or 422 when ``refuse`` says so. :meth:`down` closes the listening socket
    (connections are refused) and makes open keep-alive connections close at their next request.
    """

    def __init__(
        self,
        *,
        fail: float = 0.0,
        drop: float = 0.0,
        lost_answer: float = 0.0,
        refuse: Callable[[BaseCloudEvent], bool] | None = None,
    ) -> None:
        self._fates = (fail, drop, lost_answer)
        self._refuse = refuse or (lambda _event: False)
        self._rng = random.Random(18)
        self._lock = threading.Lock()
        self.events: list[BaseCloudEvent] = []
        self._ids: Counter[str] = Counter()
        self.modes: Counter[str] = Counter()
        self.fates: Counter[str] = Counter()
        self.problems: list[str] = []
        self._up = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.up()
        self.port = self._address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/events"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {name.lower(): value for name, value in self.headers.items()}
                status = receiver.handle(headers, body)
                if status is None:
                    self.close_connection = True
                    return
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away mid-request: nothing to report

        self._server = Server(("127.0.0.1", self.port), Handler)
        self._address = self._server.server_address
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._up = True
        self._thread.start()

    def down(self) -> None:
        self._up = False
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None

    def handle(self, headers: dict[str, str], body: bytes) -> int | None:
        """The status to answer, or ``None`` to close the connection without one."""
        if not self._up:
            return None
        with self._lock:
            draw = self._rng.random()
        fail, drop, lost_answer = self._fates
        if draw < fail:
            return self._fate("fail", 500)
        if draw < fail + drop:
            return self._fate("drop", None)
        try:
            event = parse(headers, body)
        except Exception as exc:  # the test fails on it: report it, do not crash the server
            with self._lock:
                self.problems.append(f"{type(exc).__name__}: {exc}")
            return 400
        if self._refuse(event):
            return self._fate("refused", 422)
        with self._lock:
            self.events.append(event)
            self._ids[event.get_id()] += 1
            self.modes["binary" if "ce-id" in headers else "structured"] += 1
        if draw < fail + drop + lost_answer:
            return self._fate("lost_answer", None)
        return 202

    def _fate(self, name: str, status: int | None) -> int | None:
        with self._lock:
            self.fates[name] += 1
        return status

    def ids(self) -> Counter[str]:
        """How many times each event id arrived (accepted or not answered)."""
        with self._lock:
            return Counter(self._ids)

    def distinct(self) -> int:
        with self._lock:
            return len(self._ids)


@pytest.fixture
def receiver_factory() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(**options: Any) -> Receiver:
        made.append(Receiver(**options))
        return made[-1]

    yield make
    for receiver in made:
        receiver.down()


def start_sink(redis_url: str, url: str, *args: str) -> subprocess.Popen[str]:
    return start_subscribe(
        redis_url, "pods", "--sink", url, "--sink-backoff", "0.002", "--sink-backoff-max", "0.3",
        "--sink-timeout", "5", "--shards", str(SHARDS), *args,
    )  # fmt: skip


def stop(process: subprocess.Popen[str], signum: int = signal.SIGTERM) -> tuple[str, str]:
    """Signal the subscriber and collect its output (killed if it does not stop)."""
    try:
        process.send_signal(signum)
        return process.communicate(timeout=30)
    finally:
        process.kill()
        process.wait()


def pending(client: redis.Redis) -> int:
    return sum(
        int(client.xpending(ShardKeys("ib", "pods", shard).stream, GROUP)["pending"])
        for shard in range(SHARDS)
    )


def wait_for_group(client: redis.Redis, process: subprocess.Popen[str]) -> None:
    """Until the durable group exists on every shard: deltas published from then on reach it
    through the streams (not through its initial list)."""

    def created() -> bool:
        if process.poll() is not None:
            _, stderr = process.communicate()
            pytest.fail(f"the subscriber exited with {process.returncode}: {stderr}")
        for shard in range(SHARDS):
            stream = ShardKeys("ib", "pods", shard).stream
            try:
                groups = client.xinfo_groups(stream)
            except redis.ResponseError:
                return False
            if not any(g["name"] in (GROUP, GROUP.encode()) for g in groups):
                return False
        return True

    wait_until(created, 60, "the subscriber's group on every shard")


def check_event(event: BaseCloudEvent) -> None:
    """The required attributes and our mapping, on an event the SDK parsed."""
    attributes = event.get_attributes()
    assert attributes["specversion"] == "1.0"
    assert event.get_type().removeprefix(PREFIX) in {"add", "update", "delete"}
    uid, rv, short = event.get_id().rsplit("/", 2)
    key = uid.removeprefix("uid-")
    assert event.get_type() == PREFIX + short
    assert event.get_subject() == key
    namespace = key.partition("/")[0]
    assert event.get_source() == f"/api/v1/namespaces/{namespace}/pods"
    assert event.get_datacontenttype() == "application/json"
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["metadata"]["resourceVersion"] == rv
    assert event.get_time() is not None
    assert attributes["ibstream"].startswith("ib:{pods:")


@pytest.mark.timeout(240)
def test_ten_thousand_deltas_reach_a_flaky_receiver_once_each_after_dedupe(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    publisher: Publisher,
    bus: Bus,
    receiver_factory: Callable[..., Receiver],
) -> None:
    receiver = receiver_factory(fail=0.08, drop=0.06, lost_answer=0.06)
    publisher.publish(added("ns/seed", "1"))
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = start_sink(redis_server.url, receiver.url, "--group", GROUP)
    try:
        wait_for_group(redis_client, process)
        rv = 10
        batch = []
        for i in range(2500):
            key = f"ns/p{i:04d}"
            batch += [added(key, str(rv)), updated(key, str(rv + 1)), updated(key, str(rv + 2))]
            batch.append(deleted(key, str(rv + 3)))
            rv += 4
            if len(batch) >= 400:
                publisher.publish(*batch)
                batch = []
        publisher.publish(*batch)
        expected = {expected_id("Added", "ns/seed", "1")} | {
            expected_id(e.type, e.key, e.rv) for e in bus.all_entries() if e.key != "ns/seed"
        }
        assert len(expected) == 10_001

        # the receiver goes away for 5 s in the middle
        wait_until(lambda: receiver.distinct() >= 4000, 120, "4000 events", interval=0.2)
        receiver.down()
        time.sleep(5)
        receiver.up()
        wait_until(
            lambda: receiver.distinct() >= len(expected) or process.poll() is not None,
            180,
            lambda: f"every event received ({receiver.distinct()} of {len(expected)})",
            interval=0.2,
        )
        elapsed = time.monotonic() - started
        stdout, stderr = stop(process)
    finally:
        process.kill()
        process.wait()

    assert receiver.problems == []
    ids = receiver.ids()
    assert set(ids) == expected  # complete, and nothing else
    assert all(count >= 1 for count in ids.values())
    duplicates = sum(count - 1 for count in ids.values())
    assert duplicates > 0  # lost answers were sent again, with the same id
    assert receiver.modes == Counter(binary=len(receiver.events))
    for event in receiver.events:
        check_event(event)
    assert process.returncode == 0, stderr
    assert stdout == ""
    assert "Traceback" not in stderr
    summary = stderr.splitlines()[-1]
    sent = int(summary.split("sink: ")[1].split()[0])
    retried = int(summary.split(", ")[1].split()[0])
    assert sent >= len(expected)
    assert retried >= sum(receiver.fates[f] for f in ("fail", "drop", "lost_answer"))
    assert pending(redis_client) == 0  # everything accepted was acknowledged
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    print(
        f"\n10k sink: {elapsed:.1f} s to deliver, {retried} retries, {duplicates} duplicates, "
        f"fates {dict(receiver.fates)}, subscriber CPU {cpu:.1f} s; {summary}"
    )


def test_a_receiver_that_is_down_loses_nothing_and_a_restart_resumes(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    publisher: Publisher,
    bus: Bus,
    receiver_factory: Callable[..., Receiver],
) -> None:
    receiver = receiver_factory()
    publisher.publish(added("ns/seed", "1"))
    process = start_sink(redis_server.url, receiver.url, "--group", GROUP)
    try:
        wait_for_group(redis_client, process)
        wait_until(lambda: receiver.distinct() == 1, 60, "the seed event")
        receiver.down()
        publisher.publish(*(added(f"ns/p{i}", str(10 + i)) for i in range(40)))
        wait_until(lambda: pending(redis_client) > 0, 60, "deltas delivered to the group")
        time.sleep(0.5)  # some retries against the closed port
        stdout, stderr = stop(process)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "not acknowledged" in stderr
    assert stderr.splitlines()[-1].startswith(f"{PROGRAM}: sink: 1 sent, ")
    assert pending(redis_client) > 0  # nothing unaccepted was acknowledged

    receiver.up()
    process = start_sink(redis_server.url, receiver.url, "--group", GROUP)
    try:
        wait_until(lambda: receiver.distinct() == 41, 60, "every event after the restart")
        stdout, stderr = stop(process, signal.SIGINT)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr  # a clean stop, whichever signal asked for it
    assert stdout == ""
    assert set(receiver.ids()) == {expected_id(e.type, e.key, e.rv) for e in bus.all_entries()}
    assert pending(redis_client) == 0


def test_structured_mode_and_a_permanent_refusal_is_skipped_with_one_line(
    redis_server: RedisServer,
    redis_client: redis.Redis,
    publisher: Publisher,
    bus: Bus,
    receiver_factory: Callable[..., Receiver],
) -> None:
    receiver = receiver_factory(fail=0.1, refuse=lambda event: event.get_subject() == "ns/bad")
    publisher.publish(added("ns/seed", "1"))
    process = start_sink(
        redis_server.url, receiver.url, "--group", GROUP, "--sink-mode", "structured"
    )
    try:
        wait_for_group(redis_client, process)
        publisher.publish(added("ns/a", "2"), added("ns/bad", "3"), updated("ns/a", "4"))
        wait_until(lambda: receiver.distinct() == 3, 60, "the accepted events")
        # ns/bad may sit on another shard than ns/a, so it may come last: wait for its refusal.
        wait_until(lambda: receiver.fates["refused"] >= 1, 60, "the refusal of ns/bad")
        stdout, stderr = stop(process)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert stdout == ""
    assert receiver.problems == []
    assert receiver.modes == Counter(structured=len(receiver.events))
    assert set(receiver.ids()) == {
        expected_id(*row) for row in [("Added", "ns/seed", "1"), ("Added", "ns/a", "2"),
                                      ("Updated", "ns/a", "4")]
    }  # fmt: skip
    for event in receiver.events:
        check_event(event)
    [refusal] = [line for line in stderr.splitlines() if "refused for good" in line]
    assert "uid-ns/bad/3/add" in refusal
    assert "HTTP 422" in refusal
    assert "Traceback" not in stderr
    assert ", 1 refused" in stderr.splitlines()[-1]
    assert pending(redis_client) == 0  # the refused delta was skipped (acknowledged)
    assert {e.key for e in bus.all_entries()} == {"ns/seed", "ns/a", "ns/bad"}


def test_without_group_the_sink_warns_that_delivery_is_best_effort(
    redis_server: RedisServer, publisher: Publisher, receiver_factory: Callable[..., Receiver]
) -> None:
    receiver = receiver_factory()
    publisher.publish(added("ns/a", "1"), updated("ns/a", "2"))
    process = start_sink(redis_server.url, receiver.url, "--from-beginning")
    try:
        wait_until(lambda: receiver.distinct() == 2, 60, "both events")
        _, stderr = stop(process)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    assert stderr.splitlines()[0].startswith(f"{PROGRAM}: warning: --sink without --group")
    assert set(receiver.ids()) == {"uid-ns/a/1/add", "uid-ns/a/2/update"}


def test_output_cloudevents_is_deterministic_and_parses(
    redis_server: RedisServer, publisher: Publisher
) -> None:
    publisher.publish(added("shop/web", "11"), updated("shop/web", "12"))
    publisher.publish(delta(DeltaType.DELETED, "shop/web", "12", tombstone=True))
    args = ("pods", "--from-beginning", "--output", "cloudevents", "--count", "3")

    first = run_subscribe(redis_server.url, *args)
    again = run_subscribe(redis_server.url, *args)

    assert first.returncode == 0, first.stderr
    assert first.stdout == again.stdout  # a replay is the same events, byte for byte
    lines = json_lines(first.stdout)
    assert [line["id"] for line in lines] == [
        "uid-shop/web/11/add", "uid-shop/web/12/update", "uid-shop/web/12/delete",
    ]  # fmt: skip
    events = [parse({"content-type": "application/cloudevents+json"}, orjson.dumps(line))
              for line in lines]  # fmt: skip
    for event in events:
        check_event(event)
    assert [event.get_extension("ibtombstone") for event in events] == [None, None, True]
    assert events[2].get_type() == PREFIX + "delete"


def envelope_delta(
    kind: DeltaType, key: str, rv: str, *, tombstone: bool = False, known: bool = True
) -> SubscribedDelta:
    body = obj(key, rv) if known else None
    uid = f"uid-{key}" if known else ""
    envelope = DeltaEnvelope(kind, key, rv if known else "", uid, body, TS, tombstone)
    return SubscribedDelta("ib:{pods:1}:deltas", 1, "1714567890250-3", envelope)


@pytest.mark.parametrize(
    ("kind", "short"),
    [(DeltaType.ADDED, "add"), (DeltaType.UPDATED, "update"), (DeltaType.REPLACED, "update"),
     (DeltaType.SYNC, "update"), (DeltaType.DELETED, "delete")],
)  # fmt: skip
def test_type_mapping_follows_knative_apiserversource(kind: DeltaType, short: str) -> None:
    assert event_type(kind) == f"dev.knative.apiserver.resource.{short}"
    assert event_id(envelope_delta(kind, "ns/a", "7")) == f"uid-ns/a/7/{short}"


def test_tombstones_sources_and_times() -> None:
    mapper = EventMapper("pods", None)
    tombstone = mapper.structured(envelope_delta(DeltaType.DELETED, "ns/a", "7", tombstone=True))
    assert tombstone["ibtombstone"] is True
    assert tombstone["id"] == "uid-ns/a/7/delete"
    assert tombstone["data"]["metadata"]["name"] == "a"
    assert tombstone["time"] == "2024-05-01T12:51:30.250000Z"
    assert tombstone["source"] == "/api/v1/namespaces/ns/pods"  # the object's apiVersion

    unknown = envelope_delta(DeltaType.DELETED, "ns/a", "", tombstone=True, known=False)
    event = mapper.structured(unknown)
    assert event["id"] == "ns/a/tombstone/1714567890250-3"  # its stream entry names it
    assert "data" not in event
    assert "datacontenttype" not in event
    assert event["source"] == "/api/namespaces/ns/pods"  # no version known at all
    assert "ibtombstone" not in mapper.structured(envelope_delta(DeltaType.DELETED, "ns/a", "8"))

    layout = ResourceLayout(4, ShardKeyChoice.parse("key"), "Deployment", "apps/v1", True)
    apps = EventMapper("deployments.apps", layout)
    assert apps.source(unknown) == "/apis/apps/v1/namespaces/ns/deployments"
    node = envelope_delta(DeltaType.ADDED, "node-1", "3")
    assert EventMapper("nodes", None).source(node) == "/api/v1/nodes"
    # binary mode's header encoding round-trips through the SDK
    parsed = parse(
        {"ce-specversion": "1.0", "ce-id": "x", "ce-source": "/a", "ce-type": "t",
         "ce-subject": "ns/caf%C3%A9 %22x%22", "content-type": "application/json"}, b"{}",
    )  # fmt: skip
    assert parsed.get_subject() == 'ns/café "x"'
