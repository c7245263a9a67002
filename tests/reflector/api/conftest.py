"""Fixtures for reflector tests: an in-process API simulator and clients pointed at it.

The simulator speaks the real list/watch protocol over HTTP, so these tests exercise the same
code paths (urllib3 pool, chunked streams, Status bodies) as a real cluster would.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient

from apiserver_sim import Simulator
from reflector_svc.lister_watcher import KubeSource
from reflector_svc.resources import ResourceSpec, resolve
from reflector_svc.transport import load_api_client


@pytest.fixture
def api_client(sim: Simulator) -> Iterator[ApiClient]:
    client = load_api_client(url=sim.url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def make_source(api_client: ApiClient) -> Callable[..., KubeSource]:
    """``make_source("pods@shop", max_line_bytes=...)``: resolve a spec into a KubeSource."""

    def make(text: str, **kwargs: Any) -> KubeSource:
        return KubeSource(api_client, resolve(api_client, ResourceSpec.parse(text)), **kwargs)

    return make


@pytest.fixture
def dead_url() -> str:
    """A URL on which nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
