"""What a shard worker needs of its store, declared here rather than taken from ``Indexer``.

The worker and its takeover write a shard's store through :class:`ShardStore`; any class with
those methods will do (an :class:`~common.store.Indexer` or a
:class:`~common.compact_store.CompactIndexer` is one). A store may also say how it keeps its
objects (:class:`PackedEnvelopeStore`): one that keeps them as wire envelopes is handed every
entry's bytes as they came (``packed``), and keeps them without an encode or a copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from common.codec import Codec
from common.handlers import DeltaTarget
from common.object_keys import Obj
from common.store import NAMESPACE_INDEX, IndexFunc, meta_namespace_index_func
from common.wire import ENVELOPE_CODEC

__all__ = [
    "HeaderIndexedStore",
    "PackedEnvelopeStore",
    "ShardStore",
    "indexed_from_headers",
    "keeps_envelopes",
]


class ShardStore(DeltaTarget, Protocol):
    """A shard's store as its worker writes it: emptied and filled with the takeover's snapshot
    (``replace``, ``update``), read back for the initial list (``get_by_key``), then written
    by every entry's delta (``update``, ``delete``: ``process_deltas``'s
    :class:`~common.handlers.DeltaTarget`); ``len`` is its size gauge."""

    def replace(self, items: Iterable[Obj], resource_version: str) -> None: ...

    def get_by_key(self, key: str) -> Obj | None: ...

    def __len__(self) -> int: ...


@runtime_checkable
class PackedEnvelopeStore(Protocol):
    """Optional: a store that keeps each object as bytes in ``codec``'s form.

    When that form is the wire envelope's (:data:`common.wire.ENVELOPE_CODEC`), the worker
    passes every entry's envelope bytes as ``packed`` and the store keeps them as they came.
    """

    @property
    def codec(self) -> Codec: ...


def keeps_envelopes(store: object) -> bool:
    """Whether ``store`` keeps entries as the envelope bytes they came in: then, and only
    then, ``update`` is handed them as ``packed`` (any other store encodes, or ignores it)."""
    return isinstance(store, PackedEnvelopeStore) and store.codec is ENVELOPE_CODEC


@runtime_checkable
class HeaderIndexedStore(PackedEnvelopeStore, Protocol):
    """Optional: a store that can keep an entry's bytes without its object decoded, its index
    functions run on a stand-in (:meth:`~common.compact_store.CompactIndexer.update_packed`)."""

    def update_packed(self, key: str, packed: bytes, index_obj: Obj) -> bool: ...

    def get_indexers(self) -> dict[str, IndexFunc]: ...


def indexed_from_headers(store: object) -> bool:
    """Whether ``store`` can be written from entry headers alone: it keeps envelopes as they
    came and its only index is the namespace index, which the header's namespace answers (a
    user indexer reads the object, so it needs the decoded object)."""
    if not (isinstance(store, HeaderIndexedStore) and store.codec is ENVELOPE_CODEC):
        return False
    indexers = store.get_indexers()
    return all(
        name == NAMESPACE_INDEX and func is meta_namespace_index_func
        for name, func in indexers.items()
    )
