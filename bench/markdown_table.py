"""The Markdown tables the long runs print (``make chaos``, ``make soak``): the issue's tables
paste into a comment as they are.
"""

from __future__ import annotations

from collections.abc import Sequence


def markdown_rows(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``header`` and ``rows`` as the lines of a Markdown table, each column as wide as its
    widest cell."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |"
        for row in [header, *rows]
    ]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return lines
