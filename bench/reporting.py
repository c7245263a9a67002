"""What the benches' reports share: the machine they ran on, and how tables end.

The numbers only mean something beside the machine that produced them (2 shared cores are not
a server), so every JSON report carries :func:`machine` and every table states it first.
"""

from __future__ import annotations

import contextlib
import os
import platform
import textwrap
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def print_machine(title: str, machine: dict[str, Any]) -> None:
    """A table's first line: what it measured, on which machine."""
    print(
        f"{title}: {machine['cores']} cores ({machine['cpu'] or 'unknown cpu'}), "
        f"Python {machine['python']}, {machine['platform']}"
    )


def print_header(header: str) -> None:
    """A table's column header, underlined."""
    print(header)
    print("-" * len(header))


def print_notes(notes: list[str]) -> None:
    """A blank line, then each note as a bullet wrapped at 100 columns."""
    print()
    for note in notes:
        print(textwrap.fill(note, width=100, initial_indent="* ", subsequent_indent="  "))


def ratio_cells(row: dict[str, Any]) -> tuple[str, str, str]:
    """A row's ratio (``1.23x``), its target (``>= 5.00x ``) and verdict (``met``/``MISSED``),
    each empty where the row has none."""
    ratio = "" if row["ratio"] is None else f"{row['ratio']:.2f}x"
    target = "" if row["target_ratio"] is None else f">= {row['target_ratio']:.2f}x "
    verdict = "" if row["met"] is None else ("met" if row["met"] else "MISSED")
    return ratio, target, verdict
