"""Redis memory per cached object, for sizing Redis (issue 6, docs/operations.md).

Not a test: nothing asserts these numbers. Run it from the repository root (it starts a private
redis-server on a free port; it never touches a Redis that happens to run on the machine, unless
``--redis-url`` names one, which tests/bench/test_redis_memory.py does to read the result back)::

    .venv/bin/python bench/redis_memory.py [--objects 100000] [--shards 16] [--json PATH]

What it does, with the reflector's own code and defaults (``ReflectorSettings()``):

1. **initial list**: ``--objects`` realistic Pods (bench/pods.py, ~3.5 KB of JSON) go through the
   reflector's default transform (managedFields stripped) and envelope encoding, and are
   published by ``ShardPublisher`` as a relist does (fence, ``begin_relist``, chunks of
   ``batch_max``, ``finish_relist``). Then the consumer group ``processors`` is created at the
   stream's end on every shard, as if processors had consumed everything. Each stream now holds
   one entry per object.
2. **updates, before retention**: one update of every object, published as watch batches
   (checkpointed). The streams hold two entries per object: the peak until the next retention
   pass (the reflector trims every ``retention_interval``).
3. **retention, updates unread**: one retention pass (``RetentionLoop.run_once`` with the
   service's ``retention_min_entries`` / ``retention_max_entries``). The group has not read the
   updates, so every one of them stays; the initial list's entries go, down to the newest
   ``--retention-min-entries`` per shard. This is Redis while processors are behind by a whole
   burst of updates.
4. **retention, updates read**: the group is moved to the end (processors caught up) and
   retention runs again, leaving about ``--retention-min-entries`` per shard (the service's
   default unless given) -- the steady state once churn has filled that many.

Each state reports ``used_memory`` (``INFO memory``) above the empty server's, in total and per
object, and ``MEMORY USAGE ... SAMPLES 0`` of every shard's stream, ``versions`` and ``objects``
keys, summed per kind; "other" is the rest of the ``used_memory`` growth (checkpoints, consumer
groups, script cache, the keyspace's own tables; ``MEMORY USAGE`` estimates allocator
overhead a little high, so it can be slightly negative). Two figures from the initial list let
a reader size other shapes: bytes per stream entry, and bytes of known state (``versions`` +
``objects``) per object.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
import redis
from pods import sample_pod
from publisher import redis_url as private_redis_url
from reporting import machine

from common.deltas import Delta, DeltaType
from common.object_keys import Obj
from common.redis_layout import PROCESSOR_GROUP as GROUP
from common.wire import DeltaEnvelope, encode_envelope
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher
from reflector_svc.retention import RetentionLoop
from reflector_svc.settings import ReflectorSettings
from reflector_svc.transform import build_transform

RESOURCE = "pods"
NAMESPACES = 50
EPOCH = 1
LIST_RV_BASE = 1_000_000
KINDS = ("stream", "versions", "objects")
MB = 1_000_000
DEFAULTS = ReflectorSettings()
TRANSFORM = build_transform(is_secret=False)  # the reflector's default: managedFields stripped


@dataclass(frozen=True)
class State:
    """Redis after one step of the workload."""

    state: str
    stream_entries: int
    used_memory_bytes: int
    """``used_memory`` above the empty server's."""
    per_object_bytes: float
    by_kind_bytes: dict[str, int]
    """``MEMORY USAGE`` summed over the shards, per key kind."""
    other_bytes: int
    ratio_to_json: float
    """Bytes per object over the object's average JSON size."""


@dataclass
class Sizes:
    """Bytes of what was published (updates add one annotation, so they are a bit larger)."""

    json_bytes: int = 0
    envelope_bytes: int = 0
    count: int = 0


def make_pod(index: int, update: int) -> Obj:
    """Pod ``index`` as the reflector publishes it: the default transform applied; an update
    carries a newer resourceVersion and a changed annotation."""
    pod = sample_pod(index, namespace=f"ns-{index % NAMESPACES:02d}")
    if TRANSFORM is not None:
        pod = TRANSFORM(pod)
    metadata = pod["metadata"]
    metadata["resourceVersion"] = str(LIST_RV_BASE + update * 10_000_000 + index)
    if update:
        metadata.setdefault("annotations", {})["bench.informer-bus.io/update"] = str(update)
    return pod


def pending(index: int, update: int, sizes: Sizes) -> PendingDelta:
    """One delta, encoded the way the reflector encodes it."""
    pod = make_pod(index, update)
    delta_type = DeltaType.UPDATED if update else DeltaType.ADDED
    envelope = DeltaEnvelope.from_delta(Delta(delta_type, pod), observed_at=time.time())
    data = encode_envelope(envelope, max_bytes=DEFAULTS.max_object_bytes)
    sizes.json_bytes += len(orjson.dumps(pod))
    sizes.envelope_bytes += len(data)
    sizes.count += 1
    return PendingDelta(delta_type, envelope.key, envelope.resource_version, data)


def batches(objects: int, update: int, sizes: Sizes) -> Iterator[list[PendingDelta]]:
    """Deltas for every object in ``batch_max`` chunks, generated as they go (100k Pods as
    dicts would take more memory than the Redis being measured)."""
    for start in range(0, objects, DEFAULTS.batch_max):
        stop = min(start + DEFAULTS.batch_max, objects)
        yield [pending(index, update, sizes) for index in range(start, stop)]


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def measure_state(
    client: redis.Redis,
    publisher: ShardPublisher,
    name: str,
    *,
    baseline: int,
    objects: int,
    json_bytes: float,
) -> State:
    by_kind = dict.fromkeys(KINDS, 0)
    entries = 0
    for keys in publisher.shards:
        for kind, key in zip(KINDS, (keys.stream, keys.versions, keys.objects), strict=True):
            by_kind[kind] += int(client.memory_usage(key, samples=0) or 0)
        entries += int(client.xlen(keys.stream))
    total = used_memory(client) - baseline
    return State(
        state=name,
        stream_entries=entries,
        used_memory_bytes=total,
        per_object_bytes=total / objects,
        by_kind_bytes=by_kind,
        other_bytes=total - sum(by_kind.values()),
        ratio_to_json=total / objects / json_bytes,
    )


def run(client: redis.Redis, args: argparse.Namespace) -> dict[str, Any]:
    publisher = ShardPublisher(client, prefix="ib", resource=RESOURCE, shard_count=args.shards)
    retention = RetentionLoop(
        client,
        prefix="ib",
        resource=RESOURCE,
        shard_count=args.shards,
        min_entries=args.retention_min_entries,
        hard_max_entries=DEFAULTS.retention_max_entries,
    )
    baseline = used_memory(client)
    listed, updated = Sizes(), Sizes()

    progress(args, f"publishing {args.objects:,} pods (initial list)")
    publisher.fence(EPOCH)
    publisher.begin_relist(EPOCH)
    for batch in batches(args.objects, 0, listed):
        publisher.publish(EPOCH, batch, checkpoint_rv=None)
    publisher.finish_relist(EPOCH, str(LIST_RV_BASE + args.objects))
    for keys in publisher.shards:  # processors have consumed the initial list
        client.xgroup_create(keys.stream, GROUP, id="$", mkstream=True)
    json_bytes = listed.json_bytes / listed.count
    common = {"baseline": baseline, "objects": args.objects, "json_bytes": json_bytes}
    states = [measure_state(client, publisher, "initial list", **common)]

    progress(args, f"publishing {args.objects:,} updates (one per pod) as watch batches")
    for batch in batches(args.objects, 1, updated):
        publisher.publish(EPOCH, batch, checkpoint_rv=batch[-1].resource_version)
    burst = f"+ {args.objects:,} updates, before retention"
    states.append(measure_state(client, publisher, burst, **common))
    retention.run_once()  # the group has not read the burst: only what it read may go
    states.append(measure_state(client, publisher, "retention, updates unread", **common))

    for keys in publisher.shards:  # processors caught up
        client.xgroup_setid(keys.stream, GROUP, id="$")
    retention.run_once()
    states.append(measure_state(client, publisher, "retention, updates read", **common))

    initial = states[0]
    per_entry = initial.by_kind_bytes["stream"] / initial.stream_entries
    known_state = (initial.by_kind_bytes["versions"] + initial.by_kind_bytes["objects"]) / (
        args.objects
    )
    return {
        "machine": machine(),
        "redis_version": client.info("server")["redis_version"],
        "objects": args.objects,
        "shards": args.shards,
        "retention_min_entries": args.retention_min_entries,
        "retention_max_entries": DEFAULTS.retention_max_entries,
        "avg_json_bytes": json_bytes,
        "avg_envelope_bytes": listed.envelope_bytes / listed.count,
        "avg_update_envelope_bytes": updated.envelope_bytes / max(1, updated.count),
        "per_stream_entry_bytes": per_entry,
        "per_object_known_state_bytes": known_state,
        "states": [asdict(state) for state in states],
    }


def progress(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(f"[redis_memory] {message}", file=sys.stderr, flush=True)


def print_table(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(
        f"Redis memory per cached object: redis-server {report['redis_version']}, "
        f"{m['cores']} cores ({m['cpu'] or 'unknown cpu'}), Python {m['python']}"
    )
    print(
        f"{report['objects']:,} pods over {report['shards']} shards; pod JSON "
        f"{report['avg_json_bytes']:,.0f} B on average (managedFields stripped), envelope "
        f"{report['avg_envelope_bytes']:,.0f} B\n"
    )
    header = (
        f"{'state':36} {'entries':>8} {'used MB':>8} {'B/object':>9} {'x JSON':>6} "
        f"{'stream MB':>9} {'versions MB':>11} {'objects MB':>10} {'other MB':>8}"
    )
    print(header)
    print("-" * len(header))
    for s in report["states"]:
        kinds = s["by_kind_bytes"]
        print(
            f"{s['state']:36} {s['stream_entries']:>8,} {s['used_memory_bytes'] / MB:8.1f} "
            f"{s['per_object_bytes']:9,.0f} {s['ratio_to_json']:6.2f} "
            f"{kinds['stream'] / MB:9.1f} {kinds['versions'] / MB:11.1f} "
            f"{kinds['objects'] / MB:10.1f} {s['other_bytes'] / MB:8.1f}"
        )
    print(
        f"\nper stream entry: {report['per_stream_entry_bytes']:,.0f} B; known state "
        f"(versions + objects) per object: {report['per_object_known_state_bytes']:,.0f} B"
    )


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=positive, default=100_000, help="pods to publish")
    parser.add_argument(
        "--shards", type=positive, default=DEFAULTS.shard_count, help="shards per resource"
    )
    parser.add_argument(
        "--retention-min-entries",
        type=not_negative,
        default=DEFAULTS.retention_min_entries,
        help="entries retention keeps per shard (default: the reflector's, %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the report here")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument(
        "--redis-url",
        help="measure on this (empty) Redis instead of a private redis-server, and leave what "
        "it wrote there: tests read it back to check the report against Redis itself",
    )
    args = parser.parse_args()
    if args.retention_min_entries > DEFAULTS.retention_max_entries:
        parser.error("--retention-min-entries cannot exceed the retention hard cap")
    # A shell starts background jobs with SIGINT ignored, and Python then keeps it ignored:
    # Ctrl-C (or a test's SIGINT) must stop the bench however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with private_redis_url(args.redis_url) as url:
            client = redis.Redis.from_url(url, socket_timeout=60)
            try:
                report = run(client, args)
            finally:
                client.close()
    except KeyboardInterrupt:
        print("interrupted; the private redis-server was stopped", file=sys.stderr)
        return 130
    print_table(report)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
