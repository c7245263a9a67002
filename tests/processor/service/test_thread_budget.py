"""A processor owning 16 shards runs at most six threads, whatever the shard count (issue 35).

Each owned shard had a thread and a blocking connection of its own; now one reading loop reads
them all (``processor_svc.reading_loop``) and the Redis ping behind ``/readyz`` runs on the
supervisor. Counted from ``/proc`` of a real processor process, after its takeover of every
shard, with one (synchronous) handler: the main thread, the reading loop, the handler's
dispatch thread, the ownership loop, the supervisor and the probe server.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis

from apiserver_sim import Simulator, SimulatorSettings
from tests.support.bus import ProcessorProcess, ReflectorProcess
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

# A handler of the user's that starts a thread of its own (it reports counts every few
# seconds): the six are the processor's, so the seventh is allowed for it.
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
HANDLER_THREADS = 1


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_processor_owning_16_shards_runs_at_most_six_threads(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    # redis_client: an empty Redis (an earlier test's layout with another shard count would
    # keep the processor from starting)
    common = ["--shard-count", "16", "--http-host", "127.0.0.1", "--http-port", "0"]
    env = {"INFORMER_BUS_REDIS_URL": redis_server.url}
    with Simulator(SimulatorSettings()) as sim:
        sim.populate("pods", 200, seed=35)
        reflector = ReflectorProcess(
            ["--resource", "pods", "--kube-url", sim.url, *common], tmp_path / "r.log", env=env
        )
        processor = ProcessorProcess(
            ["--resource", "pods", "--handler", EXAMPLE, *common], tmp_path / "p.log", env=env
        )
        try:
            reflector.start()
            processor.start()
            wait_until(lambda: processor.probe() == 200, 60, what="the processor synced")
            churn = sim.start_churn(rate=200, seconds=5, seed=35)  # counted while reading
            counts = []
            while churn.running:
                counts.append(_threads(processor.pid))
                time.sleep(0.1)
            assert churn.error is None
            assert len(counts) >= 10 and max(counts) <= 6 + HANDLER_THREADS, counts
        finally:
            processor.close()
            reflector.close()
