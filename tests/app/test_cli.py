from __future__ import annotations

import subprocess
import sys

import pytest

from informer_bus.cli import main


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
