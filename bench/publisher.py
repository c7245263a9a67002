"""Deltas/s through ``ShardPublisher.publish`` beside bare pipelined XADDs of the same payloads.

Not a test: timings on a shared machine are noisy, so nothing asserts them. Run it from the
repository root (it starts a private redis-server on a free port unless ``--url`` is given)::

    .venv/bin/python bench/publisher.py [--deltas 20000] [--batch 500] [--shards 16]

Every row publishes the same ~3.5 KB envelopes (realistic Pods, ``common.wire`` v1), ``--batch``
per round trip, over ``--shards`` shard streams, from an empty database; best and median of
``--repeat`` runs, the variants taking turns within each repeat:

* ``bare XADD``: one pipeline per batch of ``XADD <shard stream> * d <envelope>``, shard
  computed beforehand -- the floor any publisher pays;
* ``bare XADD+HSET x2``: the same plus the two known-state HSETs, pipelined, not atomic, no
  dedup -- what the state costs without the script;
* ``publish Added`` / ``publish Updated``: ``ShardPublisher.publish`` with new keys, then with
  newer versions of the same keys (one Lua call per shard per batch, fenced, checkpointed);
* ``publish replay``: the same batches again, all skipped (a restart's replay);
* ``publish via redis-py Script``: as ``publish Added`` but with redis-py's ``Script`` objects
  in the pipeline, which send a ``SCRIPT EXISTS`` round trip before every batch.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import redis
from pods import sample_pod

from common.deltas import DeltaType
from common.object_keys import meta_namespace_key
from common.redis_layout import ShardKeys
from common.sharding import shard_for
from common.wire import FIELD, DeltaEnvelope, encode_envelope
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher, _Call
from tests.support.redis_server import RedisServer

RESOURCE = "pods"


def make_deltas(count: int, kind: DeltaType, rv_base: int) -> list[PendingDelta]:
    template = sample_pod()
    deltas = []
    for i in range(count):
        meta = {**template["metadata"], "name": f"pod-{i:06d}", "namespace": f"ns-{i % 50:02d}"}
        meta["resourceVersion"] = str(rv_base + i)
        pod = {**template, "metadata": meta}
        env = DeltaEnvelope(
            kind, meta_namespace_key(pod), meta["resourceVersion"], meta["uid"], pod, time.time()
        )
        encoded = encode_envelope(env, obj_json=orjson.dumps(pod))
        deltas.append(PendingDelta(kind, env.key, env.resource_version, encoded))
    return deltas


def batches(deltas: Sequence[PendingDelta], size: int) -> list[Sequence[PendingDelta]]:
    return [deltas[start : start + size] for start in range(0, len(deltas), size)]


class ScriptObjectPublisher(ShardPublisher):
    """redis-py's documented way: ``Script`` objects in the pipeline (SCRIPT EXISTS first)."""

    def _execute(self, calls: Sequence[_Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for call in calls:
            call.script(keys=call.keys, args=call.args, client=pipe)
        replies: list[Any] = pipe.execute(raise_on_error=False)
        return replies


Variant = tuple[str, Callable[[], None], Callable[[], None]]  # what, setup, timed run


def interleaved_rates(
    client: redis.Redis, count: int, repeat: int, variants: Sequence[Variant]
) -> list[tuple[str, float, float]]:
    """(what, best, median) deltas/s per variant. Variants take turns within each repeat, so a
    noisy neighbour on the shared machine slows all of them alike instead of one."""
    seconds: dict[str, list[float]] = {what: [] for what, _, _ in variants}
    for _ in range(repeat):
        for what, setup, run in variants:
            client.flushall()
            setup()
            started = time.perf_counter()
            run()
            seconds[what].append(time.perf_counter() - started)
    return [
        (what, count / min(times), count / statistics.median(times))
        for what, times in seconds.items()
    ]


@contextlib.contextmanager
def redis_url(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    with tempfile.TemporaryDirectory() as workdir:
        server = RedisServer(Path(workdir))
        server.start()
        try:
            yield server.url
        finally:
            server.stop()


def measure(client: redis.Redis, args: argparse.Namespace) -> list[tuple[str, float, float]]:
    added = make_deltas(args.deltas, DeltaType.ADDED, 1_000_000)
    updated = make_deltas(args.deltas, DeltaType.UPDATED, 2_000_000)
    size = sum(len(d.envelope) for d in added) / len(added)
    print(
        f"{args.deltas} deltas of {size:.0f} B, batches of {args.batch}, {args.shards} shards, "
        f"{args.repeat} interleaved repeats, redis-server {client.info('server')['redis_version']}"
    )
    streams = [ShardKeys("ib", RESOURCE, shard) for shard in range(args.shards)]
    routed = [(streams[shard_for(d.key, args.shards)], d) for d in added]
    routed_batches = [routed[i : i + args.batch] for i in range(0, len(routed), args.batch)]
    publisher = ShardPublisher(client, prefix="ib", resource=RESOURCE, shard_count=args.shards)
    via_scripts = ScriptObjectPublisher(
        client, prefix="ib", resource=RESOURCE, shard_count=args.shards
    )

    def bare_xadd() -> None:
        for batch in routed_batches:
            pipe = client.pipeline(transaction=False)
            for keys, d in batch:
                pipe.xadd(keys.stream, {FIELD: d.envelope})
            pipe.execute()

    def bare_with_state() -> None:
        for batch in routed_batches:
            pipe = client.pipeline(transaction=False)
            for keys, d in batch:
                pipe.xadd(keys.stream, {FIELD: d.envelope})
                pipe.hset(keys.versions, d.key, d.resource_version)
                pipe.hset(keys.objects, d.key, d.envelope)
            pipe.execute()

    def publish_all(target: ShardPublisher, deltas: Sequence[PendingDelta]) -> Callable[[], None]:
        def run() -> None:
            for batch in batches(deltas, args.batch):
                target.publish(1, batch, checkpoint_rv=batch[-1].resource_version)

        return run

    def nothing() -> None:
        pass

    return interleaved_rates(
        client,
        args.deltas,
        args.repeat,
        [
            ("bare XADD (baseline)", nothing, bare_xadd),
            ("bare XADD+HSET x2, not atomic", nothing, bare_with_state),
            ("publish Added", nothing, publish_all(publisher, added)),
            ("publish Updated", publish_all(publisher, added), publish_all(publisher, updated)),
            (
                "publish replay (all skipped)",
                publish_all(publisher, added),
                publish_all(publisher, added),
            ),
            ("publish via redis-py Script", nothing, publish_all(via_scripts, added)),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--url", help="an existing Redis to use (it is FLUSHALLed!)")
    args = parser.parse_args()
    with redis_url(args.url) as url:
        client = redis.Redis.from_url(url, socket_timeout=60)
        try:
            rows = measure(client, args)
        finally:
            client.flushall()
            client.close()
    best_base, median_base = rows[0][1], rows[0][2]
    print(f"{'what':32} {'best/s':>8} {'vs bare':>8} {'median/s':>9} {'vs bare':>8}")
    for what, best, median in rows:
        print(
            f"{what:32} {best:8,.0f} {best / best_base:8.0%} "
            f"{median:9,.0f} {median / median_base:8.0%}"
        )


if __name__ == "__main__":
    main()
