"""Point 1: where and how it runs (CLI, in-process API, subprocess runner)."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, Configuration

from apiserver_sim import Simulator, SimulatorProcess, SimulatorSettings
from apiserver_sim.command import main


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apiserver_sim", *args],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def test_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for f in dataclasses.fields(SimulatorSettings):
        assert SimulatorSettings.flag_name(f.name) in out
        assert SimulatorSettings.env_name(f.name) in out.replace("\n", "").replace(" ", "")


def test_bad_flag_is_a_short_error_with_exit_2() -> None:
    result = _run("--port", "not-a-number")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "invalid int value" in result.stderr
    result = _run("--bookmark-interval", "-1")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "bookmark_interval must be > 0" in result.stderr


def test_port_in_use_is_a_one_line_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("--port", str(port))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_env_vars_configure_settings() -> None:
    settings = SimulatorSettings.from_env(
        {"INFORMER_BUS_SIM_BOOKMARK_INTERVAL": "0.5", "INFORMER_BUS_SIM_WATCH_LIST": "off"},
        port=1234,
    )
    assert settings.bookmark_interval == 0.5
    assert settings.watch_list is False
    assert settings.port == 1234


def test_in_process_simulator_picks_a_free_port_and_stops_cleanly() -> None:
    with Simulator(SimulatorSettings(populate=7)) as sim:
        assert sim.port > 0
        with ApiClient(Configuration(host=sim.url)) as api:
            pods = client.CoreV1Api(api).list_pod_for_all_namespaces()
            assert len(pods.items) == 7
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", sim.port), timeout=1):
        pass


def test_subprocess_runner_serves_the_official_client_and_control_endpoints() -> None:
    settings = SimulatorSettings(populate=30, bookmark_interval=0.1, seed=3)
    with SimulatorProcess(settings) as proc:
        with ApiClient(Configuration(host=proc.url)) as api:
            v1 = client.CoreV1Api(api)
            first = v1.list_pod_for_all_namespaces(limit=10)
            assert len(first.items) == 10
            assert first.metadata.remaining_item_count == 20
            truth = proc.ground_truth("pods")
            assert len(truth) == 30
            stats = proc.churn(rate=0, seconds=5, seed=1, maxEvents=20)
            assert stats["events"] == 20
            proc.compact()
            assert int(proc.stats()["compactedResourceVersion"]) >= int(
                v1.list_pod_for_all_namespaces().metadata.resource_version
            )
            # 409s are counted in the child and read over /_sim/conflicts.
            with pytest.raises(client.ApiException) as exc:
                v1.create_namespace({"metadata": {"name": "default"}})
            assert exc.value.status == 409
            counted = {"namespaces": {"create": {"AlreadyExists": 1}}}
            assert proc.conflicts() == counted
            assert proc.reset_conflicts() == counted
            assert proc.conflicts() == {}
        assert proc.stop() == 0
