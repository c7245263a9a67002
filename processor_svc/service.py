"""One processor process: membership, shard ownership, shard workers, handlers, probes.

The :class:`~processor_svc.ownership.ShardOwnership` coordinator decides which shards this
process owns; for each acquired shard a :class:`~processor_svc.shard_worker.ShardWorker` takes
it over into its own Indexer (attached to the shared :class:`~processor_svc.lister.ShardedLister`)
and applies its stream, fanning notifications out through one
:class:`~processor_svc.dispatch.HandlerDispatcher`. A lost or rebalanced shard's worker stops
(acknowledging what the handlers finished) before its lease is released, so two processors
never apply one shard at once.

**Waiting for a reflector**: a processor may start before the reflector of its resource (deploy
order is free), or for a resource no reflector publishes (``pod`` for ``pods``). Empty shard
streams would then look like a resource without objects, so the processor takes no shard, writes
no shard key and is not ready until a reflector has completed a list into every shard
(:mod:`common.publication`). Meanwhile it heartbeats into the membership, so ``status`` shows it
waiting; one warning names the resource, the key prefix and Redis; ``/readyz`` gives the reason.

Shutdown (SIGTERM, :meth:`ProcessorService.stop`): stop reading, let the handler calls already
running finish within the grace period, acknowledge what completed, release every lease at once
(the other processors take over without waiting for expiry), leave the membership, and join
every thread. Notifications no handler has started are not drained: their entries stay
unacknowledged and the next owner delivers them, so old and new owners never overlap.
"""

from __future__ import annotations

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
from common.publication import Publication, read_publication
from common.redis_config import redacted_url
from common.redis_layout import (
    CHECKPOINT_SYNCED_RV,
    GroupShardKeys,
    ShardKeys,
)
from common.service_clients import service_clients
from processor_svc.dispatch import HandlerDispatcher
from processor_svc.fenced_stream import as_text
from processor_svc.handlers import (
    HandlerContext,
    LoadedHandler,
    load_handlers,
    make_workqueue_factory,
    resync_periods,
    start_handlers,
    stop_handlers,
)
from processor_svc.lister import ShardedLister
from processor_svc.metrics import ProcessorMetrics
from processor_svc.ownership import ShardOwnership
from processor_svc.settings import ProcessorSettings
from processor_svc.shard_worker import ShardWorker

__all__ = ["ProcessorService"]

log = logging.getLogger(__name__)

_SUPERVISE_INTERVAL = 0.2
_PUBLICATION_POLL = 0.5
"""Seconds between two looks for the reflector's first list while waiting for it (shorter when
the heartbeat interval is: each look also heartbeats)."""
_REDIS_LOG_INTERVAL = 30.0
"""While Redis is unreachable before the first list, one warning per this many seconds."""


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
        beside the ``--handler`` references of ``settings``."""
        self.settings = settings
        self.resource = settings.resource
        self.registry = registry or CollectorRegistry()
        self.group = settings.group
        self.view = settings.view()
        self.metrics = ProcessorMetrics(self.registry, settings.group)
        self.member_id = unique_holder(settings.member_id)
        # Blocking stream reads get their own connections inside the workers (socket timeout
        # above the BLOCK time); this client serves the short commands.
        self.redis, self.lease_redis = service_clients(settings.redis, settings.lease)
        self.lister = ShardedLister(settings.shard_count, compact=settings.compact_cache)
        context = HandlerContext(
            lister=self.lister,
            workqueue_factory=make_workqueue_factory(PrometheusMetricsProvider(self.registry)),
            logger=logging.getLogger(f"processor_svc.handlers.{self.resource}"),
            settings=settings,
            resource=self.resource,
        )
        try:
            self.handlers: list[LoadedHandler] = load_handlers(settings.handler, context)
        except BaseException:
            self._close_clients()
            raise
        named = [(h.name, h.handler) for h in self.handlers] + list(extra_handlers)
        # The handler objects themselves (not their LoadedHandler records): a controller's
        # workers start and stop with the processor.
        self._handler_objects = [handler for _, handler in named]
        if not named:
            self._close_clients()
            raise ValueError("no handler: give at least one --handler MODULE:ATTR")
        self.dispatcher = HandlerDispatcher(
            named,
            buffer_size=settings.buffer_size,
            metrics=self.metrics,
            resource=self.resource,
            resync_periods=resync_periods(self.handlers),
            lister=self.lister.list,
        )
        self.ownership = ShardOwnership(
            self.lease_redis,
            prefix=settings.prefix,
            resource=self.resource,
            shard_count=settings.shard_count,
            member_id=self.member_id,
            on_acquired=self._acquired,
            on_lost=self._lost,
            on_losing=self._losing,
            timing=settings.lease,
            membership=settings.membership,
            group=settings.group,
        )
        # Heartbeated by us while waiting for the reflector, by the ownership loop afterwards.
        self._membership = self.ownership.membership
        self._published = threading.Event()
        self._waiting_for = f"looking for the reflector of {self._where()}"
        self._ownership_lock = threading.Lock()
        self._ownership_started = False
        self._gate = threading.Thread(
            target=self._wait_for_publication, name=f"processor-publication[{self.resource}]"
        )
        self._workers: dict[int, ShardWorker] = {}
        self._workers_lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(
            target=self._supervise, name=f"processor-supervisor[{self.resource}]"
        )
        self._server: ObservabilityServer | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._server = serve_probes(
            self, host=self.settings.http_host, port=self.settings.http_port
        )
        start_handlers(self._handler_objects)
        self.dispatcher.start()
        self._gate.start()
        self._supervisor.start()
        log.info(
            "processor %s started for %s, group %s (view: %s); metrics and probes on %s",
            self.member_id,
            self.resource,
            self.group,
            self.view,
            self._server.url,
        )

    def stop(self) -> None:
        """Stop reading, finish running calls, acknowledge, release leases, join threads."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join()
        if self._gate.is_alive():
            self._gate.join()
        with self._ownership_lock:
            started = self._ownership_started
        if started:
            self.ownership.stop(release=True)  # stops every worker (on_lost) before releasing
        elif self._gate.ident is not None:
            self._leave_membership()
        left = self.dispatcher.stop(self.settings.shutdown_grace)
        if any(left.values()):
            log.warning("handlers did not finish within the grace period: %s", left)
        stop_handlers(self._handler_objects, self.settings.shutdown_grace)
        if self._server is not None:
            self._server.stop()
        self._close_clients()
        log.info("processor %s stopped", self.member_id)

    def _close_clients(self) -> None:
        self.redis.close()
        self.lease_redis.close()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the service is not started")
        return self._server.url

    # --- waiting for the reflector -----------------------------------------------------------

    @property
    def published(self) -> bool:
        """A reflector has completed a list into every shard: the shards are being taken over."""
        return self._published.is_set()

    def _where(self) -> str:
        return (
            f"resource {self.resource!r} under key prefix {self.settings.prefix!r} in "
            f"{redacted_url(self.settings.redis.url)}"
        )

    def _wait_for_publication(self) -> None:
        """Until every shard holds a reflector's complete list: heartbeat, look, wait. Then
        start taking shards over. Runs on its own thread so that :meth:`start` returns at once
        and ``/healthz`` answers while Redis or the reflector is still missing."""
        poll = min(_PUBLICATION_POLL, self.settings.membership.heartbeat_interval)
        warned = False
        failures = 0
        last_failure_log: float | None = None
        while not self._stopping.is_set():
            try:
                publication = read_publication(
                    self.lease_redis,
                    prefix=self.settings.prefix,
                    resource=self.resource,
                    shard_count=self.settings.shard_count,
                )
                if publication.complete:
                    self._check_shard_count(publication)
                    subscriber = self._durable_subscriber_shards()
                    if not subscriber:
                        break
                    publication_wait = self._subscriber_reason(subscriber)
                else:
                    publication_wait = self._waiting_reason(publication)
                self._membership.heartbeat()  # so that status lists us as waiting
            except redis.RedisError as exc:
                failures += 1
                self._waiting_for = f"cannot read Redis at {redacted_url(self.settings.redis.url)}"
                now = time.monotonic()
                if last_failure_log is None or now - last_failure_log >= _REDIS_LOG_INTERVAL:
                    last_failure_log = now
                    log.warning(
                        "%s: looking for its reflector failed, retrying: %s",
                        self.resource,
                        self._redis_failure(exc),
                    )
                self._stopping.wait(poll)
                continue
            if failures:
                log.info("%s: Redis reachable again after %d failed calls", self.resource, failures)
                failures, last_failure_log = 0, None
            self._waiting_for = publication_wait
            if not warned:
                warned = True
                if publication.complete:  # a durable subscriber's group: the user's mistake
                    log.error("%s", self._waiting_for)
                else:
                    log.warning(
                        "%s; not ready until a reflector completes a list into every shard%s",
                        self._waiting_for,
                        self._did_you_mean(),
                    )
            self._stopping.wait(poll)
        with self._ownership_lock:
            if self._stopping.is_set():
                return
            self._published.set()
            self._ownership_started = True
            self.ownership.start()
        if warned:
            log.info("a reflector has published %s; taking shards over", self._where())

    def _durable_subscriber_shards(self) -> list[int]:
        """The shards where our group is someone else's consumer group: a durable subscriber's
        (``subscribe --group``), whose entries a processor taking the shard over would steal.
        A processor group's consumer group exists on a shard only after one of its members
        held the shard's lease, whose epoch counter never goes away; a group on the stream
        without that counter (or with a subscriber's initial-list marker) is not ours. One
        pipelined round trip, once, before the first takeover."""
        pipe = self.lease_redis.pipeline(transaction=False)
        shards = [
            GroupShardKeys(ShardKeys(self.settings.prefix, self.resource, shard), self.group)
            for shard in range(self.settings.shard_count)
        ]
        for keys in shards:
            pipe.xinfo_groups(keys.stream)
            # GET rather than EXISTS: both are strings, and GET is in the processor's ACL.
            pipe.get(keys.lease_epoch)
            pipe.get(keys.initial_list)
        replies = pipe.execute(raise_on_error=False)
        found = []
        for keys, groups, ours, marker in zip(
            shards, replies[0::3], replies[1::3], replies[2::3], strict=True
        ):
            for reply in (groups, ours, marker):
                if isinstance(reply, Exception) and not isinstance(reply, redis.ResponseError):
                    raise reply
            names = () if isinstance(groups, Exception) else (as_text(g["name"]) for g in groups)
            if self.group in names and (marker is not None or ours is None):
                found.append(keys.shard)
        return found

    def _subscriber_reason(self, shards: Sequence[int]) -> str:
        return (
            f"group {self.group!r} of {self._where()} is a durable subscriber's (subscribe "
            f"--group {self.group}) on shards {_ranges(shards)}: not taking them over, which "
            "would steal its entries; give this processor another --group, or remove the "
            f"subscriber's group (informer-bus groups delete {self.resource} {self.group})"
        )

    def _check_shard_count(self, publication: Publication) -> None:
        """A reflector with a larger ``--shard-count`` publishes shards no processor of ours
        reads: those objects would silently never reach a handler."""
        if publication.listed_beyond:
            log.error(
                "a reflector has listed more than %d shards of %s: shards from %d on will never "
                "be processed; give every processor the reflector's --shard-count",
                self.settings.shard_count,
                self._where(),
                self.settings.shard_count,
            )

    def _waiting_reason(self, publication: Publication) -> str:
        if not publication.listed_shards:
            if publication.leader:
                return f"waiting for the first list of {self._where()}: a reflector leads it"
            return f"no reflector has published {self._where()}"
        missing = publication.unlisted_shards
        return (
            f"waiting for a reflector to list every shard of {self._where()}: shards "
            f"{_ranges(missing)} of {publication.shard_count} have no completed list (is the "
            f"reflector's --shard-count {publication.shard_count}, like this processor's?)"
        )

    def _did_you_mean(self) -> str:
        """The published resource this one is likely a typo of (``pod`` for ``pods``). Only the
        singular/plural neighbours are tried, each with one ``HGET``: a processor's minimal ACL
        allows no ``SCAN`` (best effort: it only decorates one warning)."""
        name, at, rest = self.resource.partition("@")
        plural, dot, group = name.partition(".")
        stems = {plural + "s", plural + "es", plural.removesuffix("s"), plural.removesuffix("es")}
        candidates = sorted(
            f"{stem}{dot}{group}{at}{rest}" for stem in stems if stem and stem != plural
        )
        try:
            pipe = self.lease_redis.pipeline(transaction=False)
            for candidate in candidates:
                pipe.hget(
                    ShardKeys(self.settings.prefix, candidate, 0).checkpoint, CHECKPOINT_SYNCED_RV
                )
            found = [c for c, rv in zip(candidates, pipe.execute(), strict=True) if rv is not None]
        except (redis.RedisError, ValueError):
            return ""
        return f" (did you mean {' or '.join(found)}? it is published)" if found else ""

    def _leave_membership(self) -> None:
        try:
            self._membership.leave()
        except redis.RedisError as exc:
            log.warning(
                "%s: could not leave the members: %s", self.resource, self._redis_failure(exc)
            )

    def _redis_failure(self, exc: redis.RedisError) -> str:
        """``Type: message [Redis URL]`` on one line, password masked, for a retry's log."""
        message = " ".join(str(exc).split())
        return f"{type(exc).__name__}: {message} [Redis {redacted_url(self.settings.redis.url)}]"

    # --- shards ---------------------------------------------------------------------------

    def owned_shards(self) -> list[int]:
        with self._workers_lock:
            return sorted(self._workers)

    def _acquired(self, shard: int, epoch: int) -> None:
        """On the ownership thread: start taking the shard over (the worker does the loading,
        so lease renewals are not held up)."""
        store = self.lister.new_store()
        self.lister.attach(shard, store)
        worker = ShardWorker(
            self.redis,
            GroupShardKeys(ShardKeys(self.settings.prefix, self.resource, shard), self.group),
            shard=shard,
            epoch=epoch,
            member_id=self.member_id,
            store=store,
            dispatcher=self.dispatcher,
            metrics=self.metrics,
            resource=self.resource,
            count=self.settings.read_count,
            block_ms=self.settings.block_ms,
            max_entry_bytes=self.settings.max_entry_bytes,
            view=self.view,
        )
        with self._workers_lock:
            self._workers[shard] = worker
            owned = len(self._workers)
        self.metrics.owned_shards.labels(resource=self.resource, group=self.group).set(owned)
        self.metrics.rebalances.labels(resource=self.resource, group=self.group).inc()
        worker.start()
        log.info("%s: took shard %d (epoch %d)", self.resource, shard, epoch)

    def _losing(self, shards: Sequence[int]) -> None:
        """On the ownership thread, before the ``_lost`` calls: stop every one of ``shards``
        from starting handler calls now, not only once its turn in the row comes."""
        with self._workers_lock:
            workers = [self._workers[shard] for shard in shards if shard in self._workers]
        for worker in workers:
            worker.begin_stop(grace=self.settings.shutdown_grace)

    def _lost(self, shard: int) -> None:
        """On the ownership thread, before the lease is released: stop applying the shard."""
        with self._workers_lock:
            worker = self._workers.pop(shard, None)
        if worker is not None:
            # A graceful stop acknowledges what the handlers finished; if the lease is already
            # gone those acknowledgements are refused (they are fenced), so this is safe either
            # way.
            worker.stop(grace=self.settings.shutdown_grace)
            worker.join()
            self.metrics.forget_shard(self.resource, shard)
            self.metrics.rebalances.labels(resource=self.resource, group=self.group).inc()
        with self._workers_lock:
            owned = len(self._workers)
        self.metrics.owned_shards.labels(resource=self.resource, group=self.group).set(owned)
        self.lister.detach(shard)
        log.info("%s: gave up shard %d", self.resource, shard)

    def _supervise(self) -> None:
        """Marks shards synced in the lister once their worker delivered the initial list,
        and reports a worker that died (once; /healthz keeps saying so)."""
        reported: set[int] = set()
        while not self._stopping.wait(_SUPERVISE_INTERVAL):
            with self._workers_lock:
                workers = list(self._workers.items())
            for shard, worker in workers:
                if worker.has_synced and not self.lister.has_synced(shard):
                    self.lister.mark_synced(shard)
                failed = worker.error is not None and not worker.ownership_lost
                if failed and not worker.alive and shard not in reported:
                    reported.add(shard)
                    log.error(
                        "%s: shard %d worker stopped on %r", self.resource, shard, worker.error
                    )

    # --- probes ---------------------------------------------------------------------------

    def is_synced(self) -> bool:
        """Every owned shard delivered its initial list (and at least one shard is owned)."""
        if not self.published:
            return False
        owned = self.owned_shards()
        return bool(owned) and all(self.lister.has_synced(shard) for shard in owned)

    def healthz(self) -> tuple[bool, str]:
        if self._stopping.is_set():
            return False, "stopping"
        with self._workers_lock:
            workers = list(self._workers.items())
        # A worker fenced off by a newer owner stopped on purpose; the ownership loop gives its
        # shard up. Any other stopped worker is a failure.
        dead = [
            shard
            for shard, worker in workers
            if not worker.alive and worker.error is not None and not worker.ownership_lost
        ]
        if dead:
            return False, f"shard workers failed: {dead}"
        return True, "ok"

    def readyz(self) -> tuple[bool, str]:
        """Ready when every owned shard is synced; owning nothing (more processors than
        shards, or before the first assignment) is not ready, and neither is waiting for the
        reflector's first list."""
        if not self.published:
            return False, self._waiting_for
        owned = self.owned_shards()
        if not owned:
            return False, "owns no shard yet"
        waiting = [shard for shard in owned if not self.lister.has_synced(shard)]
        if waiting:
            return False, f"syncing shards {waiting}"
        return True, f"owns shards {owned}"


def _ranges(shards: Sequence[int]) -> str:
    """``0-3,7``: a shard list short enough for one log line."""
    runs: list[list[int]] = []
    for shard in sorted(shards):
        if runs and runs[-1][-1] == shard - 1:
            runs[-1].append(shard)
        else:
            runs.append([shard])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
