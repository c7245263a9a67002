"""redis-server's and the publishing process' CPU per delta of ``ShardPublisher.publish``, by
batch size (issue 16, point 3).

Not a test. A watch burst reaches the publisher in batches of a few dozen deltas (what one or a
few network reads held), i.e. a handful per shard per script call, so the script's per-call
cost counts as much as its per-delta cost; this separates the two. Run from the repository
root (it starts a private redis-server on a free port)::

    .venv/bin/python bench/publish_cpu.py [--deltas 20000] [--batches 16,50,500] [--repeat 3]

Per batch size: Updated deltas of realistic ~3.5 KB Pods (``bench/publisher.py``'s) over 16
shards, from a database holding every key at an older version; redis-server's CPU from its own
``INFO cpu``, this process' from ``time.process_time``, each divided by the deltas.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import redis
from publisher import batches, make_deltas

from common.deltas import DeltaType
from reflector_svc.publisher import ShardPublisher
from tests.support.redis_server import RedisServer

SHARDS = 16


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def run(client: redis.Redis, deltas: int, batch: int, rv_base: int) -> tuple[float, float]:
    """(redis-server µs per delta, this process' µs per delta) publishing ``deltas`` updates
    in batches of ``batch``."""
    publisher = ShardPublisher(client, prefix="ib", resource="pods", shard_count=SHARDS)
    publisher.fence(1)
    updates = make_deltas(deltas, DeltaType.UPDATED, rv_base)
    chunks = batches(updates, batch)
    before_redis, before_self = redis_cpu(client), time.process_time()
    for chunk in chunks:
        publisher.publish(1, chunk, checkpoint_rv=chunk[-1].resource_version)
    used_redis = redis_cpu(client) - before_redis
    used_self = time.process_time() - before_self
    return 1e6 * used_redis / deltas, 1e6 * used_self / deltas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--batches", default="16,50,500", help="batch sizes, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(size) for size in args.batches.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-publish-cpu-") as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            client.flushall()
            rv = 1_000_000
            publisher = ShardPublisher(client, prefix="ib", resource="pods", shard_count=SHARDS)
            publisher.fence(1)
            for chunk in batches(make_deltas(args.deltas, DeltaType.ADDED, rv), 500):
                publisher.publish(1, chunk, checkpoint_rv=None)
            print(f"{'batch':>6} {'redis us/delta':>15} {'client us/delta':>16}  (runs)")
            for size in sizes:
                results = []
                for _ in range(args.repeat):
                    rv += 2 * args.deltas
                    results.append(run(client, args.deltas, size, rv))
                redis_us = sorted(r for r, _ in results)
                self_us = sorted(s for _, s in results)
                print(
                    f"{size:>6} {redis_us[len(redis_us) // 2]:>15.1f} "
                    f"{self_us[len(self_us) // 2]:>16.1f}  "
                    f"({', '.join(f'{r:.1f}' for r in redis_us)} | "
                    f"{', '.join(f'{s:.1f}' for s in self_us)})"
                )
            client.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
