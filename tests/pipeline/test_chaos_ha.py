"""Short versions of the production-topology faults (``make ha`` runs the long ones).

On a Redis Cluster of 3 primaries with one replica each (``cluster-replicas`` in
:mod:`bench.chaos.topologies`), and on a primary with two replicas behind three sentinels
(``sentinel``), mid-churn: the primary serving shard 0 is killed with -9, or
frozen together with the reflector leader until its replica was promoted and a standby leads
(split brain until the old primary is demoted). Each must keep issue 7's promises, as every
scenario of :mod:`bench.chaos.scenarios` does, and the fault must have bitten: a replica was
promoted (and the frozen primary came back as a replica).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos.catalogue import HA_SHORT, Scenario
from bench.chaos.scenarios import run
from tests.pipeline.chaos_checks import assert_recovered_with_every_promise

pytestmark = pytest.mark.timeout(180)  # a failover on a loaded machine: bounded waits of 60 s


IDS = [f"{s.topology}-{s.fault}-n{s.wait_replicas}" for s in HA_SHORT]


@pytest.mark.parametrize("scenario", HA_SHORT, ids=IDS)
def test_the_pipeline_survives_a_failover_and_converges(scenario: Scenario, tmp_path: Path) -> None:
    result = run(scenario, tmp_path)
    assert_recovered_with_every_promise(result, scenario)
    # The fault bit: a replica took over (the checks in bench.chaos.faults), and said so.
    assert any(note.startswith("promoted ") for note in result.notes), result.notes
