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
