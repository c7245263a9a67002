"""Micro-benchmarks of the informer core, each beside a bare baseline measured in the same run.

Not a test (timings on a shared 2-core machine are noisy, so no test asserts them): run it as
``make bench`` or ``.venv/bin/python bench/core.py``. Per ~3.5 KB Pod it prints

* envelope encode and decode vs the bare codecs (``orjson.dumps``/``loads``,
  ``msgpack.packb``/``unpackb``) — target: encode + decode <= 1.5x the bare codec;
* Indexer add and update with the namespace index over N objects (default 100k) vs a plain
  dict — target: update <= 5x a plain dict update;
* the processor's two caches (``--cache``): per-key read, update and delete of the compact
  store (stream entries kept as bytes, as a processor keeps them) vs the plain one (dicts), and
  the compact read vs the one ``orjson.loads`` it amounts to;
* workqueue add -> get -> done vs a bare ``collections.deque`` append/popleft.

Each figure is the best of several repeats: the least disturbed run is the most repeatable.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack
import orjson
from pods import sample_pod

from common.compact_store import CompactIndexer
from common.deltas import DeltaType
from common.object_keys import Obj, meta_namespace_key
from common.store import Indexer
from common.wire import ENVELOPE_CODEC, DeltaEnvelope, decode_envelope, encode_envelope
from common.workqueue import Queue

Row = tuple[str, float, str, float, float | None]  # what, us, baseline, baseline us, target


def best_seconds(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def per_op_us(op: Callable[[], object], loops: int, repeat: int) -> float:
    def run() -> None:
        for _ in range(loops):
            op()

    return best_seconds(run, repeat) / loops * 1e6


def codec_rows(repeat: int) -> list[Row]:
    pod = sample_pod()
    pod_json = orjson.dumps(pod)
    pod_msgpack = msgpack.packb(pod)
    envelope = _envelope(pod)
    encoded = encode_envelope(envelope)
    loops = 20_000
    us = {
        "orjson.dumps": per_op_us(lambda: orjson.dumps(pod), loops, repeat),
        "orjson.loads": per_op_us(lambda: orjson.loads(pod_json), loops, repeat),
        "msgpack.packb": per_op_us(lambda: msgpack.packb(pod), loops, repeat),
        "msgpack.unpackb": per_op_us(lambda: msgpack.unpackb(pod_msgpack), loops, repeat),
        "encode": per_op_us(lambda: encode_envelope(envelope), loops, repeat),
        "encode_raw": per_op_us(
            lambda: encode_envelope(envelope, obj_json=pod_json), loops, repeat
        ),
        "decode": per_op_us(lambda: decode_envelope(encoded), loops, repeat),
    }
    bare = us["orjson.dumps"] + us["orjson.loads"]
    return [
        ("envelope encode (from dict)", us["encode"], "orjson.dumps", us["orjson.dumps"], None),
        (
            "envelope encode (raw watch JSON)",
            us["encode_raw"],
            "orjson.dumps",
            us["orjson.dumps"],
            None,
        ),
        ("envelope decode", us["decode"], "orjson.loads", us["orjson.loads"], None),
        ("envelope decode", us["decode"], "msgpack.unpackb", us["msgpack.unpackb"], None),
        ("envelope encode+decode", us["encode"] + us["decode"], "orjson dumps+loads", bare, 1.5),
        (
            "envelope encode+decode",
            us["encode"] + us["decode"],
            "msgpack packb+unpackb",
            us["msgpack.packb"] + us["msgpack.unpackb"],
            1.5,
        ),
    ]


def _envelope(pod: dict[str, Any]) -> DeltaEnvelope:
    meta = pod["metadata"]
    return DeltaEnvelope(
        type=DeltaType.UPDATED,
        key=meta_namespace_key(pod),
        resource_version=meta["resourceVersion"],
        uid=meta["uid"],
        obj=pod,
        observed_at=time.time(),
    )


def pod_versions(count: int) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """Keys, first versions and second versions of ``count`` Pods over 50 namespaces."""
    template = sample_pod()

    def version(i: int, rv: int) -> dict[str, Any]:
        meta = {**template["metadata"], "name": f"pod-{i:06d}", "namespace": f"ns-{i % 50:02d}"}
        meta["resourceVersion"] = str(rv)
        return {**template, "metadata": meta}

    first = [version(i, i) for i in range(count)]
    second = [version(i, count + i) for i in range(count)]
    return [meta_namespace_key(obj) for obj in first], first, second


def dict_timings(
    keys: list[str], first: list[Obj], second: list[Obj], repeat: int
) -> dict[str, float]:
    """Seconds per pass of the plain-dict baselines."""
    cache: dict[str, Obj] = dict(zip(keys, first, strict=True))
    pairs = list(zip(keys, second, strict=True))

    def insert() -> None:
        plain: dict[str, Obj] = {}
        for key, obj in zip(keys, first, strict=True):
            plain[key] = obj

    def update() -> None:
        for key, obj in pairs:
            cache[key] = obj

    def update_with_key_func() -> None:
        for obj in second:
            cache[meta_namespace_key(obj)] = obj

    return {
        "insert": best_seconds(insert, repeat),
        "update": best_seconds(update, repeat),
        "update_with_key_func": best_seconds(update_with_key_func, repeat),
    }


def indexer_timings(
    keys: list[str], first: list[Obj], second: list[Obj], repeat: int
) -> dict[str, float]:
    """Seconds per pass of the Indexer with its built-in namespace index."""
    store = Indexer()
    for obj in first:
        store.add(obj)
    pairs = list(zip(keys, second, strict=True))

    def add() -> None:
        fresh = Indexer()
        for obj in first:
            fresh.add(obj)

    def update() -> None:
        for obj in second:
            store.update(obj)

    def update_with_known_key() -> None:
        for key, obj in pairs:
            store.update(obj, key)

    return {
        "add": best_seconds(add, repeat),
        "update": best_seconds(update, repeat),
        "update_with_known_key": best_seconds(update_with_known_key, repeat),
    }


def indexer_rows(count: int, repeat: int) -> list[Row]:
    keys, first, second = pod_versions(count)
    plain = {k: v / count * 1e6 for k, v in dict_timings(keys, first, second, repeat).items()}
    store = {k: v / count * 1e6 for k, v in indexer_timings(keys, first, second, repeat).items()}
    return [
        ("Indexer add (new keys)", store["add"], "dict insert", plain["insert"], None),
        ("Indexer update(obj)", store["update"], "d[key] = obj", plain["update"], 5.0),
        (
            "Indexer update(obj)",
            store["update"],
            "d[key_func(obj)] = obj",
            plain["update_with_key_func"],
            5.0,
        ),
        (
            "Indexer update(obj, key)",
            store["update_with_known_key"],
            "d[key] = obj",
            plain["update"],
            5.0,
        ),
    ]


CACHED_OBJECTS = 10_000
"""At most this many Pods in each cache: a read or write costs the same in a bigger one (a dict
lookup), and 100k entries of each version would only take memory."""


def cache_timings(
    store_class: Callable[[], Indexer],
    keys: list[str],
    first: list[Obj],
    second: list[Obj],
    repeat: int,
) -> dict[str, float]:
    """Seconds per pass of one cache written as a processor writes it: each object with its
    key and its stream entry's bytes (which the compact store keeps, and the plain one
    ignores). Nothing read is kept, as a reconcile keeps nothing."""
    entries = [(key, obj, _entry(obj)) for key, obj in zip(keys, first, strict=True)]
    updates = [(key, obj, _entry(obj)) for key, obj in zip(keys, second, strict=True)]

    def filled() -> Indexer:
        store = store_class()
        for key, obj, packed in entries:
            store.update(obj, key, packed)
        return store

    store = filled()

    def update() -> None:
        for key, obj, packed in updates:
            store.update(obj, key, packed)

    def get() -> None:
        for key in keys:
            store.get_by_key(key)

    def discard() -> float:  # a deletion as process_deltas applies it
        full = filled()
        started = time.perf_counter()
        for key, obj in zip(keys, second, strict=True):
            full.discard(obj, key)
        return time.perf_counter() - started

    return {
        "update": best_seconds(update, repeat),
        "get": best_seconds(get, repeat),
        "discard": min(discard() for _ in range(repeat)),
    }


def _entry(obj: Obj) -> bytes:
    return encode_envelope(_envelope(obj))


def _compact_store() -> Indexer:
    return CompactIndexer(codec=ENVELOPE_CODEC)  # what a processor builds: processor_svc/lister


def cache_rows(count: int, repeat: int) -> list[Row]:
    count = min(count, CACHED_OBJECTS)
    keys, first, second = pod_versions(count)
    plain = {
        k: v / count * 1e6 for k, v in cache_timings(Indexer, keys, first, second, repeat).items()
    }
    compact = {
        k: v / count * 1e6
        for k, v in cache_timings(_compact_store, keys, first, second, repeat).items()
    }
    pod_json = [orjson.dumps(obj) for obj in first]

    def loads() -> None:
        for one in pod_json:
            orjson.loads(one)

    decode = best_seconds(loads, repeat) / count * 1e6
    return [
        ("compact cache get_by_key", compact["get"], "plain cache get_by_key", plain["get"], None),
        ("compact cache get_by_key", compact["get"], "orjson.loads (the Pod)", decode, None),
        (
            "compact cache update(obj, key, entry)",
            compact["update"],
            "plain cache update",
            plain["update"],
            None,
        ),
        (
            "compact cache discard(obj, key)",
            compact["discard"],
            "plain cache discard",
            plain["discard"],
            None,
        ),
    ]


def workqueue_rows(repeat: int) -> list[Row]:
    items = [f"ns-{i % 50:02d}/pod-{i:06d}" for i in range(10_000)]

    def bare() -> None:
        fifo: deque[str] = deque()
        for item in items:
            fifo.append(item)
        for _ in items:
            fifo.popleft()

    def workqueue() -> None:
        queue: Queue[str] = Queue()
        for item in items:
            queue.add(item)
        for _ in items:
            queue.done(queue.get())
        queue.shut_down()

    def us(run: Callable[[], None]) -> float:
        return best_seconds(run, repeat) / len(items) * 1e6

    return [("workqueue add->get->done", us(workqueue), "deque append+popleft", us(bare), None)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100_000, help="objects in the Indexer")
    parser.add_argument("--repeat", type=int, default=5, help="repeats; the best one counts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if args.objects < 1 or args.repeat < 1:
        parser.error("--objects and --repeat must be at least 1")

    rows = [
        *codec_rows(args.repeat),
        *indexer_rows(args.objects, args.repeat),
        *cache_rows(args.objects, args.repeat),
        *workqueue_rows(args.repeat),
    ]
    results = [
        {
            "what": what,
            "us": round(value, 3),
            "baseline": baseline,
            "baseline_us": round(base, 3),
            "ratio": round(value / base, 2),
            "target_ratio": target,
            "met": None if target is None else value / base <= target,
        }
        for what, value, baseline, base, target in rows
    ]
    if args.json:
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    pod_bytes = len(orjson.dumps(sample_pod()))
    print(f"informer-bus core, Python {sys.version.split()[0]}, Pod of {pod_bytes} bytes JSON,")
    print(f"{args.objects} objects in the Indexer (namespace index), best of {args.repeat}\n")
    print(f"{'measured':38} {'µs/op':>8}  {'baseline':24} {'µs/op':>8} {'ratio':>6}  target")
    for r in results:
        target = "" if r["target_ratio"] is None else f"<= {r['target_ratio']}x "
        verdict = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        print(
            f"{r['what']:38} {r['us']:8.3f}  {r['baseline']:24} {r['baseline_us']:8.3f} "
            f"{r['ratio']:5.2f}x  {target}{verdict}"
        )
    ops = 1e6 / next(r["us"] for r in results if r["what"].startswith("workqueue"))
    print(f"\nworkqueue: {ops:,.0f} add->get->done cycles/s on one thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
