"""The compact store: what differs from the plain Indexer (copies, bytes) and what it saves.

Everything the two stores share is checked against a brute-force model for both of them in
``test_store_stateful.py``; this file covers what only the compact one promises.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator

import orjson

from bench.pods import sample_pod
from common.codec import Codec
from common.compact_store import JSON_CODEC, CompactIndexer
from common.deltas import Delta, DeltaType
from common.handlers import ResourceEventHandlerFuncs, process_deltas
from common.object_keys import Obj, meta_namespace_key
from common.store import NAMESPACE_INDEX, Indexer
from common.wire import ENVELOPE_CODEC, DeltaEnvelope, encode_envelope


def pod(name: str, rv: str = "1", phase: str = "Running") -> Obj:
    return {
        "metadata": {"name": name, "namespace": "shop", "resourceVersion": rv},
        "status": {"phase": phase},
    }


def by_phase(obj: Obj) -> list[str]:
    return [obj["status"]["phase"]]


def test_reads_are_private_copies_that_cannot_corrupt_the_cache() -> None:
    store = CompactIndexer(indexers={NAMESPACE_INDEX: by_phase})
    store.add(pod("web"))

    copy = store.get_by_key("shop/web")
    assert copy == pod("web")
    assert copy is not None
    copy["status"]["phase"] = "Failed"
    store.list()[0]["metadata"]["name"] = "changed"

    assert store.get_by_key("shop/web") == pod("web")
    assert store.by_index(NAMESPACE_INDEX, "Running") == [pod("web")]
    assert store.index_keys(NAMESPACE_INDEX, "Failed") == []


def test_update_and_delete_return_the_replaced_object() -> None:
    store = CompactIndexer()
    assert store.update(pod("web", "1")) is None
    assert store.update(pod("web", "2")) == pod("web", "1")
    assert store.delete(pod("web")) == pod("web", "2")
    assert store.delete(pod("web")) is None


def test_a_deletion_through_process_deltas_decodes_nothing() -> None:
    """``process_deltas`` hands the delta's own object to ``on_delete``: the stored one is
    dropped as bytes (``discard``), not decoded for nobody."""
    decoded: list[bytes] = []

    def unpack(packed: bytes) -> Obj:
        decoded.append(packed)
        return JSON_CODEC.unpack(packed)

    store = CompactIndexer(indexers={"phase": by_phase}, codec=Codec(JSON_CODEC.pack, unpack))
    deleted: list[object] = []
    handler = ResourceEventHandlerFuncs(delete=deleted.append)
    store.add(pod("web"))
    process_deltas(handler, store, [Delta(DeltaType.DELETED, pod("web", "2"))], False)
    assert decoded == [] and deleted == [pod("web", "2")]
    assert store.list_keys() == [] and store.index_keys("phase", "Running") == []


def test_index_functions_see_the_object_being_written() -> None:
    seen: list[Obj] = []
    written = pod("web")

    def spy(obj: Obj) -> list[str]:
        seen.append(obj)
        return []

    store = CompactIndexer(indexers={"spy": spy})
    store.add(written)
    assert seen == [written] and seen[0] is written


def test_replace_consumes_a_generator_once_and_keeps_only_bytes() -> None:
    handed_out: list[Obj] = []

    def relist() -> Iterator[Obj]:
        for i in range(3):
            handed_out.append(pod(f"p{i}", str(i)))
            yield handed_out[-1]

    store = CompactIndexer()
    store.replace(relist(), "10")
    assert sorted(store.list_keys()) == ["shop/p0", "shop/p1", "shop/p2"]
    assert store.packed_size() == sum(len(orjson.dumps(obj)) for obj in handed_out)
    assert all(store.get_by_key(meta_namespace_key(obj)) == obj for obj in handed_out)


def test_add_indexers_indexes_the_stored_bytes() -> None:
    store = CompactIndexer()
    store.add(pod("web", phase="Pending"))
    store.add(pod("db"))
    store.add_indexers({"phase": by_phase})
    assert store.index_keys("phase", "Pending") == ["shop/web"]
    assert store.by_index("phase", "Running") == [pod("db")]


def _traced_bytes_per_pod(store: Indexer, pods: list[Obj]) -> float:
    blobs = [orjson.dumps(p) for p in pods]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for blob in blobs:
            obj = orjson.loads(blob)  # as the processor gets it: decoded from the wire
            store.update(obj, meta_namespace_key(obj))
            del obj
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / len(pods)
    finally:
        tracemalloc.stop()


def test_a_compact_pod_costs_about_its_json_where_a_dict_costs_several_times_it() -> None:
    pods = []
    for i in range(500):
        p = sample_pod(i)
        del p["metadata"]["managedFields"]  # as cached: the reflector strips them
        pods.append(p)
    json_bytes = sum(len(orjson.dumps(p)) for p in pods) / len(pods)

    compact = _traced_bytes_per_pod(CompactIndexer(), pods) / json_bytes
    plain = _traced_bytes_per_pod(Indexer(), pods) / json_bytes

    # Allocation counts, not timings: stable from run to run.
    assert compact <= 1.2, compact
    assert plain >= 3 * compact, (plain, compact)


def test_the_envelope_codec_keeps_a_stream_entrys_object_part() -> None:
    web = pod("web", "7")
    entry = encode_envelope(
        DeltaEnvelope.from_delta(Delta(DeltaType.UPDATED, web), observed_at=1.0)
    )
    header = entry.index(b"\n")
    store = CompactIndexer(codec=ENVELOPE_CODEC)

    store.update(web, "shop/web", entry)  # as a processor applies a stream entry
    # Kept without re-encoding, and without the header the worker already read.
    assert store.packed_size() == len(entry) - header == len(orjson.dumps(web)) + 1
    assert store.get_by_key("shop/web") == web
    assert store.update(pod("web", "8"), "shop/web", entry.replace(b'"7"', b'"8"')) == web
    assert store.get_by_key("shop/web") == pod("web", "8")
    v1_entry = orjson.dumps({"v": 1, "o": web})  # a v1 entry has no header to cut
    store.update(web, "shop/web", v1_entry)
    assert store.get_by_key("shop/web") == web
    assert store.packed_size() == len(v1_entry)

    # Written without its entry (a relist, a test): a holder the same codec reads back.
    store.add(pod("db"))
    assert store.get_by_key("shop/db") == pod("db")
    assert store.update(pod("web", "8")) == web
    assert store.get_by_key("shop/web") == pod("web", "8")
