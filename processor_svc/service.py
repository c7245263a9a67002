"""One processor process: its resources, shard ownership, shard workers, handlers, probes.

A processor serves a set of resources (:mod:`processor_svc.resource_plan`): the *co-sharded*
ones, whose shard *N* it owns together (a Widget's shard with the shard of the same number of
the ConfigMaps it owns, when the reflector shards them alike), and the *replicated* ones, every
shard of which every member reads (:mod:`processor_svc.replica_reader`).

The :class:`~processor_svc.ownership.ShardOwnership` coordinator decides which shard numbers
this process owns, with one lease per co-sharded resource held together
(:mod:`processor_svc.lease_group`); for each acquired number a
:class:`~processor_svc.shard_worker.ShardWorker` per co-sharded resource takes its shard over
into its own Indexer (attached to that resource's :class:`~processor_svc.lister.ShardedLister`)
and applies its stream, fanning notifications out through that resource's
:class:`~processor_svc.dispatch.HandlerDispatcher`. A lost or rebalanced number's workers stop
(acknowledging what the handlers finished), and the handlers that do work of their own per key
(:class:`~processor_svc.handlers.ShardAware`: a controller's reconciles) finish it, before the
leases are released, so two processors never apply one shard, nor reconcile one key, at once.

**Waiting for the reflectors** (:mod:`processor_svc.publication_gate`): no shard is taken before
a reflector has completed a list into every shard of every resource. What the reflectors
recorded of their resources (:class:`~common.publication.ResourceLayout`) then says how each
lister finds a key's shard and whether objects can move between shards (a
:class:`~processor_svc.move_gate.MoveGate` per such resource).

Shutdown (SIGTERM, :meth:`ProcessorService.stop`, at most :attr:`~ProcessorService.stop_timeout`):
stop reading, let the handler calls already running finish within one ``--shutdown-grace`` for
the whole stop, acknowledge what completed, release every lease at once (the others take over
without waiting for expiry), leave the membership, and join every thread. Notifications no
handler has started are not drained: their entries stay unacknowledged and the next owner
delivers them, so old and new owners never overlap.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Sequence

import redis
from prometheus_client import CollectorRegistry

from common.handlers import ResourceEventHandler
from common.lease import unique_holder
from common.observability import ObservabilityServer, serve_probes
from common.prometheus_workqueue import PrometheusMetricsProvider
from common.publication import ResourceLayout
from common.redis_config import redis_location
from common.redis_layout import GroupShardKeys, ShardKeys
from common.redis_reachability import PING_INTERVAL, RedisReachability
from common.replica_wait import ReplicaWait
from common.service_clients import service_clients
from common.sharding import shard_ranges
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.event_loop import EventLoopThread
from processor_svc.expectations import RedisExpectationStore
from processor_svc.handler_routes import HandlerRoutes, plan_handlers
from processor_svc.handlers import (
    HandlerContext,
    LoadedHandler,
    ShardAware,
    load_handler,
    make_workqueue_factory,
    start_handlers,
    stop_handlers,
)
from processor_svc.lister import ShardedLister
from processor_svc.metrics import ProcessorMetrics
from processor_svc.move_gate import MoveGate
from processor_svc.ownership import ShardOwnership
from processor_svc.publication_gate import PublicationGate
from processor_svc.reading_loop import ReadingLoop
from processor_svc.replica_reader import ReplicaReader
from processor_svc.settings import ProcessorSettings
from processor_svc.shard_worker import ShardWorker

__all__ = ["ProcessorService"]

log = logging.getLogger(__name__)

_SUPERVISE_INTERVAL = 0.2
_STOP_MARGIN = 5.0
"""Seconds a stop may take beyond ``--shutdown-grace``: its Redis calls, joining threads."""


class ProcessorService:
    """Builds and runs one processor; :meth:`start` returns at once."""

    def __init__(
        self,
        settings: ProcessorSettings,
        *,
        registry: CollectorRegistry | None = None,
        extra_handlers: Sequence[tuple[str, ResourceEventHandler]] = (),
    ) -> None:
        """``extra_handlers`` are handler objects given in Python (embedding, tests), used
        beside the ``--handler`` references of ``settings``, with the primary's events (or the
        resources they serve, :class:`~processor_svc.handlers.ServesResources`)."""
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.group = settings.group
        self.metrics = ProcessorMetrics(self.registry, settings.group)
        self.member_id = unique_holder(settings.member_id)
        self._plan(extra_handlers)
        for resource in self.plan.co_sharded:
            self.metrics.add_co_sharded(resource, settings.shard_count)
        # The reading loop's blocking wait gets its own connection (socket timeout above the
        # BLOCK time); this client serves the short commands. A renewal renews one
        # lease per co-sharded resource.
        self.redis, self.lease_redis = service_clients(
            settings.redis, settings.lease, calls_per_renewal=len(self.plan.co_sharded)
        )
        try:
            self._build(extra_handlers)
        except BaseException:
            self._close_clients()
            raise
        self._published = threading.Event()
        self._ownership_lock = threading.Lock()
        self._ownership_started = False
        self._gate_thread = threading.Thread(
            target=self._wait_for_publication, name=f"processor-publication[{self.resource}]"
        )
        self._units: dict[int, dict[str, ShardWorker]] = {}
        self._unit_epochs: dict[int, int] = {}  # shard -> the ownership epoch its unit runs for
        self._replicas: list[ReplicaReader] = []
        # Every owned shard of every co-sharded resource is read by this one thread.
        self._reading = ReadingLoop(
            self.redis, block_ms=settings.block_ms, linger_ms=settings.read_linger_ms
        )
        self._workers_lock = threading.Lock()
        self._unreleased: set[int] = set()  # shards taken and not yet handed back (stopped)
        self._stopping = threading.Event()
        self._stop_deadline = 0.0  # monotonic: when the handlers' grace ends (once stopping)
        self._supervisor = threading.Thread(
            target=self._supervise, name=f"processor-supervisor[{self.resource}]"
        )
        self._server: ObservabilityServer | None = None
        self._redis_reachability = RedisReachability(
            self.lease_redis, where=redis_location(settings.redis)
        )

    def _plan(self, extra_handlers: Sequence[tuple[str, ResourceEventHandler]]) -> None:
        """Which resources to serve, from the flags and what the handler classes declare
        (their modules are imported, nothing is constructed yet)."""
        settings = self.settings
        self._specs, self.plan = plan_handlers(
            settings.handler, settings.resource, settings.replicate, extra_handlers
        )
        self.resource = self.plan.primary
        """The primary resource: its members are the group's, and a handler that names no
        resource gets its events."""

    def _build(self, extra_handlers: Sequence[tuple[str, ResourceEventHandler]]) -> None:
        settings, plan = self.settings, self.plan
        self.views = {resource: settings.view(resource) for resource in plan.all}
        self.listers = {
            resource: ShardedLister(settings.shard_count, compact=settings.compact)
            for resource in plan.all
        }
        self.lister = self.listers[plan.primary]
        self.layouts: dict[str, ResourceLayout] = {}
        """What each resource's reflector recorded (filled once they have published)."""
        self.moves: dict[str, MoveGate] = {}
        """A move gate per resource whose objects can move between shards."""
        workqueues = make_workqueue_factory(PrometheusMetricsProvider(self.registry))
        # Async handlers' and controllers' coroutines: one loop, started by the first of them.
        self.event_loop = EventLoopThread(f"processor-event-loop[{plan.primary}]")

        def context_for(resource: str) -> HandlerContext:
            return HandlerContext(
                lister=self.listers[resource],
                workqueue_factory=workqueues,
                logger=logging.getLogger(f"processor_svc.handlers.{resource}"),
                settings=settings,
                resource=resource,
                listers=dict(self.listers),
                layouts=self.layouts.get,
                key_synced=functools.partial(self._key_synced, resource),
                # The lease client: short, bounded calls (a save can run on a dispatch thread).
                expectations=RedisExpectationStore(
                    self.lease_redis, prefix=settings.prefix, resource=resource, group=self.group
                ),
                event_loop=self.event_loop,
            )

        routes = HandlerRoutes(plan)
        self.handlers: list[LoadedHandler] = []
        for spec, uses in self._specs:
            resource = routes.resource_of(spec, uses)
            handler = load_handler(spec.reference, context_for(resource))
            self.handlers.append(LoadedHandler(spec.name, handler, spec.resync_period))
            routes.add(spec.name, handler, resource, spec.resync_period)
        for name, handler in extra_handlers:
            routes.add(name, handler, plan.primary, None)
        # The handler objects themselves: a controller's workers start and stop with us.
        self._handler_objects = [h.handler for h in self.handlers] + [
            handler for _, handler in extra_handlers
        ]
        self._shard_aware = [h for h in self._handler_objects if isinstance(h, ShardAware)]
        self.dispatchers = {
            resource: HandlerDispatcher(
                routes.handlers[resource],
                buffer_size=settings.buffer_size,
                metrics=self.metrics,
                resource=resource,
                resync_periods=routes.resync_periods[resource],
                lister=self.listers[resource].list,
                event_loop=self.event_loop,
                max_concurrent=settings.max_concurrent_reconciles,
            )
            for resource in plan.all
        }
        self.dispatcher = self.dispatchers[plan.primary]
        self.ownership = ShardOwnership(
            self.lease_redis,
            prefix=settings.prefix,
            resource=plan.primary,
            co_sharded=plan.co_sharded,
            shard_count=settings.shard_count,
            member_id=self.member_id,
            on_acquired=self._acquired,
            on_lost=self._lost,
            on_losing=self._losing,
            timing=settings.lease,
            membership=settings.membership,
            group=settings.group,
            replica_wait=ReplicaWait.of(settings.durability),
        )
        # Heartbeated by the gate while waiting for the reflectors, by the ownership loop after.
        self._membership = self.ownership.membership
        self._gate = PublicationGate(
            self.lease_redis,
            prefix=settings.prefix,
            resources=plan.all,
            subscriber_checked=plan.co_sharded,
            group=settings.group,
            shard_count=settings.shard_count,
            redis_url=settings.redis.url,
            heartbeat=self._membership.heartbeat,
            poll=min(0.5, settings.membership.heartbeat_interval),
        )

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._server = serve_probes(
            self, host=self.settings.http_host, port=self.settings.http_port
        )
        start_handlers(self._handler_objects)
        for dispatcher in self.dispatchers.values():
            dispatcher.start()
        self._gate_thread.start()
        self._supervisor.start()
        if self.settings.compact_cache is not None:
            log.warning(
                "--compact-cache / INFORMER_BUS_COMPACT_CACHE is deprecated: use --cache %s",
                self.settings.cache,
            )
        log.info(
            "processor %s started for %s, group %s (view: %s, cache: %s); metrics and probes on %s",
            self.member_id,
            self.plan,
            self.group,
            self.views[self.resource],
            self.settings.cache,
            self._server.url,
        )

    def stop(self) -> None:
        """Stop reading, finish running calls, acknowledge, release leases, join threads."""
        if self._stopping.is_set():
            return
        self._stop_deadline = time.monotonic() + self.settings.shutdown_grace
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join()
        if self._gate_thread.is_alive():
            self._gate_thread.join()
        with self._ownership_lock:
            started = self._ownership_started
        if started:
            self.ownership.stop(release=True)  # stops every worker (on_lost) before releasing
        elif self._gate_thread.ident is not None:
            try:
                self._membership.leave()
            except redis.RedisError as exc:
                log.warning("%s: could not leave the members: %r", self.resource, exc)
        self._reading.close()
        for reader in self._replicas:
            reader.stop()
        for resource, dispatcher in self.dispatchers.items():
            left = dispatcher.stop(self._grace_left())
            if any(left.values()):
                log.warning("%s: handlers did not finish within the grace period: %s",
                            resource, left)  # fmt: skip
        stop_handlers(self._handler_objects, self._grace_left())
        self.event_loop.close()  # after everything that runs coroutines on it stopped
        if self._server is not None:  # None: its port was taken, it never started
            self._server.stop()
            log.info("processor %s stopped", self.member_id)
        self._close_clients()

    def _grace_left(self) -> float:
        """What a wait on handler code may take: a stop has one grace period for it all."""
        if not self._stopping.is_set():
            return self.settings.shutdown_grace
        return max(0.0, self._stop_deadline - time.monotonic())

    @property
    def stop_timeout(self) -> float:
        """The most :meth:`stop` takes: the grace period, then Redis calls and joins."""
        return self.settings.shutdown_grace + _STOP_MARGIN

    def unfinished_stop(self) -> str:
        """What ending the process now would leave undone (``""``: nothing): the shards not
        handed back yet and the handler calls still running."""
        with self._workers_lock:
            shards = sorted(self._unreleased)
        calls = sum(dispatcher.running_calls() for dispatcher in self.dispatchers.values())
        parts = [
            f"{len(shards)} shards' acknowledgements and leases (shards {shard_ranges(shards)}: "
            "the next owner delivers their unacknowledged entries once the leases expire, within "
            f"{self.settings.lease.lease_duration:g} s)"
        ] if shards else []  # fmt: skip
        if calls:
            parts.append(f"{calls} running handler call{'s' if calls > 1 else ''}")
        return " and ".join(parts)

    def _close_clients(self) -> None:
        self.redis.close()
        self.lease_redis.close()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the service is not started")
        return self._server.url

    # --- waiting for the reflectors ----------------------------------------------------------

    @property
    def published(self) -> bool:
        """Reflectors have completed a list into every shard of every resource: the shards are
        being taken over."""
        return self._published.is_set()

    def _wait_for_publication(self) -> None:
        """Runs on its own thread so that :meth:`start` returns at once and ``/healthz``
        answers while Redis or a reflector is still missing."""
        layouts = self._gate.wait(self._stopping)
        if layouts is None:
            return
        self._apply_layouts(layouts)
        with self._ownership_lock:
            if self._stopping.is_set():
                return
            self._start_replicas()
            self._published.set()
            self._ownership_started = True
            self.ownership.start()

    def _apply_layouts(self, layouts: dict[str, ResourceLayout | None]) -> None:
        """What the reflectors recorded decides how each lister finds a key's shard, and which
        resources need a move gate (objects sharded by anything but their key can move)."""
        for resource, layout in layouts.items():
            lister = self.listers[resource]
            if layout is None:  # a reflector from before layouts shards by object key
                continue
            self.layouts[resource] = layout
            choice = layout.shard_key
            if choice.key_names_shard:
                count = self.settings.shard_count
                lister.route_keys(functools.partial(choice.shard_of_key, shard_count=count))
            else:
                lister.route_keys(None)
            if not choice.by_object_key:
                expired = self.metrics.move_waits_expired.labels(resource, self.group)
                self.moves[resource] = MoveGate(lister.holds_elsewhere, on_expired=expired.inc)
            log.info("%s is sharded by %s (%s)", resource, choice, layout.kind)

    def _start_replicas(self) -> None:
        settings = self.settings
        for resource in self.plan.replicated:
            lister = self.listers[resource]
            for shard in range(settings.shard_count):
                store = lister.new_store()
                lister.attach(shard, store)
                reader = ReplicaReader(
                    self.redis,
                    ShardKeys(settings.prefix, resource, shard),
                    store=store,
                    sink=self.dispatchers[resource],
                    metrics=self.metrics,
                    count=settings.read_count,
                    block_ms=settings.block_ms,
                    max_entry_bytes=settings.max_entry_bytes,
                    view=self.views[resource],
                    moves=self.moves.get(resource),
                )
                self._replicas.append(reader)
                reader.start()

    # --- shards ---------------------------------------------------------------------------

    def owned_shards(self) -> list[int]:
        with self._workers_lock:
            return sorted(self._units)

    def _acquired(self, shard: int, epoch: int) -> None:
        """On the ownership thread: start taking shard ``shard`` of every co-sharded resource
        over (the workers do the loading, so lease renewals are not held up)."""
        settings = self.settings
        epochs = self.ownership.epochs(shard, epoch)
        workers: dict[str, ShardWorker] = {}
        for resource in self.plan.co_sharded:
            lister = self.listers[resource]
            store = lister.new_store()
            lister.attach(shard, store)
            workers[resource] = ShardWorker(
                self.redis,
                GroupShardKeys(ShardKeys(settings.prefix, resource, shard), self.group),
                shard=shard,
                epoch=epochs[resource],
                member_id=self.member_id,
                store=store,
                dispatcher=self.dispatchers[resource],
                metrics=self.metrics,
                resource=resource,
                count=settings.read_count,
                block_ms=settings.block_ms,
                max_entry_bytes=settings.max_entry_bytes,
                view=self.views[resource],
                moves=self.moves.get(resource),
                replica_wait=ReplicaWait.of(settings.durability),
                loop=self._reading,
            )
        with self._workers_lock:
            self._units[shard] = workers
            self._unit_epochs[shard] = epoch
            self._unreleased.add(shard)
        # The stores are attached and no event is delivered yet: a controller loads what the
        # previous owner expected of the cache. A failure here fails the acquisition (the
        # ownership loop stops the workers it never started and releases the leases).
        for handler in self._shard_aware:
            handler.shards_acquired([shard])
        with self._workers_lock:
            owned = len(self._units)
        for resource in workers:
            self.metrics.owned_shards.labels(resource=resource, group=self.group).set(owned)
            self.metrics.rebalances.labels(resource=resource, group=self.group).inc()
        for worker in workers.values():
            worker.start()
        log.info("%s: took shard %d (epochs %s)", self.plan, shard, epochs)

    def _losing(self, shards: Sequence[int]) -> None:
        """On the ownership thread, before the ``_lost`` calls: stop every one of ``shards``
        from starting handler calls now, and the per-key work of the handlers that have some,
        not only once its turn in the row comes."""
        with self._workers_lock:
            units = [self._units[shard] for shard in shards if shard in self._units]
        for workers in units:
            for worker in workers.values():
                worker.begin_stop(grace=self._grace_left())
        for handler in self._shard_aware:
            handler.shards_leaving(list(shards))

    def _lost(self, shard: int) -> None:
        """On the ownership thread, before the leases are released: stop applying shard
        ``shard`` of every co-sharded resource, and wait for the per-key work on its keys."""
        grace = self._grace_left()
        with self._workers_lock:
            workers = self._units.pop(shard, {})
            self._unit_epochs.pop(shard, None)
        for handler in self._shard_aware:
            handler.shards_leaving([shard])  # also when no _losing came first (a failed start)
        for resource, worker in workers.items():
            # A graceful stop acknowledges what the handlers finished; if the lease is already
            # gone those acknowledgements are refused (they are fenced), so this is safe either
            # way.
            worker.stop(grace=grace)
            worker.join()
            self.metrics.forget_shard(resource, shard)
        for handler in self._shard_aware:
            if not handler.wait_shards_idle([shard], self._grace_left()):
                log.warning("%s: work on keys of shard %d outlived the %.1f s grace period",
                            type(handler).__name__, shard, grace)  # fmt: skip
        with self._workers_lock:
            owned = len(self._units)
            self._unreleased.discard(shard)
        for resource in self.plan.co_sharded:
            if workers:
                self.metrics.rebalances.labels(resource=resource, group=self.group).inc()
            self.metrics.owned_shards.labels(resource=resource, group=self.group).set(owned)
            self.listers[resource].detach(shard)
        # A stop gives every shard up: the ownership loop says so in one line.
        level = logging.DEBUG if self._stopping.is_set() else logging.INFO
        log.log(level, "%s: gave up shard %d", self.plan, shard)

    def _key_synced(self, resource: str, key: str) -> bool:
        """Whether the caches that hold ``resource``'s object ``key`` (a controller's primary)
        and what is co-sharded with it are loaded: its shard of every co-sharded resource, and
        every replicated resource."""
        shard = self.listers[resource].shard_of(key)
        if shard is None:
            return all(lister.has_synced() for lister in self.listers.values())
        return all(
            self.listers[resource].has_synced(shard) for resource in self.plan.co_sharded
        ) and all(self.listers[resource].has_synced() for resource in self.plan.replicated)

    def _supervise(self) -> None:
        """Marks shards synced in the listers once their reader delivered the initial list,
        reports a worker that died (once; /healthz keeps saying so), and hands a shard back to
        the ownership loop when its worker was fenced off while the lease still renews as ours
        (:meth:`ShardOwnership.give_up`: a split brain, the worker's read on a stale primary)."""
        reported: set[tuple[str, int]] = set()
        # The Redis ping behind /readyz runs here too, not in a thread of its own: a processor
        # owning 16 shards keeps to six threads (docs/architecture.md).
        next_ping = 0.0
        while not self._stopping.wait(_SUPERVISE_INTERVAL):
            if time.monotonic() >= next_ping:
                self._redis_reachability.check()
                next_ping = time.monotonic() + PING_INTERVAL
            with self._workers_lock:
                units = list(self._units.items())
                epochs = dict(self._unit_epochs)
            for shard, workers in units:
                for resource, worker in workers.items():
                    lister = self.listers[resource]
                    if worker.has_synced and not lister.has_synced(shard):
                        lister.mark_synced(shard)
                    if worker.ownership_lost and not worker.alive:
                        reason = f"{resource} worker fenced off: {worker.error}"
                        self.ownership.give_up(shard, epochs.get(shard, 0), reason)
                    failed = worker.error is not None and not worker.ownership_lost
                    if failed and not worker.alive and (resource, shard) not in reported:
                        reported.add((resource, shard))
                        log.error(
                            "%s: shard %d worker stopped on %r", resource, shard, worker.error
                        )
            for reader in self._replicas:
                lister = self.listers[reader.resource]
                if reader.has_synced and not lister.has_synced(reader.shard):
                    lister.mark_synced(reader.shard)

    # --- probes ---------------------------------------------------------------------------

    def is_synced(self) -> bool:
        """Every owned shard of every resource delivered its initial list (and at least one
        shard is owned), and every replicated resource is read whole."""
        if not self.published:
            return False
        owned = self.owned_shards()
        return (
            bool(owned)
            and all(
                self.listers[resource].has_synced(shard)
                for shard in owned
                for resource in self.plan.co_sharded
            )
            and all(self.listers[resource].has_synced() for resource in self.plan.replicated)
        )

    def healthz(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "stopping"
        with self._workers_lock:
            units = list(self._units.items())
        # A worker fenced off by a newer owner stopped on purpose; the ownership loop gives its
        # shard up. Any other stopped worker is a failure.
        dead = sorted(
            shard
            for shard, workers in units
            for worker in workers.values()
            if not worker.alive and worker.error is not None and not worker.ownership_lost
        )
        if dead:
            return False, f"shard workers failed: {dead}"
        stalled = [f"{r.resource}:{r.shard}" for r in self._replicas if not r.alive]
        if stalled and not self._stopping.is_set():
            return False, f"replica readers stopped: {', '.join(stalled)}"
        return True, "ok"

    def readyz(self) -> tuple[bool, str]:
        """Ready when every owned shard is synced; owning nothing (more processors than
        shards, or before the first assignment) is not ready, and neither is waiting for the
        reflectors' first lists, and neither is a processor that cannot reach Redis."""
        unreachable = self._redis_reachability.why_unreachable
        if unreachable:
            return False, unreachable
        if not self.published:
            return False, self._gate.waiting_for
        owned = self.owned_shards()
        if not owned:
            return False, "owns no shard yet"
        waiting = sorted(
            {
                shard
                for shard in owned
                for resource in self.plan.co_sharded
                if not self.listers[resource].has_synced(shard)
            }
        )
        if waiting:
            return False, f"syncing shards {waiting}"
        replicas = [r for r in self.plan.replicated if not self.listers[r].has_synced()]
        if replicas:
            return False, f"reading replicated {', '.join(replicas)}"
        return True, f"owns shards {owned}"

    @property
    def waiting_for(self) -> str:
        """Why shards are not taken yet (for ``/readyz`` and tests)."""
        return self._gate.waiting_for
