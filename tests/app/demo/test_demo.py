"""``informer-bus demo`` headless: it reaches synced, stops cleanly (on its own and on
Ctrl-C) and leaves no process and, on a Redis it did not start, no key behind."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from informer_bus.local_redis import free_port
from tests.app.demo.support import DEMO, PROGRAM, alive, pids
from tests.support.cli import one_line_error, run_command
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until


def test_headless_demo_reaches_synced_and_leaves_nothing_running(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_command(
        DEMO, "--duration", "8", "--pods", "2000", "--log-dir", str(logs),
        env={"REDIS_URL": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^pipeline synced after [\d.]+ s: \d+ pods listed into 16 shards", out, re.M)
    assert re.search(r"owners 2 processors, 16/16 shards \| ready 2/2 \| synced yes", out), out
    assert "redis: private redis-server on redis://127.0.0.1:" in out
    assert "8 s passed, stopping" in out
    assert out.rstrip().endswith(f"stopped cleanly; logs in {logs}")
    assert "\x1b[" not in out, "no ANSI codes when the output is not a terminal"
    started = pids(out)
    assert set(started) == {
        "redis-server", "apiserver-sim", "reflector", "processor-1", "processor-2",
    }  # fmt: skip
    assert not [name for name, pid in started.items() if alive(pid)]
    assert {path.name for path in logs.glob("*.log")} == {
        "apiserver-sim.log", "reflector.log", "processor-1.log", "processor-2.log",
    }  # fmt: skip
    assert "processor demo-processor-1/" in (logs / "processor-1.log").read_text()
    assert result.stderr == ""


@pytest.mark.slow
def test_a_processor_without_shards_does_not_hold_synced_back(tmp_path: Path) -> None:
    """Three processors, two shards: one owns nothing, and its ``/readyz`` says so (503: no
    cache to trust). The pipeline is synced all the same: every shard is owned by a processor
    whose caches are synced."""
    result = run_command(
        DEMO, "--duration", "12", "--pods", "300", "--processors", "3", "--shard-count", "2",
        "--log-dir", str(tmp_path / "logs"), env={"REDIS_URL": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^pipeline synced after [\d.]+ s: \d+ pods listed into 2 shards, owned "
                     r"by 2 processors whose caches are synced", out, re.M), out  # fmt: skip
    assert re.search(r"owners 2 processors, 2/2 shards \| ready 2/3 \| synced yes", out), out


def test_ctrl_c_stops_the_demo_cleanly_and_removes_its_keys(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """On a Redis it did not start, the demo uses a prefix of its own and deletes it."""
    redis_client.set("ib:{pods}:leader", "someone else's")
    output = tmp_path / "out.txt"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [*DEMO, "--pods", "500", "--churn", "50", "--processors", "1",
             "--shard-count", "4", "--log-dir", str(tmp_path / "logs"),
             "--redis-url", redis_server.url],
            stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
        try:
            wait_until(
                lambda: "pipeline synced after" in output.read_text(),
                40,
                what=lambda: "the demo to sync:\n" + output.read_text(),
            )
            prefix = re.search(r"keys under prefix (ib-demo-[0-9a-f]+)", output.read_text())
            assert prefix, output.read_text()
            assert redis_client.exists(f"{prefix.group(1)}:{{pods}}:leader")
            hint = re.search(r"^inspect it from another terminal: (.*)$", output.read_text(), re.M)
            assert hint, output.read_text()
            status = subprocess.run(
                shlex.split(hint.group(1)), capture_output=True, text=True, timeout=30,
                env={"PATH": "/usr/bin:/bin"}, check=False,
            )  # fmt: skip
            assert status.returncode == 0, status.stderr
            assert "resource pods" in status.stdout, "the printed command runs off the PATH"
            process.send_signal(signal.SIGINT)
            assert process.wait(40) == 0, output.read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    text = output.read_text()
    assert f"{PROGRAM}: SIGINT: stopping (up to 65 s; a second signal kills what is left)" in text
    assert "stopped cleanly" in text
    assert not [name for name, pid in pids(text).items() if alive(pid)]
    assert "redis-server" not in pids(text)
    assert not list(redis_client.scan_iter(match=f"{prefix.group(1)}:*"))
    assert redis_client.get("ib:{pods}:leader") == b"someone else's"


def test_missing_redis_server_binary_is_a_one_line_hint(tmp_path: Path) -> None:
    result = run_command(
        DEMO, "--log-dir", str(tmp_path), env={"PATH": str(tmp_path), "REDIS_URL": ""}
    )
    line = one_line_error(result, PROGRAM)
    assert "redis-server is not installed" in line
    assert "apt-get install redis-server" in line and "REDIS_URL" in line


def test_unreachable_redis_url_is_a_one_line_error(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run_command(DEMO, "--log-dir", str(tmp_path), env={"REDIS_URL": url})
    assert f"cannot reach Redis at {url}" in one_line_error(result, PROGRAM)


def test_flag_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken-kubeconfig"
    broken.write_text("clusters: [\n")
    for args, expected in [
        (
            ["--kubeconfig", str(broken)],
            f"reflector refused to start (informer-bus reflector: error: kubeconfig {broken}",
        ),
        (["--processors", "0"], "--processors must be within 1..64"),
        (["--resource", "configmaps"], "--resource and --context need --kubeconfig"),
        (["--kubeconfig", str(tmp_path / "nope")], "no kubeconfig file at"),
        (["--kubeconfig", str(tmp_path / "nope"), "--resource", "Pods!"], "invalid resource"),
    ]:
        result = run_command(DEMO, "--log-dir", str(tmp_path), *args, env={"REDIS_URL": ""})
        assert expected in one_line_error(result, PROGRAM), args


def test_help_explains_the_flags_and_exit_status() -> None:
    result = run_command(DEMO, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for expected in ("--pods", "--churn", "--processors", "--duration", "--kubeconfig",
                     "--resource", "--redis-url", "REDIS_URL", "INFORMER_BUS_DEMO_PODS",
                     "--lease-duration", "SIGHUP", "kill -9",
                     "Exit status: 0 after a clean stop"):  # fmt: skip
        assert expected in text
