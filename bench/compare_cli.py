"""bench/compare.py's command line: the sizes (the issue's by default, ``--quick`` for a try),
the flags, and a user mistake in one line with exit status 2, as for every informer-bus command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from compare_contenders import CONTENDERS
from compare_report import PROGRAM

from common.service_runner import fail

DEFAULTS = {"pods": 100_000, "burst": 50_000, "steady_seconds": 30.0, "steady_rate": 1000.0}
QUICK = {"pods": 5_000, "burst": 5_000, "steady_seconds": 5.0, "steady_rate": 1000.0}


class Parser(argparse.ArgumentParser):
    """A user mistake ends in one line and exit status 2, as for every informer-bus command."""

    def error(self, message: str) -> NoReturn:
        sys.exit(fail(PROGRAM, message))


def check_py_spy(parser: Parser, out_dir: Path | None) -> None:
    if out_dir is None:
        return
    if not Path(sys.executable).with_name("py-spy").exists():
        parser.error("--py-spy: py-spy is not installed in this environment (make install)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--py-spy: cannot create {out_dir}: {exc.strerror}")


def check_sizes(parser: Parser, args: argparse.Namespace) -> None:
    if args.pods < 1 or args.burst < 1:
        parser.error("--pods and --burst must be at least 1")
    for flag, count in (("--bare-runs", args.bare_runs), ("--rounds", args.rounds)):
        if count < 1:
            parser.error(f"{flag} must be at least 1")
    if args.steady_seconds <= 0 or args.steady_rate <= 0:
        parser.error("--steady-seconds and --steady-rate must be positive")


def parse(argv: Sequence[str] | None, *, description: str) -> argparse.Namespace:
    parser = Parser(prog=PROGRAM, description=description)
    sizes = parser.add_argument_group("sizes (defaults: the issue's)")
    sizes.add_argument("--pods", type=int, help=f"pods to sync (default {DEFAULTS['pods']:,})")
    sizes.add_argument("--burst", type=int, help=f"updates per burst ({DEFAULTS['burst']:,})")
    sizes.add_argument(
        "--steady-seconds",
        type=float,
        help=f"length of the steady churn ({DEFAULTS['steady_seconds']:g})",
    )
    sizes.add_argument(
        "--steady-rate",
        type=float,
        help=f"updates/s of the steady churn ({DEFAULTS['steady_rate']:g})",
    )
    sizes.add_argument(
        "--quick",
        action="store_true",
        help="5k pods, bursts of 5k, 5 s steady: a try in about 5 minutes (too few pods for the "
        "cold start and memory targets to say anything: a fixed cost dominates)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=CONTENDERS,
        help="leave a contender out (repeatable)",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the report here")
    parser.add_argument(
        "--chart", type=Path, metavar="PATH.png", help="also draw a PNG chart (needs matplotlib)"
    )
    parser.add_argument(
        "--chart-from",
        type=Path,
        metavar="REPORT.json",
        help="measure nothing: draw --chart from an earlier --json report",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile the reflector and the processor over the 1-processor burst with py-spy "
        "(raw profiles in DIR, a summary on stderr; the profiled run's CPU figures include "
        "py-spy's own load on the cores, not on the profiled processes)",
    )
    parser.add_argument(
        "--bare-runs",
        type=int,
        default=5,
        metavar="N",
        help="runs of the bare reader, the yardstick of every CPU ratio: the first before "
        "everything, the last at the very end, the others spread between the contenders (one "
        "beside each with the default); each workload's ratios use the median CPU per event "
        "of all its runs and rounds (default 5)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        metavar="N",
        help="rounds of each informer-bus warm restart, burst and steady churn (the "
        "processors restarted for each warm restart), and of every other contender's burst "
        "and churn (in each of the bare reader's runs); each row uses the round with the "
        "median CPU per event (default 3)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    # A contender's own process (ContenderChild); not for users.
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--sim-url", help=argparse.SUPPRESS)
    parser.add_argument("--log-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for name, default in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, type(default)(default))
    if args.child is not None:
        return args
    check_sizes(parser, args)
    if args.chart_from is not None:
        if args.chart is None:
            parser.error("--chart-from needs --chart PATH.png")
        if not args.chart_from.is_file():
            parser.error(f"--chart-from: no such file: {args.chart_from}")
    for path in (args.json, args.chart):
        if path is not None and not path.resolve().parent.is_dir():
            parser.error(f"no such directory: {path.parent}")
    check_py_spy(parser, args.py_spy)
    return args
