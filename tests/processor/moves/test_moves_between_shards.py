"""An object moving between two shards one process reads is never in both at once.

Two shard workers of one resource on a real redis-server share a dispatcher, a lister and a
:class:`~processor_svc.move_gate.MoveGate`; the moves are written as the reflector writes them
(the outgoing half on the old shard first, then the incoming half naming its stream id). The
old shard's worker is held back by a handler that blocks (a one-notification buffer), so the
new shard's worker reaches the incoming half first: it must wait.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from common.deltas import DeltaType
from common.lease import RedisLease
from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.redis_config import lease_client
from common.redis_layout import GroupShardKeys, ShardKeys
from common.wire import FIELD, DeltaEnvelope, encode_envelope, moved_in, moved_out
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.lister import ShardedLister
from processor_svc.metrics import ProcessorMetrics
from processor_svc.move_gate import MoveGate
from processor_svc.shard_worker import ShardWorker
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

RESOURCE = "configmaps"
MEMBER = "member-a"


def configmap(name: str, rv: int, owner: str) -> Obj:
    return {
        "kind": "ConfigMap",
        "metadata": {
            "name": name, "namespace": "shop", "resourceVersion": str(rv), "uid": f"uid-{name}",
            "ownerReferences": [{"kind": "Widget", "name": owner, "controller": True}],
        },
    }  # fmt: skip


@dataclass
class Blocking:
    """Records every call as ``(kind, key, rv)``; blocks on the add of ``block_on`` until
    ``gate`` opens."""

    block_on: str = "shop/blocker"
    gate: threading.Event = field(default_factory=threading.Event)
    blocked: threading.Event = field(default_factory=threading.Event)
    calls: list[tuple[str, str, str]] = field(default_factory=list)

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        key = meta_namespace_key(obj)
        self.calls.append(("add", key, obj["metadata"]["resourceVersion"]))
        if key == self.block_on:
            self.blocked.set()
            self.gate.wait(30)

    def on_update(self, old: Obj, new: Obj) -> None:
        self.calls.append(("update", meta_namespace_key(new), new["metadata"]["resourceVersion"]))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        assert not isinstance(obj, DeletedFinalStateUnknown)
        self.calls.append(("delete", meta_namespace_key(obj), obj["metadata"]["resourceVersion"]))

    def of(self, key: str) -> list[tuple[str, str]]:
        return [(kind, rv) for kind, k, rv in list(self.calls) if k == key]


class Shards:
    """Shards 0 and 1 of ``configmaps``, written the way the reflector writes them."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.keys = [GroupShardKeys(ShardKeys("ib", RESOURCE, shard)) for shard in (0, 1)]

    def upsert(self, shard: int, obj: Obj, delta_type: DeltaType = DeltaType.ADDED) -> str:
        data = encode_envelope(DeltaEnvelope.of_object(delta_type, obj, observed_at=1.0))
        return self._write(shard, meta_namespace_key(obj), obj["metadata"]["resourceVersion"],
                           data)  # fmt: skip

    def move(self, key: str, old: int, new: int, obj: Obj) -> None:
        """The outgoing half on ``old`` (its known state, deleted), then the incoming half."""
        known: Any = self.client.hget(self.keys[old].objects, key)
        out = moved_out(known, new, observed_at=2.0)
        keys = self.keys[old].shard_keys
        out_id = self._xadd(keys.stream, out)
        self.client.hdel(keys.versions, key)
        self.client.hdel(keys.objects, key)
        data = encode_envelope(DeltaEnvelope.of_object(DeltaType.UPDATED, obj, observed_at=2.0))
        self._write(new, key, obj["metadata"]["resourceVersion"], moved_in(data, old, out_id))

    def _write(self, shard: int, key: str, rv: str, data: bytes) -> str:
        keys = self.keys[shard].shard_keys
        entry_id = self._xadd(keys.stream, data)
        self.client.hset(keys.versions, key, rv)
        self.client.hset(keys.objects, key, data)
        return entry_id

    def _xadd(self, stream: str, data: bytes) -> str:
        entry_id: Any = self.client.xadd(stream, {FIELD: data})
        return str(entry_id.decode())


@pytest.fixture
def shards(redis_client: redis.Redis) -> Shards:
    return Shards(redis_client)


@contextmanager
def workers(
    redis_server: RedisServer, shards: Shards, handler: Blocking, *, gated: bool = True,
    start: tuple[int, ...] = (0, 1),
) -> Iterator[tuple[ShardedLister, dict[int, ShardWorker], MoveGate | None]]:  # fmt: skip
    """Workers of shards ``start`` (more can be started later with the returned starter)."""
    metrics = ProcessorMetrics(CollectorRegistry())
    lister = ShardedLister(2)
    lister.route_keys(None)  # sharded by owner: a key does not tell its shard
    moves = MoveGate(lister.holds_elsewhere) if gated else None
    dispatcher = HandlerDispatcher([("h", handler)], buffer_size=1, metrics=metrics,
                                   resource=RESOURCE)  # fmt: skip
    client = redis.Redis.from_url(redis_server.url)
    leases = lease_client(redis_server.url)
    running: dict[int, ShardWorker] = {}

    def begin(shard: int) -> ShardWorker:
        keys = shards.keys[shard]
        lease = RedisLease(leases, key=keys.lease, epoch_key=keys.lease_epoch, holder=MEMBER,
                           duration=60)  # fmt: skip
        epoch = lease.try_acquire_or_renew().epoch
        store = lister.new_store()
        lister.attach(shard, store)
        worker = ShardWorker(client, keys, shard=shard, epoch=epoch, member_id=MEMBER,
                             store=store, dispatcher=dispatcher, metrics=metrics,
                             resource=RESOURCE, block_ms=100, moves=moves)  # fmt: skip
        running[shard] = worker
        worker.start()
        return worker

    dispatcher.start()
    for shard in start:
        begin(shard)
    try:
        lister.begin = begin  # type: ignore[attr-defined]  # a test-only handle
        yield lister, running, moves
    finally:
        handler.gate.set()
        for worker in running.values():
            worker.stop(2.0)
        dispatcher.stop(2.0)
        client.close()
        leases.close()


def test_the_new_shard_applies_the_incoming_half_only_after_the_old_one_let_go(
    redis_server: RedisServer, shards: Shards
) -> None:
    handler = Blocking()
    with workers(redis_server, shards, handler) as (lister, running, moves):
        assert moves is not None
        for worker in running.values():
            assert worker.wait_for_sync(10)
        shards.upsert(0, configmap("c", 10, owner="w1"))
        wait_until(lambda: handler.of("shop/c") == [("add", "10")], 10)
        shards.upsert(0, configmap("blocker", 11, owner="w1"))
        assert handler.blocked.wait(10)  # the handler sits in the blocker's add
        shards.upsert(0, configmap("blocker2", 12, owner="w1"))  # shard 0's next flush waits
        wait_until(lambda: lister.get_by_key("shop/blocker2") is not None, 10)
        shards.move("shop/c", 0, 1, configmap("c", 13, owner="w2"))
        # Shard 1 reads the incoming half; shard 0 cannot read the outgoing half yet.
        wait_until(lambda: running[1]._cursor.last_id != "0-0", 10)
        for _ in range(20):
            assert lister.get_by_key("shop/c") is not None  # still shard 0's copy ...
            assert running[1]._store.get_by_key("shop/c") is None  # ... and only that one
            threading.Event().wait(0.02)
        handler.gate.set()
        wait_until(lambda: handler.of("shop/c")[-1:] == [("add", "13")], 10)
        assert handler.of("shop/c") == [("add", "10"), ("delete", "10"), ("add", "13")]
        assert running[0]._store.get_by_key("shop/c") is None
        assert moves.expired == 0


def test_without_the_gate_both_shards_would_hold_it(
    redis_server: RedisServer, shards: Shards
) -> None:
    """The scenario above without a move gate: the check it makes can fail, so it means
    something."""
    handler = Blocking()
    with workers(redis_server, shards, handler, gated=False) as (lister, running, _):
        for worker in running.values():
            assert worker.wait_for_sync(10)
        shards.upsert(0, configmap("c", 10, owner="w1"))
        wait_until(lambda: handler.of("shop/c") == [("add", "10")], 10)
        shards.upsert(0, configmap("blocker", 11, owner="w1"))
        assert handler.blocked.wait(10)
        shards.upsert(0, configmap("blocker2", 12, owner="w1"))
        wait_until(lambda: lister.get_by_key("shop/blocker2") is not None, 10)
        shards.move("shop/c", 0, 1, configmap("c", 13, owner="w2"))
        wait_until(lambda: running[1]._store.get_by_key("shop/c") is not None, 10)
        assert running[0]._store.get_by_key("shop/c") is not None  # in both at once


def test_a_takeover_loads_a_moved_in_object_once_the_other_shard_let_go(
    redis_server: RedisServer, shards: Shards
) -> None:
    handler = Blocking()
    with workers(redis_server, shards, handler, start=(0,)) as (lister, running, moves):
        assert moves is not None
        assert running[0].wait_for_sync(10)
        shards.upsert(0, configmap("c", 10, owner="w1"))
        wait_until(lambda: handler.of("shop/c") == [("add", "10")], 10)
        shards.upsert(0, configmap("blocker", 11, owner="w1"))
        assert handler.blocked.wait(10)
        shards.upsert(0, configmap("blocker2", 12, owner="w1"))
        wait_until(lambda: lister.get_by_key("shop/blocker2") is not None, 10)
        shards.move("shop/c", 0, 1, configmap("c", 13, owner="w2"))  # shard 0 has not read it
        new = lister.begin(1)  # type: ignore[attr-defined]
        # The snapshot of shard 1 holds c, which shard 0's store still holds: not loaded yet.
        for _ in range(20):
            assert new._store.get_by_key("shop/c") is None
            threading.Event().wait(0.02)
        handler.gate.set()
        assert new.wait_for_sync(10)
        assert new._store.get_by_key("shop/c") is not None
        assert running[0]._store.get_by_key("shop/c") is None
        assert handler.of("shop/c") == [("add", "10"), ("delete", "10"), ("add", "13")]
        assert moves.expired == 0
