"""The ``prometheus`` fixture of the monitoring tests: a real Prometheus with the alert rules
loaded, scraping the targets a test names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.prometheus import RULES, PrometheusServer


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[list[str]], PrometheusServer]]:
    """``prometheus(["127.0.0.1:PORT", ...])``: a started Prometheus scraping those targets
    every second with the rules file loaded. Stopped (SIGTERM, then SIGKILL) after."""
    started: list[PrometheusServer] = []

    def start(targets: list[str]) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = PrometheusServer(workdir, targets, rule_files=[RULES])
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()
