from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client
from kubernetes.client import ApiClient, Configuration

from apiserver_sim import Simulator


@pytest.fixture
def api(sim: Simulator) -> Iterator[ApiClient]:
    with ApiClient(Configuration(host=sim.url)) as api_client:
        yield api_client


@pytest.fixture
def v1(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pool = urllib3.PoolManager()
    try:
        yield pool
    finally:
        pool.clear()


def raw_lines(
    pool: urllib3.PoolManager, url: str, *, stop_after: int | None = None
) -> tuple[int, list[Any]]:
    """GET a watch URL and decode its JSON lines (bad lines come back as bytes)."""
    resp = pool.request("GET", url, preload_content=False, timeout=urllib3.Timeout(read=10))
    lines: list[Any] = []
    try:
        buffer = b""
        for chunk in resp.stream(65536):
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                try:
                    lines.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    lines.append(line)
            if stop_after is not None and len(lines) >= stop_after:
                break
    finally:
        resp.release_conn()
        resp.close()
    return resp.status, lines


def pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def widget(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
