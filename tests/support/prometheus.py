"""A real Prometheus for the tests that check queries against scraped data (the dashboard and
alert rules, the autoscalers' lag query): the Debian package's ``prometheus`` and ``promtool``
(``make install`` installs them). A missing binary fails with that one line, never skips.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from informer_bus.child_process import ChildProcess
from tests.support.paths import ROOT
from tests.support.redis_server import free_port
from tests.support.waiting import wait_until

__all__ = ["RULES", "PrometheusServer", "api_get", "prometheus_tool"]

RULES = ROOT / "deploy" / "prometheus" / "informer-bus-rules.yml"
"""The alert and recording rules the deployment ships (deploy/prometheus/)."""


def prometheus_tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails the test when it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make install` (as root it installs the Debian "
            "package prometheus) or `apt-get install prometheus`"
        )
    return path


def api_get(base: str, path: str, **params: str) -> Any:
    """The ``data`` of a successful answer of Prometheus's HTTP API."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else base + path
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


class PrometheusServer:
    """A Prometheus scraping ``targets`` (``host:port``) every second, with ``rule_files``
    evaluated every second, its data in ``workdir``. :meth:`stop` ends it (SIGTERM, then
    SIGKILL) and checks it exited cleanly."""

    def __init__(self, workdir: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()):
        self.workdir = workdir
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [
                {"job_name": "informer-bus", "static_configs": [{"targets": list(targets)}]}
            ],
        }
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / "prometheus.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: ChildProcess | None = None

    def start(self) -> PrometheusServer:
        self.process = ChildProcess(
            [
                prometheus_tool("prometheus"), f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            name="prometheus", log_path=self.log_path,
        ).start()  # fmt: skip
        process = self.process

        def ready() -> bool:
            assert process.running, self.log_path.read_text()
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                    return int(response.status) == 200
            except OSError:
                return False

        wait_until(ready, 60, what="Prometheus to be ready")
        return self

    def query(self, expr: str, **params: str) -> list[dict[str, Any]]:
        """An instant query's result vector (``time=`` for another instant)."""
        result: list[dict[str, Any]] = api_get(self.url, "/api/v1/query", query=expr, **params)[
            "result"
        ]
        return result

    def stop(self) -> None:
        if self.process is None:
            return
        status = self.process.stop(30)
        assert not self.process.running
        assert (status, self.process.killed) == (0, False), self.process.log_text()[-2000:]
