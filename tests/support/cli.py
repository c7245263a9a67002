"""Running an informer-bus command line in a child process, for CLI tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from tests.support.paths import ROOT


def run_command(
    command: Sequence[str], *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run it with only ``env`` as settings: no INFORMER_BUS_*/IB_* leak in from the tests."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFORMER_BUS_", "IB_"))}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, check=False, timeout=60, cwd=ROOT,
        env={**clean, **(env or {})},
    )  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess[str], program: str) -> str:
    """Exit status 2 and exactly one ``<program>: error:`` line, no traceback; returns it."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{program}: error: ")
    return lines[0]
