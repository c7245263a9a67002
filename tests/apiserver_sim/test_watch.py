"""Point 4: WATCH resourceVersion semantics, 410, bookmarks, timeouts and watch-list."""

from __future__ import annotations

import time

import pytest
import urllib3
from kubernetes import client, watch

from apiserver_sim import Simulator, SimulatorSettings
from tests.support.objects import pod
from tests.support.watch_http import raw_lines


def test_unset_and_zero_rv_start_with_synthetic_added(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 4, seed=1)
    for rv in (None, "0"):
        kwargs = (
            {"timeout_seconds": 1} if rv is None else {"timeout_seconds": 1, "resource_version": rv}
        )
        events = list(watch.Watch().stream(v1.list_pod_for_all_namespaces, **kwargs))
        assert [e["type"] for e in events] == ["ADDED"] * 4


def test_rv_replays_history_after_it(sim: Simulator, v1: client.CoreV1Api) -> None:
    sim.populate("pods", 3, seed=1)
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    v1.create_namespaced_pod("default", pod("a"))
    v1.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    v1.delete_namespaced_pod("a", "default")
    w = watch.Watch()
    events = list(
        w.stream(v1.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=1)
    )
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    assert w.resource_version == str(rvs[-1])


def test_live_events_arrive(sim: Simulator, v1: client.CoreV1Api) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    w = watch.Watch()
    stream = w.stream(v1.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5)
    sim.create("pods", pod("live"))
    event = next(stream)
    assert (event["type"], event["object"].metadata.name) == ("ADDED", "live")
    w.stop()
    for _ in stream:
        pass


def test_compacted_rv_gets_an_error_event_with_410(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    sim.create("pods", pod("a"))
    sim.compact()
    status, lines = raw_lines(http, f"{sim.url}/api/v1/pods?watch=true&resourceVersion={rv}")
    assert status == 200
    assert lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410
    assert lines[0]["object"]["reason"] == "Expired"
    assert "too old resource version" in lines[0]["object"]["message"]
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(v1.list_namespaced_pod, "default", resource_version=rv,
                                  timeout_seconds=1))  # fmt: skip
    assert exc.value.status == 410


def test_periodic_bookmarks_and_timeout(
    sim: Simulator, v1: client.CoreV1Api, http: urllib3.PoolManager
) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    started = time.monotonic()
    _, lines = raw_lines(
        http, f"{sim.url}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
        "&allowWatchBookmarks=true&timeoutSeconds=1",
    )  # fmt: skip
    assert time.monotonic() - started >= 0.9  # timeoutSeconds ended it, not before
    bookmarks = [line for line in lines if line["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2  # every 0.1 s: ~9 on an idle machine, fewer when loaded
    assert bookmarks[0]["object"] == {
        "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv},
    }  # fmt: skip
    # Without allowWatchBookmarks there are none.
    _, quiet = raw_lines(
        http, f"{sim.url}/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=1"
    )
    assert quiet == []


def test_bookmark_rv_advances_past_other_namespaces(sim: Simulator, v1: client.CoreV1Api) -> None:
    rv = v1.list_namespaced_pod("default").metadata.resource_version
    sim.create("pods", pod("elsewhere", namespace="kube-system"))
    w = watch.Watch()
    stream = w.stream(
        v1.list_namespaced_pod,
        "default",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    )
    types = [e["type"] for e in stream]
    assert set(types) == {"BOOKMARK"}
    assert int(w.resource_version) == sim.resource_version


def test_watch_list_ends_initial_events_with_annotated_bookmark(
    sim: Simulator, v1: client.CoreV1Api
) -> None:
    sim.populate("pods", 5, seed=1)
    w = watch.Watch()
    stream = w.stream(
        v1.list_pod_for_all_namespaces, send_initial_events=True,
        resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=5,
    )  # fmt: skip
    events = [next(stream) for _ in range(6)]
    assert [e["type"] for e in events] == ["ADDED"] * 5 + ["BOOKMARK"]
    end = events[-1]["raw_object"]["metadata"]
    assert end["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(end["resourceVersion"]) == sim.resource_version
    sim.create("pods", pod("after"))
    following = next(e for e in stream if e["type"] != "BOOKMARK")
    assert following["type"] == "ADDED" and following["object"].metadata.name == "after"
    w.stop()
    for _ in stream:
        pass


def test_watch_list_requires_its_parameters(sim: Simulator, v1: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(v1.list_pod_for_all_namespaces, send_initial_events=True,
                                  allow_watch_bookmarks=True, timeout_seconds=1))  # fmt: skip
    assert exc.value.status == 422


def test_watch_list_switch_off_answers_422() -> None:
    from kubernetes.client import ApiClient, Configuration

    with (
        Simulator(SimulatorSettings(watch_list=False)) as sim,
        ApiClient(Configuration(host=sim.url)) as api,
    ):
        v1 = client.CoreV1Api(api)
        with pytest.raises(client.ApiException) as exc:
            list(watch.Watch().stream(
                v1.list_pod_for_all_namespaces, send_initial_events=True,
                resource_version_match="NotOlderThan", allow_watch_bookmarks=True,
                timeout_seconds=1,
            ))  # fmt: skip
        assert exc.value.status == 422
        assert '"reason":"Invalid"' in exc.value.body


def test_future_rv_watch_is_too_large(sim: Simulator, v1: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(v1.list_pod_for_all_namespaces,
                                  resource_version=str(sim.resource_version + 50),
                                  timeout_seconds=1))  # fmt: skip
    assert exc.value.status == 504
