"""Short versions of the process and API server fault scenarios (``make chaos`` runs them all).

Three of issue 7's faults, chosen for what they prove per second of runtime (see
:mod:`bench.chaos.scenarios`): the reflector leader frozen past its lease (the fence refuses
every write it attempts after waking up), the API server down while pods vanish silently and
history is compacted (the 410 relist's tombstones reach ``on_delete``), and three kill -9s of
processors under churn, each replaced. Each must keep issue 7's promises: the final stores
equal the simulator's ground truth, every deletion reaches ``on_delete``, nothing is published
twice for an unchanged object, per-object order holds; and the fault must have bitten.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos.catalogue import REDIS_FAULTS, SHORT, Scenario
from bench.chaos.scenarios import Result, run

SCENARIOS = [s for s in SHORT if s.fault not in REDIS_FAULTS]


def _report(result: Result) -> str:
    logs = "\n".join(f"----- {name} -----\n{text}" for name, text in result.logs.items())
    return "\n".join(result.problems + result.notes) + "\n" + logs


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.fault for s in SCENARIOS])
def test_the_pipeline_survives_and_converges(scenario: Scenario, tmp_path: Path) -> None:
    result = run(scenario, tmp_path)
    print(_report(result))  # shown when the test fails
    assert result.problems == []
    assert result.recovery is not None
    assert (result.lost, result.duplicated) == (0, 0)
    # The churn really ran across the fault, deletions included.
    assert result.deltas > scenario.churn_rate * scenario.warmup / 2
    assert result.deletions > 0
    assert result.notes, "the fault reported nothing about what it did"
