"""``python -m bench.chaos``: run the fault scenarios and print issue 7's table.

Runs the full versions (``make chaos``; about ten minutes on 2 cores) or, with ``--short``,
the ones ``make test`` runs. ``--ha``: the faults of production Redis topologies instead (a
cluster with replicas; ``make ha``). Exits 1 when a scenario broke a promise, after printing what.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.chaos.catalogue import FULL, HA, HA_SHORT, SHORT
from bench.chaos.scenarios import Result, run, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="run the short versions")
    parser.add_argument(
        "--ha", action="store_true",
        help="run the primary failover faults on a Redis Cluster with replicas (make ha)",
    )  # fmt: skip
    parser.add_argument(
        "--only", metavar="TEXT", help="run only the scenarios whose name contains TEXT"
    )
    parser.add_argument(
        "--keep", metavar="DIR", type=Path,
        help="keep every scenario's logs and recorded handler calls under DIR",
    )  # fmt: skip
    args = parser.parse_args(argv)
    chosen = (HA_SHORT if args.short else HA) if args.ha else (SHORT if args.short else FULL)
    scenarios = [s for s in chosen if not args.only or args.only in s.name]
    if not scenarios:
        parser.error(f"no scenario name contains {args.only!r}")
    results: list[Result] = []
    for number, scenario in enumerate(scenarios):
        print(f"running: {scenario.name} ...", flush=True)
        workdir = None
        if args.keep is not None:
            workdir = args.keep / f"{number}-{scenario.fault}"
            workdir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        result = run(scenario, workdir)
        results.append(result)
        retries = ", ".join(f"{name} {lines}" for name, lines in result.retries_logged.items())
        print(
            f"  done in {time.monotonic() - started:.0f} s; {result.deletions} deletions, "
            f"{result.redeliveries} initial-list re-deliveries; Redis failures logged: {retries}"
        )
        for note in result.notes:
            print(f"  {note}")
        label = "KNOWN LIMIT" if scenario.known_limit else "PROBLEM"
        for problem in result.problems:
            print(f"  {label} {problem}")
    print()
    print(table(results))
    return 1 if any(r.problems for r in results if not r.scenario.known_limit) else 0


if __name__ == "__main__":
    sys.exit(main())
