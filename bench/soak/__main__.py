"""``python -m bench.soak``: run the soak and print its table (see :mod:`bench.soak.run`).

``make soak-short`` runs ``--seconds 60 --rate 2000`` (issue 7's soak), ``make soak`` the
30-minute version. Exits 0 when every rule held, 1 when one broke (after printing which), 2 on
a usage mistake.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.soak.report import table, write_samples
from bench.soak.results import SoakConfig
from bench.soak.run import run
from informer_bus.local_redis import RedisServerMissingError


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    defaults = SoakConfig()
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=_positive, default=defaults.seconds,
                        help="seconds of churn (default: %(default)s)")  # fmt: skip
    parser.add_argument("--rate", type=_positive, default=defaults.rate,
                        help="churn events per second (default: %(default)s)")  # fmt: skip
    parser.add_argument("--restart-every", type=_positive, default=defaults.restart_every,
                        help="seconds between restarts of processor p2, alternately SIGTERM "
                        "and kill -9 (default: %(default)s)")  # fmt: skip
    parser.add_argument("--pods", type=int, default=defaults.pods,
                        help="pods before the churn starts (default: %(default)s)")  # fmt: skip
    parser.add_argument("--keep", metavar="DIR", type=Path,
                        help="keep the logs, handler files and samples.csv under DIR")  # fmt: skip
    args = parser.parse_args(argv)
    if args.pods < 1:
        parser.error(f"--pods must be >= 1, got {args.pods}")
    config = SoakConfig(
        seconds=args.seconds, rate=args.rate, restart_every=args.restart_every, pods=args.pods
    )
    started = time.monotonic()
    try:
        result = run(config, args.keep, progress=lambda line: print(line, flush=True))
    except RedisServerMissingError as error:
        print(f"python -m bench.soak: error: {error}", file=sys.stderr)
        return 2
    if args.keep is not None:
        write_samples(result, args.keep / "samples.csv")
    print(f"\ndone in {time.monotonic() - started:.0f} s\n")
    print(table(result))
    for problem in result.memory_problems + result.problems:
        print(f"PROBLEM {problem}")
    print("\nverdict:", "FAIL" if result.failed else "ok")
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())
