"""The shard worker's store protocols (``processor_svc.shard_store``): any ShardStore works;
only a PackedEnvelopeStore for the envelope codec is handed each entry's bytes (``packed``),
every other store the plain path."""

from __future__ import annotations

import builtins
from collections.abc import Iterable

import pytest

from common.codec import Codec
from common.compact_store import JSON_CODEC, CompactIndexer
from common.object_keys import DeletedFinalStateUnknown, Obj, deletion_handling_meta_namespace_key
from common.store import Indexer
from common.wire import ENVELOPE_CODEC
from processor_svc.shard_store import PackedEnvelopeStore, keeps_envelopes
from tests.processor.shard.support import Shard, compact_envelopes
from tests.reflector.publisher.support import added, deleted, updated
from tests.support.recording_handler import Recorder
from tests.support.waiting import wait_until


class DictStore:
    """The least a shard worker writes to: no Indexer, no indexes, no codec."""

    def __init__(self) -> None:
        self.items: dict[str, Obj] = {}
        self.packed: list[bytes | None] = []

    def replace(self, items: Iterable[Obj], resource_version: str) -> None:
        self.items = {deletion_handling_meta_namespace_key(obj): obj for obj in items}

    def update(self, obj: Obj, key: str | None = None, packed: bytes | None = None) -> Obj | None:
        self.packed.append(packed)
        key = deletion_handling_meta_namespace_key(obj) if key is None else key
        old, self.items[key] = self.items.get(key), obj
        return old

    def discard(self, obj: Obj | DeletedFinalStateUnknown, key: str | None = None) -> None:
        self.items.pop(deletion_handling_meta_namespace_key(obj) if key is None else key)

    def get_by_key(self, key: str) -> Obj | None:
        return self.items.get(key)

    def list_keys(self) -> builtins.list[str]:
        return sorted(self.items)

    def __len__(self) -> int:
        return len(self.items)


class EnvelopeDictStore(DictStore):
    """Says it keeps entries in the envelope codec's form (what a compact store does)."""

    codec: Codec = ENVELOPE_CODEC


def test_only_a_store_with_the_envelope_codec_keeps_envelopes() -> None:
    assert not isinstance(Indexer(), PackedEnvelopeStore)
    assert not isinstance(DictStore(), PackedEnvelopeStore)
    assert isinstance(CompactIndexer(codec=JSON_CODEC), PackedEnvelopeStore)
    assert [
        keeps_envelopes(store)
        for store in (Indexer(), DictStore(), CompactIndexer(), compact_envelopes())
    ] == [False, False, False, True]
    assert keeps_envelopes(EnvelopeDictStore())


@pytest.mark.parametrize(("store_class", "packed"), [(DictStore, False), (EnvelopeDictStore, True)])
def test_any_shard_store_works_and_only_an_envelope_store_gets_the_bytes(
    shard: Shard, store_class: type[DictStore], packed: bool
) -> None:
    shard.publish(added("ns/a", "1"), added("ns/b", "2"))
    store = store_class()
    recorder = Recorder()
    with shard.running(("rec", recorder), store=store) as (worker, _, _):
        assert worker.wait_for_sync(5)
        shard.publish(updated("ns/a", "3"), deleted("ns/b", "4"))
        wait_until(lambda: len(recorder.live()) == 2, what="live deltas")
        wait_until(lambda: shard.pending() == 0, what="acknowledgements")
        assert worker.error is None
    assert store.list_keys() == ["ns/a"]
    assert len(store.packed) == 3  # two snapshot objects, one live update
    if packed:
        assert all(isinstance(one, bytes) and one.startswith(b"{") for one in store.packed)
    else:
        assert store.packed == [None, None, None]
