"""The ``sim`` fixture: a simulated API server (:class:`Simulator`, in-process) per test.

Registered for the whole suite from ``tests/conftest.py`` (``pytest_plugins``), so every test
asks for ``sim`` by name and gets the same lifecycle: started before the test, stopped (its
threads and sockets closed) after it, whatever the test did to it. A module or ``conftest.py``
that needs other timings overrides ``sim_settings``, pytest's way of overriding a fixture for
one part of the tree; nothing else about the simulator differs between suites.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apiserver_sim import Simulator, SimulatorSettings

__all__ = ["FAST", "sim", "sim_settings"]

FAST = SimulatorSettings(bookmark_interval=0.1, too_large_wait=0.2)
"""Bookmarks every 0.1 s and a 0.2 s wait for a too-large resource version: tests see
bookmarks and the "too large" answer at once instead of after production-like seconds."""


@pytest.fixture
def sim_settings() -> SimulatorSettings:
    """The simulator's settings for one test (:data:`FAST`); override to change them."""
    return FAST


@pytest.fixture
def sim(sim_settings: SimulatorSettings) -> Iterator[Simulator]:
    """A started simulator, stopped after the test."""
    with Simulator(sim_settings) as simulator:
        yield simulator
