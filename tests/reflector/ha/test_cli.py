"""``python -m reflector_svc`` and ``informer-bus reflector``: help, user mistakes, SIGTERM.

Issue 4, point 10: settings from flags and ``INFORMER_BUS_*`` env vars; a user mistake ends
with one line and exit status 2, never a traceback; SIGTERM stops cleanly and releases the
lease so that a standby takes over at once.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from apiserver_sim import Simulator
from tests.support.bus import Bus, ReflectorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer
from tests.support.reflector_ha import (
    SHARDS,
    SimHistory,
    assert_faithful,
    holds_lease,
    wait_caught_up,
)
from tests.support.waiting import wait_until

MODULE = [sys.executable, "-m", "reflector_svc"]
CONSOLE = [str(Path(sys.executable).with_name("informer-bus")), "reflector"]


def _run(
    command: Sequence[str], *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(command, *args, env=env)


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    return one_line_error(result, "informer-bus reflector")


@pytest.mark.parametrize("command", [MODULE, CONSOLE], ids=["python-m", "informer-bus"])
def test_help_explains_every_flag_and_its_env_var(command: list[str]) -> None:
    result = _run(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines
    assert "Redis streams" in text
    assert "INFORMER_BUS_<NAME>" in text
    for flag, env in [
        ("--resource", "INFORMER_BUS_RESOURCE"),
        ("--redis-url", "INFORMER_BUS_REDIS_URL"),
        ("--kube-url", "INFORMER_BUS_KUBE_URL"),
        ("--shard-count", "INFORMER_BUS_SHARD_COUNT"),
        ("--lease-duration", "INFORMER_BUS_LEASE_DURATION"),
        ("--renew-deadline", "INFORMER_BUS_RENEW_DEADLINE"),
        ("--retry-period", "INFORMER_BUS_RETRY_PERIOD"),
        ("--checkpoint-interval", "INFORMER_BUS_CHECKPOINT_INTERVAL"),
        ("--http-port", "INFORMER_BUS_HTTP_PORT"),
    ]:
        assert flag in text
        assert f"env {env}" in text
    assert "default: 15.0" in text  # client-go's lease duration


@pytest.mark.parametrize("command", [MODULE, CONSOLE], ids=["python-m", "informer-bus"])
def test_no_resource_is_a_one_line_error(command: list[str]) -> None:
    line = _one_line_error(_run(command, "--kube-url", "http://127.0.0.1:1"))
    assert "--resource" in line


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--shard-count", "0"], {}, "shard_count must be >= 1"),
        (["--lease-duration", "1", "--renew-deadline", "2"], {},
         "renew_deadline must be shorter than lease_duration"),
        # 9 * 1.2 > 10: the leader election's jitter rule, checked up front, not at start.
        (["--retry-period", "9"], {}, "retry_period must be shorter than renew_deadline"),
        ([], {"INFORMER_BUS_SHARD_COUNT": "zero"}, "INFORMER_BUS_SHARD_COUNT: invalid int value"),
        ([], {"INFORMER_BUS_LEASE_DURATION": "-1"}, "lease_duration must be > 0"),
    ],
    ids=["shard-count-0", "deadline-over-lease", "retry-over-deadline", "env-zero", "env-negative"],
)  # fmt: skip
def test_a_bad_setting_is_a_one_line_error(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    line = _one_line_error(_run(MODULE, "--resource", "pods", *args, env=env))
    assert expected in line


def test_a_flag_that_does_not_parse_is_an_argparse_error_without_traceback() -> None:
    result = _run(MODULE, "--resource", "pods", "--shard-count", "zero")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    # argparse prints its usage, then one error line naming the flag and the value.
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors == [result.stderr.strip().splitlines()[-1]]
    assert "argument --shard-count: invalid int value: 'zero'" in errors[0]


@pytest.mark.parametrize("command", [MODULE, CONSOLE], ids=["python-m", "informer-bus"])
def test_an_unknown_shard_key_is_a_one_line_error_before_connecting(command: list[str]) -> None:
    # Nothing listens at either URL: the spec is refused before anything is connected.
    result = _run(
        command, "--resource", "configmaps?shardKey=uid", "--kube-url", "http://127.0.0.1:1",
        "--redis-url", "redis://127.0.0.1:1/0",
    )  # fmt: skip
    line = _one_line_error(result)
    assert "unknown shard key 'uid'" in line
    assert "key, namespace, owner or label:NAME" in line


def test_help_names_the_shard_key_choices() -> None:
    text = " ".join(_run(MODULE, "--help").stdout.split())
    assert "shardKey=" in text and "label:NAME" in text


def test_an_unknown_resource_is_a_one_line_error(sim: Simulator, redis_server: RedisServer) -> None:
    result = _run(
        MODULE, "--resource", "nosuchthings", "--kube-url", sim.url,
        "--redis-url", redis_server.url,
    )  # fmt: skip
    line = _one_line_error(result)
    assert "nosuchthings" in line
    assert "does not serve" in line


def test_sigterm_stops_cleanly_and_releases_the_lease(
    sim: Simulator,
    history: SimHistory,
    bus: Bus,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    sim.populate("pods", 200, seed=8)
    # Configured through the environment alone, with client-go's 15 s lease: a lease that is
    # gone right after the exit was released, not expired.
    env = {
        "INFORMER_BUS_RESOURCE": "pods",
        "INFORMER_BUS_REDIS_URL": redis_server.url,
        "INFORMER_BUS_KUBE_URL": sim.url,
        "INFORMER_BUS_SHARD_COUNT": str(SHARDS),
        "INFORMER_BUS_HTTP_HOST": "127.0.0.1",
        "INFORMER_BUS_HTTP_PORT": "0",
        "INFORMER_BUS_IDENTITY": "term",
    }
    process = ReflectorProcess(["--checkpoint-interval", "0.2"], tmp_path / "term.log", env=env)
    try:
        process.start()
        wait_until(functools.partial(holds_lease, bus, process), 15, what="it to lead")
        wait_until(bus.synced, 30, what="it to sync")
        churn = sim.start_churn(rate=200, seconds=1, seed=8)
        churn.wait(10)
        wait_until(lambda: bus.known_versions() == sim.ground_truth("pods"), 30,
                   what="the churn to be published")  # fmt: skip
        assert process.probe("/readyz") == 200
        assert process.terminate(timeout=10) == 0
        assert bus.leader() is None  # released: a standby could take over at once
        assert "Traceback" not in process.log()
        assert "released lease" in process.log()
    finally:
        process.close()
        print(process.log())
    assert_faithful(bus, sim, history, exact=True)


def test_sigterm_in_the_middle_of_a_long_list_stops_at_once(
    sim: Simulator,
    history: SimHistory,
    bus: Bus,
    spawn: Callable[..., ReflectorProcess],
) -> None:
    pods = 3000
    sim.populate("pods", pods, seed=9)
    sim.slow_responses(0.2)  # 30 pages of 100: a list of 6 s or more
    first = spawn("a", page_size=100, batch_max=100)
    wait_until(lambda: bus.length() > 0, 30, interval=0.005, what="the first deltas")
    stopped = time.monotonic()
    assert first.terminate(timeout=10) == 0
    # It did not finish the list first (nor hold its lease through it).
    assert time.monotonic() - stopped < 3.0
    assert bus.leader() is None
    assert bus.length() < pods
    assert all(checkpoint.get("relisting") == "1" for checkpoint in bus.checkpoints())
    sim.slow_responses(0)

    second = spawn("b")
    wait_caught_up(bus, sim)
    assert second.terminate() == 0
    assert_faithful(bus, sim, history, exact=True)
