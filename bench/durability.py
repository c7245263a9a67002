"""What ``--redis-wait-replicas N`` costs the reflector's publish path: throughput and CPU per
delta with N = 0, 1, 2 against one primary with two replicas on loopback (issue 17, point 2).

Not a test. Run from the repository root (it starts three private redis-servers on free
ports)::

    .venv/bin/python bench/durability.py [--deltas 10000] [--batch 50] [--repeat 3]

Every N publishes the same kind of work (Updated deltas of realistic ~3.5 KB Pods, from
``bench/publisher.py``, over 16 shards, in watch-sized batches) in the same run, the Ns taking
turns round after round so that a machine that gets busier part-way hurts them alike. Reported
per N (medians over the rounds): deltas/s (wall clock), CPU µs per delta of this publishing
process, of the primary and of the two replicas together (``/proc``, ``bench/proc_stats.py``),
and each as a ratio to N = 0 of the same run. A WAIT adds no round trip (it rides in the
publish pipeline) but the publisher waits for the slowest of N replicas to apply and
acknowledge the batch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from proc_stats import process_cpu_seconds
from publisher import batches, make_deltas

from common.deltas import DeltaType
from common.replica_wait import ReplicaWait
from reflector_svc.publisher import ShardPublisher
from tests.support.replicas import ReplicaSet

SHARDS = 16
REPLICAS = 2
WAIT_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class Round:
    rate: float
    """Deltas per second, wall clock."""
    client_us: float
    primary_us: float
    replicas_us: float


def publish_round(
    client: redis.Redis, cluster: ReplicaSet, replicas: int, *, deltas: int, batch: int, rv: int
) -> Round:
    """``deltas`` updates in batches of ``batch``, each publish waiting for ``replicas``."""
    publisher = ShardPublisher(
        client, prefix="ib", resource="pods", shard_count=SHARDS,
        replica_wait=ReplicaWait(replicas, WAIT_TIMEOUT_MS),
    )  # fmt: skip
    chunks = batches(make_deltas(deltas, DeltaType.UPDATED, rv), batch)
    pids = {
        "client": [os.getpid()],
        "primary": [pid(cluster.primary)],
        "replicas": [pid(replica) for replica in cluster.replicas],
    }
    before = {name: sum(map(process_cpu_seconds, ids)) for name, ids in pids.items()}
    started = time.perf_counter()
    for chunk in chunks:
        publisher.publish(1, chunk, checkpoint_rv=chunk[-1].resource_version)
    elapsed = time.perf_counter() - started
    cluster.in_sync()  # the replicas' work for this round is done before their CPU is read
    used = {name: sum(map(process_cpu_seconds, ids)) - before[name] for name, ids in pids.items()}
    return Round(
        deltas / elapsed,
        1e6 * used["client"] / deltas,
        1e6 * used["primary"] / deltas,
        1e6 * used["replicas"] / deltas,
    )


def pid(server: object) -> int:
    process = getattr(server, "process", None)
    assert process is not None
    return int(process.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=10_000, help="deltas per round and N")
    parser.add_argument("--batch", type=int, default=50, help="deltas per publish")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (each runs every N)")
    args = parser.parse_args()
    if min(args.deltas, args.batch, args.repeat) < 1:
        parser.error("--deltas, --batch and --repeat must be >= 1")
    waits = list(range(REPLICAS + 1))
    with tempfile.TemporaryDirectory(prefix="bench-durability-") as workdir:
        cluster = ReplicaSet(Path(workdir), count=REPLICAS)
        try:
            cluster.start()
            client = redis.Redis.from_url(cluster.primary.url, socket_timeout=30)
            rv = 1_000_000
            publisher = ShardPublisher(client, prefix="ib", resource="pods", shard_count=SHARDS)
            publisher.fence(1)
            for chunk in batches(make_deltas(args.deltas, DeltaType.ADDED, rv), 500):
                publisher.publish(1, chunk, checkpoint_rv=None)
            cluster.in_sync()
            results: dict[int, list[Round]] = {n: [] for n in waits}
            for round_ in range(args.repeat):
                order = waits if round_ % 2 == 0 else waits[::-1]
                for n in order:
                    rv += 2 * args.deltas
                    results[n].append(
                        publish_round(
                            client, cluster, n, deltas=args.deltas, batch=args.batch, rv=rv
                        )
                    )
            client.close()
        finally:
            cluster.stop()
    report(results, args)


def report(results: dict[int, list[Round]], args: argparse.Namespace) -> None:
    def median(n: int, field: str) -> float:
        return statistics.median(getattr(r, field) for r in results[n])

    fields = ("rate", "client_us", "primary_us", "replicas_us")
    base = {field: median(0, field) for field in fields}
    print(
        f"{args.deltas} Updated deltas per round, batches of {args.batch}, {SHARDS} shards, "
        f"{REPLICAS} replicas, WAIT timeout {WAIT_TIMEOUT_MS} ms; medians of {args.repeat} rounds"
    )
    print(
        f"{'N':>2} {'deltas/s':>9} {'(x N=0)':>8} {'client us/d':>12} {'(x)':>6} "
        f"{'primary us/d':>13} {'(x)':>6} {'replicas us/d':>14} {'(x)':>6}"
    )
    for n, rounds in results.items():
        values = {field: median(n, field) for field in fields}
        ratio = {field: values[field] / base[field] if base[field] else 0.0 for field in fields}
        print(
            f"{n:>2} {values['rate']:>9.0f} {ratio['rate']:>8.2f} "
            f"{values['client_us']:>12.1f} {ratio['client_us']:>6.2f} "
            f"{values['primary_us']:>13.1f} {ratio['primary_us']:>6.2f} "
            f"{values['replicas_us']:>14.1f} {ratio['replicas_us']:>6.2f}"
            f"   rounds: {', '.join(f'{r.rate:.0f}/s' for r in rounds)}"
        )


if __name__ == "__main__":
    main()
