"""Helpers for the shard worker and dispatcher tests: a real shard on a real redis-server.

Shard data comes from the reflector's own :class:`~reflector_svc.publisher.ShardPublisher`
(one shard, so every key lands on it), with envelopes built like the publisher tests build
them; the shard lease is a real :class:`~common.lease.RedisLease`, acquired, so the worker's
fenced scripts see the test's member as the holder.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client import CollectorRegistry

from common.compact_store import CompactIndexer
from common.deltas import DeltaType
from common.lease import RedisLease
from common.object_keys import Obj
from common.redis_config import lease_client
from common.redis_layout import GroupShardKeys, ShardKeys
from common.selectable_fields import header_fields
from common.store import Indexer
from common.wire import ENVELOPE_CODEC, DeltaEnvelope, encode_envelope
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.metrics import ProcessorMetrics
from processor_svc.shard_worker import ShardWorker
from reflector_svc.publish_records import PendingDelta
from reflector_svc.publisher import ShardPublisher
from tests.reflector.publisher.support import TS

RESOURCE = "pods"
MEMBER = "member-a"


def pod(key: str, rv: str, *, app: str = "web", node: str = "n1", phase: str = "Running") -> Obj:
    """A pod labelled ``app``, with a spec, a status and managedFields (what a projection cuts)."""
    namespace, _, name = key.rpartition("/")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": rv,
            "uid": f"uid-{key}",
            "labels": {"app": app},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]},
        "status": {"phase": phase},
    }


def entry(kind: DeltaType, obj: Obj, *, tombstone: bool = False) -> PendingDelta:
    """The entry a reflector publishes for ``obj``, with the pod's selectable fields in its
    header as the reflector puts them there."""
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    envelope = DeltaEnvelope(kind, key, meta["resourceVersion"], meta["uid"], obj, TS, tombstone)
    fields = header_fields(RESOURCE, obj)
    return PendingDelta(
        kind, key, meta["resourceVersion"], encode_envelope(envelope, fields=fields)
    )


@dataclass
class Shard:
    """One shard of ``pods`` on the test's Redis, with its publisher and a held lease."""

    client: redis.Redis
    url: str
    keys: GroupShardKeys = field(
        default_factory=lambda: GroupShardKeys(ShardKeys("ib", RESOURCE, 0))
    )
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.publisher = ShardPublisher(self.client, prefix="ib", resource=RESOURCE, shard_count=1)
        self.metrics = ProcessorMetrics(self.registry, self.keys.group)
        self.lease_client = lease_client(self.url)
        self.lease = RedisLease(
            self.lease_client,
            key=self.keys.lease,
            epoch_key=self.keys.lease_epoch,
            holder=MEMBER,
            duration=60,
        )
        status = self.lease.try_acquire_or_renew()
        assert status.held
        self.epoch = status.epoch

    def close(self) -> None:
        self.lease_client.close()

    def publish(self, *deltas: PendingDelta) -> list[str]:
        """Publish (as relist chunks: no checkpoint rule); returns the new entry IDs."""
        result = self.publisher.publish(1, list(deltas), checkpoint_rv=None)
        ids = [i for r in result.shards.values() for i in r.stream_ids if i is not None]
        assert len(ids) == len(deltas), "a test delta was skipped as a duplicate"
        return ids

    def xadd_raw(self, fields: Mapping[str, bytes]) -> str:
        """An entry written behind the publisher's back (poison)."""
        entry_id: Any = self.client.xadd(self.keys.stream, dict(fields))  # type: ignore[arg-type]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def create_group(self, at: str = "0") -> None:
        """The group, as a run before this one left it: existing at ``at`` (a new group's
        first owner creates it at the end of the stream instead)."""
        self.client.xgroup_create(self.keys.stream, self.keys.group, id=at, mkstream=True)

    def group(self) -> dict[str, Any]:
        for group in self.client.xinfo_groups(self.keys.stream):
            if group["name"] == self.keys.group.encode():
                return dict(group)
        raise AssertionError("no consumer group")

    def pending(self) -> int:
        return int(self.client.xpending(self.keys.stream, self.keys.group)["pending"])

    def last_id(self) -> str:
        info = self.client.xinfo_stream(self.keys.stream)
        return str(info["last-generated-id"].decode())

    def dead_letters(self) -> list[dict[str, bytes]]:
        entries: Any = self.client.xrange(self.keys.dead_letters)
        return [{k.decode(): v for k, v in fields.items()} for _, fields in entries]

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(
            name, {"resource": RESOURCE, "group": self.keys.group, **labels}
        )
        return 0.0 if value is None else value

    def dispatcher(self, *handlers: tuple[str, Any], **kwargs: Any) -> HandlerDispatcher:
        return HandlerDispatcher(list(handlers), metrics=self.metrics, resource=RESOURCE, **kwargs)

    def worker(self, store: Indexer, dispatcher: HandlerDispatcher, **kwargs: Any) -> ShardWorker:
        return ShardWorker(
            self.client,
            self.keys,
            shard=0,
            epoch=self.epoch,
            member_id=MEMBER,
            store=store,
            dispatcher=dispatcher,
            metrics=self.metrics,
            resource=RESOURCE,
            **kwargs,
        )

    @contextmanager
    def running(
        self,
        *handlers: tuple[str, Any],
        store: Indexer | None = None,
        dispatcher_kwargs: Mapping[str, Any] | None = None,
        grace: float = 2.0,
        **worker_kwargs: Any,
    ) -> Iterator[tuple[ShardWorker, Indexer, HandlerDispatcher]]:
        """A started dispatcher and worker; stopped (gracefully) on exit, gates opened first."""
        store = store if store is not None else Indexer()
        dispatcher = self.dispatcher(*handlers, **(dispatcher_kwargs or {}))
        worker = self.worker(store, dispatcher, **worker_kwargs)
        dispatcher.start()
        worker.start()
        try:
            yield worker, store, dispatcher
        finally:
            for _, handler in handlers:
                gate = getattr(handler, "gate", None)
                if isinstance(gate, threading.Event):
                    gate.set()
            worker.stop(grace)
            dispatcher.stop(grace)


def delivered_and_acknowledged(shard: Shard) -> bool:
    """The group was handed the stream's last entry and acknowledged everything (by entry
    IDs: Redis's ``lag`` is an estimate)."""
    delivered = shard.group()["last-delivered-id"].decode()
    return delivered == shard.last_id() and shard.pending() == 0


def compact_envelopes(**kwargs: Any) -> CompactIndexer:
    """The store a ``--compact-cache`` processor builds: stream entries kept as they came."""
    return CompactIndexer(codec=ENVELOPE_CODEC, **kwargs)
