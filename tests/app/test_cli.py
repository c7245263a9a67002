from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from apiserver_sim import Simulator
from informer_bus.cli import main
from tests.support.cli import one_line_error, run_command
from tests.support.redis_server import RedisServer, free_port

CONSOLE = [str(Path(sys.executable).with_name("informer-bus"))]
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"


def test_help_explains_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Redis Streams" in out
    assert "INFORMER_BUS_" in out


def test_unknown_subcommand_is_a_one_line_error_not_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "informer_bus.cli", "no-such-command"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "invalid choice" in result.stderr


def test_console_script_is_installed() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; "
         "print([e.value for e in m.entry_points(group='console_scripts') "
         "if e.name == 'informer-bus'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "informer_bus.cli:main" in result.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["processor", "--bogus"],
        ["reflector", "--resource", "pods", "--bogus"],
        ["status", "--nope"],
        ["subscribe", "pods", "--bogus"],
        ["subscribe", "pods", "extra"],
        ["demo", "--bogus"],
    ],
)
def test_an_unknown_argument_shows_the_subcommands_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: informer-bus {argv[0]} ")
    assert err.rstrip().endswith(
        f"informer-bus {argv[0]}: error: unrecognized arguments: {argv[-1]}"
    )


def test_an_unknown_top_level_flag_shows_the_top_level_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: informer-bus [-h]")
    assert err.rstrip().endswith("informer-bus: error: unrecognized arguments: --nope")


@pytest.mark.parametrize("service", ["processor", "reflector"])
def test_a_taken_probe_port_is_one_line_naming_the_address_and_its_flags(
    service: str, redis_server: RedisServer, sim: Simulator
) -> None:
    """Issue 34: it said ``cannot start: Address already in use``, naming neither."""
    args = {
        "processor": ["--resource", "pods", "--handler", EXAMPLE],
        "reflector": ["--resource", "pods", "--kube-url", sim.url],
    }[service]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_command(
            [*CONSOLE, service], *args, "--redis-url", redis_server.url,
            "--http-host", "127.0.0.1", "--http-port", str(port),
        )  # fmt: skip
    line = one_line_error(result, f"informer-bus {service}")
    assert line.endswith(
        f"cannot listen on 127.0.0.1:{port} (--http-host 127.0.0.1, --http-port {port}): "
        "Address already in use"
    ), line


@pytest.mark.parametrize(
    ("command", "status"),
    [(["status"], 1), (["groups", "list"], 1), (["subscribe", "pods"], 2)],
    ids=["status", "groups", "subscribe"],
)
def test_every_command_finds_redis_by_one_rule(
    command: list[str], status: int, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Issue 34: ``status`` ignored ``$REDIS_URL`` (the demo honours it) and silently read
    127.0.0.1:6379. The rule, for every command: --redis-url, else INFORMER_BUS_REDIS_URL,
    else REDIS_URL, else the default. The Redis here is empty: each says where it looked."""
    elsewhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for env, flags in [
        ({"REDIS_URL": redis_server.url}, []),
        ({"REDIS_URL": elsewhere, "INFORMER_BUS_REDIS_URL": redis_server.url}, []),
        ({"REDIS_URL": elsewhere}, ["--redis-url", redis_server.url]),
    ]:
        result = run_command([*CONSOLE, *command], *flags, env=env)
        assert result.returncode == status, result.stderr
        assert f"in {redis_server.url}" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["processor"], "INFORMER_BUS_REDIS_URL"),
        (["reflector"], "INFORMER_BUS_REDIS_URL"),
        (["status"], "INFORMER_BUS_REDIS_URL"),
        (["groups", "list"], "INFORMER_BUS_REDIS_URL"),
        (["groups", "delete"], "INFORMER_BUS_REDIS_URL"),
        (["subscribe"], "INFORMER_BUS_REDIS_URL"),
        (["demo"], "INFORMER_BUS_DEMO_REDIS_URL"),
    ],
)
def test_every_command_states_the_rule_in_its_help(command: list[str], variable: str) -> None:
    result = run_command([*CONSOLE, *command], "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert f"env {variable}, else REDIS_URL)" in text
