"""The controller API tests' fixture: ``controllers``, stopped after each test so a failing
assertion cannot leak worker threads into the next one. The builders are in
:mod:`tests.support.controllers` and :mod:`tests.support.objects`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from processor_svc.controller import Controller


@pytest.fixture
def controllers() -> Iterator[list[Controller]]:
    """Append controllers here; each is stopped (and its threads joined) after the test."""
    started: list[Controller] = []
    yield started
    for controller in started:
        controller.stop()
