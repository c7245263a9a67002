"""Do two ``make bench`` runs agree? Their CPU-per-event ratios side by side (issue 16).

CPU per event over the bare reader's in the same run is the figure meant to hold from one run
to the next on a shared machine; this reads two ``bench/compare.py --json`` reports and says,
row by row, how far apart the two runs put it::

    .venv/bin/python bench/compare_runs.py run1.json run2.json [--tolerance 0.2]

Exit status 0 when every row agrees within the tolerance, 1 when one does not, 2 on a usage
error (a missing or foreign file).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import orjson

PROGRAM = "bench/compare_runs.py"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROGRAM}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def load(parser: Parser, path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    try:
        report = orjson.loads(path.read_bytes())
        return {(row["workload"], row["label"]): row for row in report["rows"]}
    except OSError as exc:
        parser.error(f"{path}: {exc.strerror}")
    except (orjson.JSONDecodeError, KeyError, TypeError):
        parser.error(f"{path}: not a bench/compare.py --json report")


def spread(a: float, b: float) -> float:
    """How far apart two positive figures are, relative to the smaller."""
    return abs(a - b) / min(a, b)


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog=PROGRAM, description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument(
        "--tolerance", type=float, default=0.2, help="largest relative difference (0.2: 20 %%)"
    )
    args = parser.parse_args(argv)
    if args.tolerance <= 0:
        parser.error("--tolerance must be positive")
    first, second = load(parser, args.first), load(parser, args.second)
    header = f"{'workload':13} {'contender':40} {'run 1':>7} {'run 2':>7} {'apart':>7}"
    print("CPU per event / the bare reader's, in each run")
    print(header)
    print("-" * len(header))
    apart = 0
    for key, row in first.items():
        other = second.get(key)
        a, b = row.get("cpu_ratio_to_bare"), other and other.get("cpu_ratio_to_bare")
        if not a or not b or row["contender"] == "bare":
            continue
        difference = spread(a, b)
        verdict = "" if difference <= args.tolerance else "  APART"
        apart += difference > args.tolerance
        print(f"{key[0]:13} {key[1]:40} {a:6.2f}x {b:6.2f}x {difference:6.1%}{verdict}")
    print(f"\n{apart} row(s) more than {args.tolerance:.0%} apart")
    return 1 if apart else 0


if __name__ == "__main__":
    sys.exit(main())
