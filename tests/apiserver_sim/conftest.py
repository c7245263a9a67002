"""Fixtures."""

from __future__ import annotations

from collections.abc import Iterator

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
