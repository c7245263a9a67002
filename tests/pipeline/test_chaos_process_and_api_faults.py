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
from bench.chaos.scenarios import run
from tests.pipeline.chaos_checks import assert_recovered_with_every_promise

SCENARIOS = [s for s in SHORT if s.fault not in REDIS_FAULTS]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.fault for s in SCENARIOS])
def test_the_pipeline_survives_and_converges(scenario: Scenario, tmp_path: Path) -> None:
    result = run(scenario, tmp_path)
    assert_recovered_with_every_promise(result, scenario)
    assert result.notes, "the fault reported nothing about what it did"
