"""The raw Kubernetes I/O layer against the API simulator over real HTTP: client loading,
LIST pages, WATCH streams, typed errors, the inactivity watchdog and cross-thread close."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client import ApiClient

from apiserver_sim import Simulator
from apiserver_sim.faults import BAD_LINES
from reflector_svc.api_errors import (
    ApiStatusError,
    ApiUnavailableError,
    KubeError,
    MalformedWatchEventError,
    ResourceExpiredError,
    SourceConfigError,
    TooLargeResourceVersionError,
    TooManyRequestsError,
    WatchInactiveError,
    WatchListUnsupportedError,
    error_from_status,
)
from reflector_svc.lister_watcher import KubeSource
from reflector_svc.resources import ResourceSpec, resolve
from reflector_svc.transport import load_api_client
from reflector_svc.watch_decoder import LineFramer, OverlongLine, WatchDecoder
from reflector_svc.watch_events import INITIAL_EVENTS_END, WatchEvent
from reflector_svc.watch_stream import WatchStream
from tests.support.bad_lines import BAD_LINE_REASONS
from tests.support.objects import pod
from tests.support.simulator import FAST

MakeSource = Callable[..., KubeSource]


def next_non_bookmark(stream: WatchStream) -> WatchEvent:
    for event in stream:
        if event.type != "BOOKMARK":
            return event
    raise AssertionError(f"watch ended ({stream.end_reason}) before the next event")


def pod_list(client: ApiClient) -> int:
    source = KubeSource(client, resolve(client, ResourceSpec.parse("pods")))
    return len(source.list_page(limit=0, timeout=5).items)


# ------------------------------------------------------------------------------ client loading


def _kubeconfig(path: Path, sim_url: str, dead_url: str, current: str) -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster: {{server: "{sim_url}/"}}
- name: dead
  cluster: {{server: "{dead_url}"}}
users:
- name: nobody
  user: {{}}
contexts:
- name: sim
  context: {{cluster: sim, user: nobody}}
- name: dead
  context: {{cluster: dead, user: nobody}}
current-context: {current}
""",
        encoding="utf-8",
    )
    return path


def test_load_with_url(sim: Simulator) -> None:
    sim.populate("pods", 3)
    with load_api_client(url=sim.url + "/") as client:
        assert client.configuration.host == sim.url
        assert pod_list(client) == 3


def test_load_from_kubeconfig_choosing_a_context(
    sim: Simulator, tmp_path: Path, dead_url: str
) -> None:
    sim.populate("pods", 2)
    path = _kubeconfig(tmp_path / "config", sim.url, dead_url, current="dead")
    with load_api_client(kubeconfig=str(path), context="sim") as client:
        assert client.configuration.host == sim.url
        assert pod_list(client) == 2
    # current-context is "dead"
    with load_api_client(kubeconfig=str(path)) as client, pytest.raises(ApiUnavailableError):
        pod_list(client)


def test_load_from_kubeconfig_env(
    sim: Simulator, tmp_path: Path, dead_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _kubeconfig(tmp_path / "config", sim.url, dead_url, current="sim")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
    with load_api_client() as client:
        assert client.configuration.host == sim.url
        assert pod_list(client) == 0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "kubeconfig not found: /nonexistent"),
        ({"url": "ftp://example.com"}, "must look like http(s)://host:port"),
        ({"url": "localhost:8001"}, "must look like http(s)://host:port"),
        ({"url": "http://x:1", "in_cluster": True}, "choose one source"),
        ({"url": "http://x:1", "context": "a"}, "cannot be combined"),
        ({"in_cluster": True}, "in-cluster config"),
    ],
)
def test_bad_sources_raise_source_config_error(
    kwargs: dict[str, Any], fragment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SourceConfigError) as info:
        load_api_client(**kwargs)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_context_raises_source_config_error(tmp_path: Path, dead_url: str) -> None:
    path = _kubeconfig(tmp_path / "config", dead_url, dead_url, current="sim")
    with pytest.raises(SourceConfigError) as info:
        load_api_client(kubeconfig=str(path), context="nope")
    assert "context 'nope'" in str(info.value)
    assert "\n" not in str(info.value)
    (tmp_path / "broken").write_text("{not yaml: [", encoding="utf-8")
    with pytest.raises(SourceConfigError):
        load_api_client(kubeconfig=str(tmp_path / "broken"))


# ------------------------------------------------------------------------------ LIST


def test_paginated_list_is_consistent(sim: Simulator, make_source: MakeSource) -> None:
    sim.populate("pods", 1200, seed=3)
    source = make_source("pods")
    pages = []
    token: str | None = None
    while True:
        page = source.list_page(resource_version=None, limit=500, continue_token=token, timeout=30)
        pages.append(page)
        token = page.continue_token
        if token is None:
            break
        # Changes between pages must not show: the token pins the first page's snapshot.
        sim.create("pods", pod(f"late-{len(pages)}"))
    assert [len(p.items) for p in pages] == [500, 500, 200]
    assert len({p.resource_version for p in pages}) == 1
    assert [p.remaining_item_count for p in pages] == [700, 200, None]
    keys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" for p in pages for o in p.items]
    assert len(set(keys)) == 1200 and keys == sorted(keys)
    assert not any(k.startswith("default/late-") for k in keys)
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for p in pages for o in p.items)


def test_list_stamps_kind_on_custom_resources(sim: Simulator, make_source: MakeSource) -> None:
    sim.create("widgets", {"metadata": {"name": "w1", "namespace": "shop"}, "spec": {"size": 3}})
    page = make_source("widgets.example.com@shop").list_page(limit=10)
    assert [(o["kind"], o["apiVersion"]) for o in page.items] == [("Widget", "example.com/v1")]


def test_list_with_namespace_and_selectors(sim: Simulator, make_source: MakeSource) -> None:
    sim.populate("pods", 50, seed=1)
    sim.create("pods", pod("web-1", "shop", app="web"))
    sim.create("pods", pod("web-2", "shop", app="web"))
    sim.create("pods", pod("db-1", "shop", app="db"))
    sim.create("pods", pod("web-3", "other", app="web"))

    def names(text: str) -> list[str]:
        items = make_source(text).list_page(limit=500).items
        return sorted(o["metadata"]["name"] for o in items)

    assert names("pods@shop") == ["db-1", "web-1", "web-2"]
    assert names("pods@shop?labelSelector=app%3Dweb") == ["web-1", "web-2"]
    assert names("pods?labelSelector=app%3Dweb") == ["web-1", "web-2", "web-3"]
    both = "pods?labelSelector=app+in+%28db%2Cweb%29&fieldSelector=metadata.name%21%3Dweb-2"
    assert names(both) == ["db-1", "web-1", "web-3"]
    assert names("pods@shop?fieldSelector=metadata.name%3Dweb-2") == ["web-2"]


def test_list_expired_continue_token(sim: Simulator, make_source: MakeSource) -> None:
    sim.populate("pods", 1200, seed=2)
    source = make_source("pods")
    first = source.list_page(limit=500)
    assert first.continue_token
    sim.create("pods", pod("after-first-page"))
    sim.compact()
    with pytest.raises(ResourceExpiredError) as info:
        source.list_page(limit=500, continue_token=first.continue_token)
    assert info.value.status == 410
    assert info.value.continue_expired
    assert info.value.continue_token  # the server's offer of an inconsistent continuation


def test_list_at_a_compacted_resource_version(sim: Simulator, make_source: MakeSource) -> None:
    sim.create("pods", pod("a"))
    old = str(sim.resource_version)
    sim.update("pods", "default/a", {"metadata": {"labels": {"x": "1"}}})
    sim.compact()
    with pytest.raises(ResourceExpiredError) as info:
        make_source("pods").list_page(
            resource_version=old, resource_version_match="Exact", limit=500
        )
    assert not info.value.continue_expired
    assert "too old resource version" in info.value.message


def test_list_at_a_future_resource_version(sim: Simulator, make_source: MakeSource) -> None:
    future = str(sim.resource_version + 1000)
    with pytest.raises(TooLargeResourceVersionError) as info:
        make_source("pods").list_page(
            resource_version=future, resource_version_match="NotOlderThan", limit=500
        )
    assert info.value.status == 504


def test_429_surfaces_without_automatic_retry(sim: Simulator, make_source: MakeSource) -> None:
    source = make_source("pods")
    sim.fail_next(1, 429, retry_after=2)
    started = time.monotonic()
    with pytest.raises(TooManyRequestsError) as info:
        source.list_page(limit=500)
    assert info.value.retry_after == 2.0
    assert info.value.status == 429
    # urllib3 would have slept Retry-After (2 s) and retried; the reflector must see the 429.
    assert time.monotonic() - started < 1.5
    assert source.list_page(limit=500).items == []


def test_500_is_an_api_status_error(sim: Simulator, make_source: MakeSource) -> None:
    source = make_source("pods")
    sim.fail_next(1, 500)
    with pytest.raises(ApiStatusError) as info:
        source.list_page(limit=500)
    assert type(info.value) is ApiStatusError
    assert (info.value.status, info.value.reason) == (500, "InternalError")
    assert "injected failure" in info.value.message


def test_unreachable_server(sim: Simulator, dead_url: str) -> None:
    resolved = resolve_with_sim(sim, "pods")
    with load_api_client(url=dead_url) as client:
        source = KubeSource(client, resolved)
        with pytest.raises(ApiUnavailableError):
            source.list_page(limit=500, timeout=5)
        with (
            pytest.raises(ApiUnavailableError),
            source.watch(resource_version=None, timeout_seconds=5, inactivity_timeout=5),
        ):
            pass


def resolve_with_sim(sim: Simulator, text: str) -> Any:
    with load_api_client(url=sim.url) as client:
        return resolve(client, ResourceSpec.parse(text))


# ------------------------------------------------------------------------------ WATCH


def test_watch_sees_changes_in_order(sim: Simulator, make_source: MakeSource) -> None:
    start = str(sim.resource_version)
    sim.create("pods", pod("p"))
    sim.update("pods", "default/p", {"metadata": {"labels": {"v": "2"}}})
    sim.delete("pods", "default/p")
    source = make_source("pods")
    with source.watch(
        resource_version=start, timeout_seconds=10, allow_bookmarks=False, inactivity_timeout=5
    ) as stream:
        events = [next(iter(stream)) for _ in range(3)]
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert {e.obj["metadata"]["name"] for e in events} == {"p"}
    rvs = [int(e.obj["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(start)
    assert stream.closed


def test_watch_bookmarks_arrive(sim: Simulator, make_source: MakeSource) -> None:
    rv = str(sim.resource_version)
    with make_source("pods").watch(
        resource_version=rv, timeout_seconds=10, inactivity_timeout=5
    ) as stream:
        events = [next(iter(stream)) for _ in range(3)]
    assert [e.type for e in events] == ["BOOKMARK"] * 3
    assert events[0].obj["kind"] == "Pod"
    assert int(events[0].obj["metadata"]["resourceVersion"]) >= int(rv)


def test_watch_from_a_compacted_rv_raises_resource_expired(
    sim: Simulator, make_source: MakeSource
) -> None:
    sim.create("pods", pod("a"))
    old = str(sim.resource_version)
    sim.update("pods", "default/a", {"metadata": {"labels": {"x": "1"}}})
    sim.compact()
    stream = make_source("pods").watch(
        resource_version=old, timeout_seconds=10, inactivity_timeout=5
    )
    with stream, pytest.raises(ResourceExpiredError) as info:
        list(stream)
    assert info.value.status == 410
    assert not info.value.continue_expired


def test_batches_group_what_arrived_together(sim: Simulator, make_source: MakeSource) -> None:
    rv = str(sim.resource_version)
    sim.populate("pods", 300, seed=4)
    with make_source("pods").watch(
        resource_version=rv, timeout_seconds=10, allow_bookmarks=False, inactivity_timeout=5
    ) as stream:
        seen: list[WatchEvent] = []
        sizes = []
        for batch in stream.batches():
            assert batch
            sizes.append(len(batch))
            seen.extend(batch)
            if len(seen) >= 300:
                break
    assert [e.type for e in seen] == ["ADDED"] * 300
    assert len(sizes) < 300  # the burst came in far fewer reads than events
    rvs = [int(e.obj["metadata"]["resourceVersion"]) for e in seen]
    assert rvs == sorted(rvs)


def test_a_stream_says_when_more_is_waiting(sim: Simulator, make_source: MakeSource) -> None:
    # 300 Pods of history wait in the socket: 1 KiB reads come back full (more is waiting).
    rv = str(sim.resource_version)
    sim.populate("pods", 300, seed=5)
    with make_source("pods", read_size=1024).watch(
        resource_version=rv, timeout_seconds=10, allow_bookmarks=False, inactivity_timeout=5
    ) as stream:
        seen: list[WatchEvent] = []
        waiting = []
        for batch in stream.batches():
            seen.extend(batch)
            waiting.append(stream.more_waiting)
            if len(seen) >= 300:
                break
    assert len(seen) == 300
    assert waiting[0]


def test_batches_raise_an_error_event(sim: Simulator, make_source: MakeSource) -> None:
    sim.create("pods", pod("a"))
    old = str(sim.resource_version)
    sim.update("pods", "default/a", {"metadata": {"labels": {"x": "1"}}})
    sim.compact()
    with (
        make_source("pods").watch(
            resource_version=old, timeout_seconds=10, inactivity_timeout=5
        ) as stream,
        pytest.raises(ResourceExpiredError),
    ):
        list(stream.batches())


def test_watch_at_a_future_rv_raises_too_large(sim: Simulator, make_source: MakeSource) -> None:
    future = str(sim.resource_version + 1000)
    stream = make_source("pods").watch(
        resource_version=future, timeout_seconds=10, inactivity_timeout=5
    )
    with pytest.raises(TooLargeResourceVersionError):
        stream.open()


def test_watch_list_initial_events_then_changes(sim: Simulator, make_source: MakeSource) -> None:
    for i in range(5):
        sim.create("pods", pod(f"p{i}", "shop"))
    sim.create("pods", pod("elsewhere", "other"))
    with make_source("pods@shop").watch(
        resource_version=None,
        timeout_seconds=10,
        send_initial_events=True,
        inactivity_timeout=5,
    ) as stream:
        it = iter(stream)
        initial = [next(it) for _ in range(6)]
        sim.create("pods", pod("p9", "shop"))
        later = next_non_bookmark(stream)
    assert [e.type for e in initial[:5]] == ["ADDED"] * 5
    assert sorted(e.obj["metadata"]["name"] for e in initial[:5]) == [f"p{i}" for i in range(5)]
    end = initial[5]
    assert end.type == "BOOKMARK"
    assert end.obj["metadata"]["annotations"] == {INITIAL_EVENTS_END: "true"}
    assert int(end.obj["metadata"]["resourceVersion"]) >= max(
        int(e.obj["metadata"]["resourceVersion"]) for e in initial[:5]
    )
    assert (later.type, later.obj["metadata"]["name"]) == ("ADDED", "p9")


def test_watch_list_unsupported() -> None:
    with (
        Simulator(FAST.replace(watch_list=False)) as old_server,
        load_api_client(url=old_server.url) as client,
    ):
        source = KubeSource(client, resolve(client, ResourceSpec.parse("pods")))
        stream = source.watch(
            resource_version=None,
            timeout_seconds=10,
            send_initial_events=True,
            inactivity_timeout=5,
        )
        with pytest.raises(WatchListUnsupportedError) as info:
            stream.open()
        assert info.value.status == 422
        # The same server still serves plain watches.
        with source.watch(resource_version="0", timeout_seconds=10, inactivity_timeout=5) as plain:
            assert next(iter(plain)).type == "BOOKMARK"


def test_watch_open_errors_are_typed(sim: Simulator, make_source: MakeSource) -> None:
    source = make_source("pods")
    sim.fail_next(1, 429, retry_after=3)
    with pytest.raises(TooManyRequestsError) as info:
        source.watch(resource_version="0", timeout_seconds=10, inactivity_timeout=5).open()
    assert info.value.retry_after == 3.0
    sim.fail_next(1, 500)
    with pytest.raises(ApiStatusError) as info2:
        source.watch(resource_version="0", timeout_seconds=10, inactivity_timeout=5).open()
    assert info2.value.status == 500


@pytest.mark.parametrize("kind", sorted(BAD_LINE_REASONS))
def test_1_10_a_bad_line_ends_the_watch_right_after_the_events_before_it(
    sim: Simulator, make_source: MakeSource, kind: str
) -> None:
    """As client-go's decoder does: the events before the bad line are delivered, then the
    stream ends with a typed error saying why and quoting the line; nothing after it is read,
    so a re-watch from the last event delivered gets the rest again."""
    rv = str(sim.resource_version)
    sim.create("pods", pod("before"))
    sim.create("pods", pod("after"))
    sim.inject_malformed_lines(1, kind, after_first_line=True)  # between the two ADDED lines
    stream = make_source("pods").watch(
        resource_version=rv, timeout_seconds=10, allow_bookmarks=False, inactivity_timeout=5
    )
    seen: list[str] = []
    with stream, pytest.raises(MalformedWatchEventError) as info:
        for event in stream:
            seen.append(event.obj["metadata"]["name"])
    assert seen == ["before"]
    assert info.value.reason == BAD_LINE_REASONS[kind]
    line = BAD_LINES[kind].rstrip(b"\n")
    assert (info.value.excerpt, info.value.line_bytes) == (line, len(line))
    assert repr(line) in str(info.value)
    resumed = make_source("pods").watch(
        resource_version=str(int(rv) + 1), timeout_seconds=10, allow_bookmarks=False,
        inactivity_timeout=5,
    )  # fmt: skip
    with resumed:
        event = next(iter(resumed))
    assert event.obj["metadata"]["name"] == "after"


def test_a_bad_line_is_quoted_briefly() -> None:
    decoder = WatchDecoder(1 << 20, watch_list=False)
    good = b'{"type":"ADDED","object":{"metadata":{"name":"ok"}}}'
    events, error = decoder.parse_lines([good, b"\xff" * 10_000, good])
    assert [event.obj["metadata"]["name"] for event in events] == ["ok"]
    assert isinstance(error, MalformedWatchEventError)
    assert (error.reason, error.line_bytes) == ("invalid_json", 10_000)
    assert error.excerpt == b"\xff" * 200
    assert len(str(error)) < 1000 and str(error).endswith("... (10000 bytes)")


def test_an_overlong_line_ends_the_watch_without_being_buffered(
    sim: Simulator, make_source: MakeSource
) -> None:
    rv = str(sim.resource_version)
    sim.create("pods", pod("small"))
    big = pod("big")
    big["metadata"]["annotations"] = {"blob": "x" * 50_000}
    sim.create("pods", big)
    sim.create("pods", pod("never-read"))
    # A 1 KiB read size splits every line over several reads; 4 KiB lines are the limit.
    source = make_source("pods", max_line_bytes=4096, read_size=1024)
    stream = source.watch(
        resource_version=rv, timeout_seconds=10, allow_bookmarks=False, inactivity_timeout=5
    )
    seen: list[str] = []
    with stream, pytest.raises(MalformedWatchEventError) as info:
        for event in stream:
            seen.append(event.obj["metadata"]["name"])
    assert seen == ["small"]
    assert (info.value.reason, info.value.line_bytes) == ("line_too_long", None)
    assert info.value.detail == "line longer than 4096 bytes"
    assert info.value.excerpt.startswith(b'{"type":"ADDED"') and len(info.value.excerpt) <= 200


def test_watch_ends_normally_at_timeout_seconds(sim: Simulator, make_source: MakeSource) -> None:
    started = time.monotonic()
    with make_source("pods").watch(
        resource_version=str(sim.resource_version), timeout_seconds=1, inactivity_timeout=5
    ) as stream:
        events = list(stream)
    assert time.monotonic() - started >= 0.9
    assert events and all(e.type == "BOOKMARK" for e in events)
    assert stream.end_reason == "server"


def test_inactivity_watchdog_fires_on_a_stalled_watch(
    sim: Simulator, make_source: MakeSource
) -> None:
    with make_source("pods").watch(
        resource_version=str(sim.resource_version), timeout_seconds=30, inactivity_timeout=1.0
    ) as stream:
        it = iter(stream)
        # Bookmarks every 0.1 s keep it alive well past 1 s: the read timeout applies per
        # read of the chunked stream, not to the whole response. (1 s, not 0.5: a loaded
        # machine once held the simulator's bookmarks back for half a second.)
        started = time.monotonic()
        while time.monotonic() - started < 2.5:
            assert next(it).type == "BOOKMARK"
        sim.stall_watches(8.0)
        stalled_at = time.monotonic()
        with pytest.raises(WatchInactiveError) as info:
            for _ in it:
                pass
        waited = time.monotonic() - stalled_at
        assert sim.faults.stall_remaining() > 0  # fired during the stall, not after it
    assert 0.9 <= waited < 7.5
    assert isinstance(info.value, ApiUnavailableError)
    assert "no bytes for 1.0s" in str(info.value)


def test_close_from_another_thread_ends_a_blocked_watch(
    sim: Simulator, make_source: MakeSource
) -> None:
    stream = make_source("pods").watch(
        resource_version=str(sim.resource_version),
        timeout_seconds=60,
        allow_bookmarks=False,
        inactivity_timeout=30,
    )
    stream.open()
    closer = threading.Timer(0.3, stream.close)
    started = time.monotonic()
    closer.start()
    try:
        events = list(stream)  # blocks: no events, no bookmarks
    finally:
        closer.join()
    assert events == []
    assert stream.end_reason == "closed"
    assert time.monotonic() - started < 10  # far below the 30 s watchdog
    stream.close()  # idempotent
    assert list(stream) == []


def test_close_while_the_consumer_holds_an_event(sim: Simulator, make_source: MakeSource) -> None:
    with make_source("pods").watch(
        resource_version=str(sim.resource_version), timeout_seconds=30, inactivity_timeout=5
    ) as stream:
        it = iter(stream)
        assert next(it).type == "BOOKMARK"
        closer = threading.Thread(target=stream.close)
        closer.start()
        closer.join()
        assert list(it) == []
    assert stream.end_reason == "closed"


def test_close_before_open_sends_nothing(sim: Simulator, make_source: MakeSource) -> None:
    stream = make_source("pods").watch(
        resource_version=None, timeout_seconds=30, inactivity_timeout=5
    )
    stream.close()
    with stream:
        assert list(stream) == []
    assert sim.active_watches == 0


def test_watch_of_a_dropped_stream_ends(sim: Simulator, make_source: MakeSource) -> None:
    with make_source("pods").watch(
        resource_version=str(sim.resource_version), timeout_seconds=30, inactivity_timeout=5
    ) as stream:
        it = iter(stream)
        next(it)
        sim.drop_watches()
        list(it)
    assert stream.end_reason == "server"


def test_watch_arguments_are_validated(make_source: MakeSource) -> None:
    source = make_source("pods")
    with pytest.raises(ValueError):
        source.watch(resource_version=None, timeout_seconds=0, inactivity_timeout=5)
    with pytest.raises(ValueError):
        source.watch(resource_version=None, timeout_seconds=5, inactivity_timeout=0)
    with pytest.raises(ValueError):
        make_source("pods", max_line_bytes=10)


# ------------------------------------------------------------------------------ pure parts


@pytest.mark.parametrize(
    ("status", "body", "kwargs", "expected", "attrs"),
    [
        (410, b'{"kind":"Status","code":410,"reason":"Gone","message":"gone"}', {},
         ResourceExpiredError, {"continue_expired": False}),
        (410, b'{"code":410,"reason":"Expired","message":"x","metadata":{"continue":"t"}}',
         {"continue_requested": True}, ResourceExpiredError,
         {"continue_expired": True, "continue_token": "t"}),
        (200, {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}, {},
         ResourceExpiredError, {"status": 410}),
        (504, b'{"code":504,"reason":"Timeout","message":"Too large resource version: 9"}', {},
         TooLargeResourceVersionError, {}),
        (500, b'{"code":500,"details":{"causes":[{"reason":"ResourceVersionTooLarge"}]}}', {},
         TooLargeResourceVersionError, {"status": 500}),
        (422, b'{"code":422,"reason":"Invalid","message":"nope"}',
         {"watch_list_requested": True}, WatchListUnsupportedError, {}),
        (400, b'{"code":400,"reason":"BadRequest"}', {"watch_list_requested": True},
         WatchListUnsupportedError, {"status": 400}),
        (422, b'{"code":422,"reason":"Invalid"}', {}, ApiStatusError, {"status": 422}),
        (429, b"", {"retry_after": "7"}, TooManyRequestsError, {"retry_after": 7.0}),
        (429, b'{"code":429,"details":{"retryAfterSeconds":4}}', {}, TooManyRequestsError,
         {"retry_after": 4.0}),
        (429, b"", {}, TooManyRequestsError, {"retry_after": None}),
        (503, b"<html>upstream\n down</html>", {}, ApiStatusError,
         {"status": 503, "reason": "ServiceUnavailable", "message": "<html>upstream down</html>"}),
    ],
)  # fmt: skip
def test_error_classification(
    status: int, body: Any, kwargs: dict[str, Any], expected: type, attrs: dict[str, Any]
) -> None:
    error = error_from_status(status, body, **kwargs)
    assert type(error) is expected
    assert isinstance(error, KubeError)
    for name, value in attrs.items():
        assert getattr(error, name) == value


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
)
def test_line_framer_any_chunking(lines: list[bytes], cuts: list[int]) -> None:
    """Lines come out whole and in order however the stream is cut; a line over the limit
    comes out once, in its place, as an OverlongLine holding its first bytes, and nothing
    after it is lost."""
    limit = 20
    data = b"".join(line + b"\n" for line in lines)
    framer = LineFramer(limit)
    out: list[bytes] = []
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    for lo, hi in itertools.pairwise(bounds):
        out.extend(framer.feed(data[lo:hi]))
        assert framer.pending <= limit
    out = [line for line in out if line]
    lines = [line for line in lines if line]
    assert [type(line) is OverlongLine for line in out] == [len(line) > limit for line in lines]
    for got, line in zip(out, lines, strict=True):
        if type(got) is OverlongLine:
            assert got and line.startswith(got)
        else:
            assert got == line


def test_watch_parse_rate(sim: Simulator, make_source: MakeSource) -> None:
    """A sanity floor on decoding speed (far below what it does; catches pathologies only)."""
    rv = str(sim.resource_version)
    sim.populate("pods", 2000, seed=5)
    started = time.monotonic()
    with make_source("pods").watch(
        resource_version=rv, timeout_seconds=30, allow_bookmarks=False, inactivity_timeout=5
    ) as stream:
        it = iter(stream)
        for _ in range(2000):
            assert next(it).type == "ADDED"
    assert time.monotonic() - started < 10
