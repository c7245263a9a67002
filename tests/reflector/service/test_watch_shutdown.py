"""A shutdown that races a watch read leaves no socket open (issue 12, the unclosed socket).

``WatchStream.close`` from another thread while the reader is inside a read only shuts the
socket down and leaves the release to the reader. When that read returned data instead of
failing -- the bytes arrived just as the stop came -- the reader yields a batch, and the
reflector, seeing the stop, abandons the iteration and closes the stream again on its way out
of ``with``. That second close was a no-op ("already closed"), so the response was never
closed: its socket stayed open in a reference cycle until a garbage collection found it, which
is what the per-module leak report of tests/conftest.py named after modules that run a
``ReflectorService`` in-process. The race is injected here: the stop lands inside the read.
"""

from __future__ import annotations

import gc
import socket
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from apiserver_sim import Simulator
from reflector_svc.lister_watcher import KubeSource
from reflector_svc.resources import ResourceSpec, resolve
from reflector_svc.transport import load_api_client
from reflector_svc.watch_stream import WatchStream
from tests.support import socket_origins


@pytest.fixture
def source(sim: Simulator) -> Iterator[KubeSource]:
    sim.populate("pods", 5, seed=1)
    with load_api_client(url=sim.url) as client:
        yield KubeSource(client, resolve(client, ResourceSpec.parse("pods")))


def _stop_during_the_read(stream: WatchStream) -> socket.socket:
    """Make the next read return its data only after ``close()`` ran while it was reading
    (what another thread's close does when it comes just as bytes arrive); returns the
    response's socket."""
    resp: Any = stream._resp  # the test reaches in: this is the injected moment
    assert resp is not None
    sock: socket.socket = resp.connection.sock
    read1 = resp.read1

    def read_then_stopped(amt: int) -> bytes:
        data: bytes = read1(amt)
        stream.close()  # _reading is True here, exactly as in the race
        return data

    resp.read1 = read_then_stopped
    return sock


def test_a_stop_that_lands_inside_a_read_closes_the_socket(source: KubeSource) -> None:
    stream = source.watch(resource_version=None, timeout_seconds=30, inactivity_timeout=10)
    with stream:
        sock = _stop_during_the_read(stream)
        batches = stream.batches()
        assert next(batches)  # the read's data is delivered, the consumer then stops
        # ... and leaves the iteration unfinished, as Reflector._consume does on a stop.
    assert stream.closed
    assert sock.fileno() == -1, "the watch's socket is still open after the stream was closed"
    assert sock not in _open_sockets()
    del batches, stream
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert [str(w.message) for w in caught] == []


def _open_sockets() -> list[object]:
    """Sockets the origin instrument still counts as open (it forgets them when closed)."""
    return [s for s in gc.get_objects() if isinstance(s, socket.socket) and s.fileno() != -1
            and socket_origins.origin_of(s) is not None]  # fmt: skip
