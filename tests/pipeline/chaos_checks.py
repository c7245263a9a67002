"""What every short fault scenario of ``make test`` must show (``bench.chaos`` runs them)."""

from __future__ import annotations

from bench.chaos.catalogue import Scenario
from bench.chaos.scenarios import Result

__all__ = ["assert_recovered_with_every_promise"]


def _report(result: Result) -> str:
    logs = "\n".join(f"----- {name} -----\n{text}" for name, text in result.logs.items())
    return "\n".join(result.problems + result.notes) + "\n" + logs


def assert_recovered_with_every_promise(result: Result, scenario: Scenario) -> None:
    """No problem, a recovery, nothing lost or duplicated, and the churn really ran across the
    fault, deletions included. The report (problems, notes, every log) is printed first: pytest
    shows it when an assertion fails."""
    print(_report(result))
    assert result.problems == []
    assert result.recovery is not None
    assert (result.lost, result.duplicated) == (0, 0)
    assert result.deltas > scenario.churn_rate * scenario.warmup / 2
    assert result.deletions > 0
