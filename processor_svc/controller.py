"""The controller pattern (client-go's ``NewController``): events in, keys queued, reconcile out.

Event handlers run on the processor's dispatch path, where every millisecond delays the shard
and its stream acknowledgement. A controller therefore does no work in ``on_add``/``on_update``/
``on_delete``: it puts the object's *key* on a rate-limiting workqueue and returns. Worker
threads take keys off the queue and call :meth:`Controller.reconcile`, which reads the *current*
state from the lister and makes the world match it. The workqueue supplies the rest
(reference 6): a key waiting once absorbs any number of events for it, one key is never
reconciled by two workers at once, and failures come back later with per-key exponential
backoff instead of hot-looping. The queue is a priority queue: keys of an initial list, a
takeover or a resync wait behind those of fresh events (:mod:`processor_svc.event_priority`).

Usage, as a ``--handler`` target (``--handler mypkg.controllers:ReplicaChecker``)::

    class ReplicaChecker(Controller):
        workers = 4

        def reconcile(self, key: str) -> None:
            obj = self.lister.get_by_key(key)
            if obj is None:
                ...  # deleted: clean up what you keep for key
                return
            ...  # make the world match obj; raise to retry with backoff

A controller of several resources declares them as class attributes (``For``, ``Owns``,
``Watches``: :mod:`processor_svc.watches`); without declarations its primary is the processor's
resource and the controller itself handles that resource's events, as above.

Across processes, a controller follows shard ownership (``ShardAware``): a hand-over first
stops its keys from being reconciled here (:meth:`Controller.shards_leaving`), then waits for
the reconciles in progress (:meth:`Controller.wait_shards_idle`) before the leases go, so two
processors never reconcile one key at once; the next owner loads the expectations of the last
owner's writes (:meth:`Controller.shards_acquired`, :mod:`processor_svc.expectations`) and
reconciles a key only once the caches of its shard are loaded.

Lifecycle: construction creates the queue (which starts its own timer thread). Workers start in
:meth:`Controller.start`, called by the processor (``handlers.start_handlers``) before the first
shard is attached; events that arrive earlier are queued, not lost. They were deliberately not
started lazily on the first event: the thread count of a process should not depend on whether
traffic happened, and the worker threads must be stopped by someone who knows they exist.
By default each worker first waits for every served resource's cache sync, as client-go
controllers wait for ``HasSynced`` of each informer, and then reconciles a key only once the
caches of its shard are loaded (a takeover reloads one shard while the others serve), so a
reconcile never judges a half-loaded cache. :meth:`Controller.stop` shuts the queue down, lets
workers finish the key in hand and the keys already queued (client-go's drain), drops retries
that are not due yet, and joins the workers; always call it, even if the controller was never
started.

The delivery guarantee handlers get (docs/architecture.md) ends at ``on_*`` returning: a stream
entry is acknowledged once its key is *queued*, not reconciled. If the process dies with keys
still queued, the shard's next owner re-delivers every live object as an initial list, so live
keys are reconciled again; a queued *deletion* is not re-delivered. That is client-go's contract
too: cleanup that must happen belongs behind a finalizer, not only in the delete path.
"""

from __future__ import annotations

import abc
import inspect
import re
import threading
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from common.handlers import ResourceEventHandler
from common.object_keys import DeletedFinalStateUnknown, Obj, deletion_handling_meta_namespace_key
from common.priority_queue import LOW_PRIORITY, NORMAL_PRIORITY
from common.rate_limiters import RateLimiter
from common.workqueue import QueueShutDown, RateLimitingQueue
from processor_svc.event_priority import KeyQueue, add_priority, update_priority
from processor_svc.handlers import (
    DeclaresResources,
    HandlerContext,
    Lister,
    ResourceUse,
    ServesResources,
    ShardAware,
)
from processor_svc.handover_guard import HandoverGuard
from processor_svc.predicates import UpdatePredicate
from processor_svc.sync_waits import SyncWaits
from processor_svc.watches import Binding, Declarations
from processor_svc.write_barrier import DEFAULT_TIMEOUT, Expectation, Verdict, WriteBarrier

__all__ = ["DEFAULT_MAX_RETRIES", "DEFAULT_WORKERS", "Controller"]

_FIELD_SEPARATOR = " "
"""Between the controller's name and the key in a saved field (names have no whitespace), so
that controllers of one processor group with the same primary keep their own expectations."""

DEFAULT_WORKERS = 2
DEFAULT_MAX_RETRIES = 5
"""Retries after the first failure before giving up: client-go's sample-controller pattern."""


class Controller(abc.ABC):
    """Base for controllers: subclass, implement :meth:`reconcile`, name it as a ``--handler``.

    Settings come from class attributes, which a ``--handler`` target can only set that way, or
    from the constructor's keyword arguments, which win:

    * ``name``: the workqueue's name (its metrics' ``name`` label) and the logger suffix;
      default: the class name in snake case.
    * ``workers``: reconcile threads (default 2). One key is never reconciled concurrently.
    * ``max_retries``: retries after a failure before giving up on a key (default 5, so at most
      6 attempts); giving up logs an error and forgets the key's backoff. A later event for the
      key starts over.
    * ``rate_limiter``: spaces the retries. Default: the queue's own limiter, which the context's
      workqueue factory chose (client-go's default controller rate limiter unless configured).
    * ``wait_for_sync``: workers wait for every served resource's cache before the first
      reconcile, and a key until the caches of its shard are loaded
      (``HandlerContext.synced_for``; meanwhile it is tried again after a pause that doubles,
      :mod:`processor_svc.sync_waits`, which is not a failure).
    * ``reconcile_only_owned``: skip (and forget) a key whose shard this processor no longer
      owns, because the lister would show it as absent although it was only handed over; its
      new owner re-delivers and reconciles it. Applies to keys whose shard the primary's lister
      can tell (``Lister.shard_of``); turn it off if you enqueue keys that are not keys of the
      primary. Keys of a shard being handed over (:meth:`shards_leaving`) are skipped
      regardless.
    * ``predicates``: update events reach the queue only if every one of these
      (:mod:`processor_svc.predicates`, e.g. ``generation_changed``) passes; additions and
      deletions always do. Default: none, every update is queued.
    * ``write_barrier_timeout``: after a reconcile called :meth:`expect_version` or
      :meth:`expect_deleted`, how long the key may wait for the cache to show that write before
      it is retried anyway (default 30 s; :mod:`processor_svc.write_barrier`). With the
      context's ``expectations`` store, every change is saved for the key's shard, so its next
      owner honours them too.
    """

    name: str = ""
    workers: int = DEFAULT_WORKERS
    max_retries: int = DEFAULT_MAX_RETRIES
    wait_for_sync: bool = True
    reconcile_only_owned: bool = True
    write_barrier_timeout: float = DEFAULT_TIMEOUT
    predicates: tuple[UpdatePredicate, ...] = ()
    _declarations: ClassVar[Declarations] = Declarations()
    """The class's ``For``/``Owns``/``Watches``, collected (and checked) when it is defined."""

    _awaits_reconcile: ClassVar[bool] = False
    """Whether ``reconcile`` is a coroutine (``processor_svc.async_controller``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._declarations = Declarations.of(cls)
        if inspect.iscoroutinefunction(cls.reconcile) and not cls._awaits_reconcile:
            raise TypeError(f"{cls.__qualname__}: an async def reconcile needs AsyncController")

    @classmethod
    def declared_resources(cls) -> Sequence[ResourceUse]:
        """The resources this class declares, the ``For`` first (``DeclaresResources``): the
        processor serves them without ``--resource``. Empty without declarations."""
        return cls._declarations.uses()

    def __init__(
        self,
        context: HandlerContext,
        *,
        name: str | None = None,
        workers: int | None = None,
        max_retries: int | None = None,
        rate_limiter: RateLimiter[str] | None = None,
        wait_for_sync: bool | None = None,
        reconcile_only_owned: bool | None = None,
        write_barrier_timeout: float | None = None,
        predicates: tuple[UpdatePredicate, ...] | None = None,
    ) -> None:
        self.context = context
        # Instance attributes shadow the class defaults, so each instance shows what it uses.
        cls = type(self)
        declarations = cls._declarations
        primary = declarations.primary
        self.resource = context.resource if primary is None else primary.resource
        """The primary resource: its keys are the queue keys."""
        self._listers: dict[str, Lister] = (
            {self.resource: context.lister}
            if primary is None
            else declarations.listers(context, cls.__qualname__)
        )
        """The resources whose events this controller hears, so whose writes it can expect."""
        self.lister: Lister = self._listers[self.resource]
        """The primary's lister."""
        snake_case = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()
        self.name = name or cls.name or snake_case
        if not self.name or any(c.isspace() for c in self.name):
            # It starts the fields of its persisted expectations, before a space.
            raise ValueError(f"name must be non-empty and without whitespace, got {self.name!r}")
        self.workers = cls.workers if workers is None else workers
        self.max_retries = cls.max_retries if max_retries is None else max_retries
        self.wait_for_sync = cls.wait_for_sync if wait_for_sync is None else wait_for_sync
        self.reconcile_only_owned = (
            cls.reconcile_only_owned if reconcile_only_owned is None else reconcile_only_owned
        )
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        self.predicates = tuple(cls.predicates if predicates is None else predicates) + (
            () if primary is None else primary.predicates
        )
        self.logger = context.logger.getChild(self.name)
        self._rate_limiter = rate_limiter
        self.queue: RateLimitingQueue[str] = context.workqueue_factory(self.name)
        self._keys = KeyQueue(self.queue)
        self.barrier = WriteBarrier(
            cls.write_barrier_timeout if write_barrier_timeout is None else write_barrier_timeout,
            resource=self.resource,
            on_change=self._expectations_changed,
        )
        """The keys whose caches must first show this controller's own last writes."""
        binding = Binding(
            controller=self,
            primary=self.resource,
            primary_lister=self.lister,
            layouts=context.layouts,
            enqueue=self.enqueue,
            observe=self._observe,
        )
        self._handlers: dict[str, ResourceEventHandler] = {
            self.resource: self,
            **{d.resource: d.handler(binding) for d in declarations.others},
        }
        self._lock = threading.Lock()
        # Serialises saving a key's expectations with reading them, so that the last save of a
        # key writes its latest state, whichever thread changed it last.
        self._save_lock = threading.Lock()
        self._handover = HandoverGuard()
        self._sync_waits = SyncWaits()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stopped = False

    # --- what subclasses implement ------------------------------------------------------------

    @abc.abstractmethod
    def reconcile(self, key: str) -> Awaitable[None] | None:
        """Make the world match the cached state of ``key``; raise to retry with backoff.

        Runs on a worker thread, never concurrently for the same key. Read the state from
        ``self.lister`` (``None`` means deleted); never trust an event's payload to still be
        current, and never mutate what the lister returns. Must be idempotent: a key can be
        reconciled again at any time (retries, resyncs, takeovers).
        """

    # --- the ResourceEventHandler side --------------------------------------------------------

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        key = self.key_of(obj)
        self._observe(self.resource, key, obj, False)
        self.enqueue(key, add_priority(is_in_initial_list))

    def on_update(self, old: Obj, new: Obj) -> None:
        key = self.key_of(new)
        self._observe(self.resource, key, new, False)  # it reached the cache, filtered or not
        if all(predicate(old, new) for predicate in self.predicates):
            self.enqueue(key, update_priority(old, new))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        key = self.key_of(obj)
        self._observe(self.resource, key, obj, True)
        self.enqueue(key)

    def _observe(
        self, resource: str, object_key: str, obj: Obj | DeletedFinalStateUnknown, deleted: bool
    ) -> None:
        """Every event of a watched resource, before its predicates: the cache moved. Keys
        the barrier held back until this write showed are queued again at once."""
        for key in self.barrier.observe(object_key, obj, deleted=deleted, resource=resource):
            self.queue.add(key)

    def resource_handlers(self) -> Mapping[str, ResourceEventHandler]:
        """The event handler of each resource it watches (``ServesResources``): itself for the
        primary's events, one per ``Owns``/``Watches`` (:mod:`processor_svc.watches`)."""
        return dict(self._handlers)

    def key_of(self, obj: Obj | DeletedFinalStateUnknown) -> str:
        """The queue key of an object or tombstone (client-go's DeletionHandling key func)."""
        return deletion_handling_meta_namespace_key(obj)

    def expect_version(
        self,
        key: str,
        resource_version: str,
        *,
        resource: str | None = None,
        object_key: str | None = None,
    ) -> None:
        """Call after a reconcile of ``key`` wrote ``object_key`` (default: ``key`` itself) of
        ``resource`` (default: the primary): ``key`` is not reconciled again until that cache
        holds ``resource_version`` (what the API returned for the write) or later, and every
        other expectation of ``key`` is met (:mod:`processor_svc.write_barrier`).
        ``ValueError`` for a resource whose events this controller does not hear."""
        self.barrier.expect(
            key, resource_version, resource=self._expected_resource(resource), object_key=object_key
        )

    def expect_deleted(
        self, key: str, *, resource: str | None = None, object_key: str | None = None
    ) -> None:
        """Call after a reconcile of ``key`` deleted ``object_key`` (default: ``key`` itself)
        of ``resource`` (default: the primary): ``key`` is not reconciled again until that
        cache no longer holds it, and every other expectation of ``key`` is met."""
        self.barrier.expect_deleted(
            key, resource=self._expected_resource(resource), object_key=object_key
        )

    def _expected_resource(self, resource: str | None) -> str:
        if resource is None:
            return self.resource
        if resource not in self._listers:
            raise ValueError(
                f"{self.name}: cannot expect a write of {resource!r}: this controller hears the "
                f"events of {', '.join(self._listers)} only (declare it with Owns or Watches)"
            )
        return resource

    def enqueue(self, key: str, priority: int = NORMAL_PRIORITY) -> None:
        """Queue ``key`` at ``priority`` (:mod:`processor_svc.event_priority`); a no-op if it
        already waits that high, or after stop."""
        self._keys.add(key, priority)

    def enqueue_after(
        self, key: str, delay_seconds: float, priority: int = NORMAL_PRIORITY
    ) -> None:
        """Queue ``key`` after a delay, e.g. to re-check something that is expected to change."""
        self._keys.add_after(key, delay_seconds, priority)

    # --- following shard ownership (ShardAware) ------------------------------------------------

    def shards_acquired(self, shards: Sequence[int]) -> None:
        """The processor owns ``shards`` now (before their events are delivered): load the
        expectations their previous owner saved, so that no key of theirs is reconciled on a
        cache older than that owner's last write. What the barrier held for keys of those shards
        is replaced by what the store holds. A loaded key is queued for when its earliest
        expectation expires, so its expectations are settled (and forgotten in the store) even
        if no event queues it. Raises what the store raises (Redis unreachable)."""
        acquired = set(shards)
        self._handover.acquired(acquired)
        store = self.context.expectations
        if store is None:
            return
        loaded: dict[str, list[Expectation]] = {}
        for shard in sorted(acquired):
            for field, expectations in store.load(shard).items():
                name, _, key = field.partition(_FIELD_SEPARATOR)
                if name == self.name and key:
                    loaded[key] = [e for e in expectations if e.resource in self._listers]
        for key in self.barrier.pending_keys():
            if key not in loaded and self.lister.shard_of(key) in acquired:
                self.barrier.forget(key)
        for key, expectations in loaded.items():
            self.barrier.restore(key, expectations)
            remaining = self.barrier.remaining(key)
            if remaining is not None:  # a takeover's work: behind fresh events
                self._keys.add_after(key, remaining, LOW_PRIORITY)
        if loaded:
            self.logger.info(
                "loaded the write expectations of %d keys of shards %s",
                len(loaded), sorted(acquired), extra={"controller": self.name},
            )  # fmt: skip

    def shards_leaving(self, shards: Sequence[int]) -> None:
        """``shards`` are about to go to another processor: from now on their keys taken off
        the queue are skipped and forgotten, as those of shards already gone are
        (``reconcile_only_owned``). Does not block."""
        self._handover.leaving(shards)

    def wait_shards_idle(self, shards: Sequence[int], timeout: float) -> bool:
        """Return ``True`` once no reconcile of a key of ``shards`` runs (nor of a key that does
        not tell its shard, which might be one), ``False`` if that takes longer than
        ``timeout`` seconds. The processor releases the shards' leases only then, so two
        processors never reconcile one key at once. Once idle, the barrier drops what it held
        for their keys: the store keeps it for their next owner."""
        wanted = set(shards)
        if not self._handover.wait_idle(wanted, timeout):
            return False
        for key in self.barrier.pending_keys():
            if self.lister.shard_of(key) in wanted:
                self.barrier.forget(key)
        return True

    def _expectations_changed(self, key: str) -> None:
        """Save ``key``'s expectations for its shard's next owner (module docstring of
        :mod:`processor_svc.expectations`). A key whose shard its key does not tell (a primary
        sharded by owner or label) is not saved: its expectations stay in this process."""
        store = self.context.expectations
        if store is None:
            return
        shard = self.lister.shard_of(key)
        if shard is None:
            return
        with self._save_lock:
            expectations = self.barrier.expectations(key)
            try:
                store.save(shard, f"{self.name}{_FIELD_SEPARATOR}{key}", expectations)
            except Exception as exc:
                # The barrier still holds them here; only a next owner would miss them.
                self.logger.warning(
                    "could not save the write expectations of %s: %s: %s",
                    key, type(exc).__name__, exc, extra={"controller": self.name, "key": key},
                )  # fmt: skip

    # --- retries -------------------------------------------------------------------------------

    def num_requeues(self, key: str) -> int:
        """Failures currently recorded for ``key`` (0 after a success or after giving up)."""
        if self._rate_limiter is not None:
            return self._rate_limiter.num_requeues(key)
        return self.queue.num_requeues(key)

    def _forget(self, key: str) -> None:
        if self._rate_limiter is not None:
            self._rate_limiter.forget(key)
        self.queue.forget(key)
        self._sync_waits.forget(key)  # a key skipped while it waited for its caches

    def _requeue_rate_limited(self, key: str, priority: int) -> None:
        """A retry, at the priority the key was handed out at (controller-runtime's rule)."""
        if self._rate_limiter is not None:
            self._keys.add_after(key, self._rate_limiter.when(key), priority)
        else:
            self._keys.add_rate_limited(key, priority)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker threads (idempotent). Raises ``RuntimeError`` after :meth:`stop`."""
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"controller {self.name!r} was stopped; it cannot restart")
            if self._threads:
                return
            self._threads = self._new_threads()
            for thread in self._threads:
                thread.start()
        self._log_started()

    def _new_threads(self) -> list[threading.Thread]:
        # Daemons: a reconcile stuck past stop(timeout) must not hang interpreter exit.
        prefix = f"controller[{self.name}]-worker-"
        return [
            threading.Thread(target=self._run_worker, name=f"{prefix}{index}", daemon=True)
            for index in range(self.workers)
        ]

    def _log_started(self) -> None:
        self.logger.info("started %d workers", self.workers, extra={"controller": self.name})

    def stop(self, timeout: float | None = None) -> bool:
        """Shut the queue down, drain it and join the workers; ``False`` if ``timeout`` ran out.

        Keys in hand and keys already queued are reconciled (client-go's drain); retries not
        yet due are dropped. Workers still waiting for cache sync exit without reconciling.
        Idempotent.
        """
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        self._stop.set()
        self.queue.shut_down()
        deadline = None if timeout is None else time.monotonic() + timeout
        # A reconcile may call stop(); its own worker ends when it returns, so do not join it.
        others = [thread for thread in threads if thread is not threading.current_thread()]
        for thread in others:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in others)

    @property
    def running(self) -> bool:
        """Whether any worker thread is alive."""
        with self._lock:
            return any(thread.is_alive() for thread in self._threads)

    # --- workers -------------------------------------------------------------------------------

    def _run_worker(self) -> None:
        if self.wait_for_sync and not self.context.wait_for_cache_sync(stop=self._stop):
            self.logger.info("stopped before the caches synced; not reconciling")
            return
        while True:
            try:
                key, priority = self._keys.get()
            except QueueShutDown:
                return
            try:
                self._process(key, priority)
            finally:
                self.queue.done(key)

    def _process(self, key: str, priority: int) -> None:
        admitted, shard = self._admit(key)
        if not admitted:
            return
        try:
            if self._ready(key, shard, priority):
                try:
                    self.reconcile(key)
                except Exception as exc:
                    self._handle_error(key, exc, priority)
                else:
                    self._forget(key)
        finally:
            self._finish(shard)

    def _admit(self, key: str) -> tuple[bool, int | None]:
        """Whether ``key`` may be reconciled here now, and its shard; if so, it counts as
        running for :meth:`wait_shards_idle` until :meth:`_finish`."""
        shard = self.lister.shard_of(key)
        if not self._handover.enter(shard):
            self.logger.debug("skipping %s: its shard is being handed over", key)
            self._forget(key)
            return False, shard
        return True, shard

    def _finish(self, shard: int | None) -> None:
        self._handover.leave(shard)

    def _ready(self, key: str, shard: int | None, priority: int) -> bool:
        """Whether to reconcile ``key`` now: its shard is still here, its caches are loaded and
        they show this controller's last writes; if not, the key is forgotten or put back."""
        if self._shard_moved_away(key, shard):
            self.logger.debug("skipping %s: its shard is no longer owned here", key)
            self._forget(key)
            return False
        if self.wait_for_sync and not self._key_synced(key, priority):
            return False
        verdict = self.barrier.check(key, self._read_cache)
        if verdict is Verdict.WAIT:
            # The event that brings the last write releases the key; the deadline, if not.
            remaining = self.barrier.remaining(key)
            if remaining is not None:
                self._keys.add_after(key, remaining, priority)
            return False
        if verdict is Verdict.EXPIRED:
            self.logger.warning(
                "the cache did not show this controller's last write of %s within %.0f s; "
                "retrying rather than acting on it",
                key, self.barrier.timeout, extra={"controller": self.name, "key": key},
            )  # fmt: skip
            self._requeue_rate_limited(key, priority)
            return False
        return True

    def _key_synced(self, key: str, priority: int) -> bool:
        """Whether the caches of ``key``'s shard are loaded; if not, the key is added again
        later (a takeover is loading them: not a failure, so not the rate limiter's business)."""
        if self.context.synced_for(key):
            self._sync_waits.forget(key)
            return True
        self._keys.add_after(key, self._sync_waits.next_delay(key), priority)
        return False

    def _read_cache(self, resource: str, object_key: str) -> Obj | None:
        return self._listers[resource].get_by_key(object_key)

    def _shard_moved_away(self, key: str, shard: int | None) -> bool:
        """The key's shard is not attached here (``reconcile_only_owned``); a key that does not
        tell its shard (``shard is None``) is never taken for moved."""
        if not self.reconcile_only_owned or shard is None or self.lister.shard_count is None:
            return False
        return not self.lister.owns(key)

    def _handle_error(self, key: str, exc: Exception, priority: int) -> None:
        failures = self.num_requeues(key)
        fields = {"controller": self.name, "key": key, "failures": failures + 1}
        if failures < self.max_retries:
            if self.queue.shutting_down():
                self.logger.warning(
                    "reconcile of %s failed during shutdown, not retrying: %s: %s",
                    key, type(exc).__name__, exc, extra=fields,
                )  # fmt: skip
                return
            self.logger.warning(
                "reconcile of %s failed (attempt %d), retrying: %s: %s",
                key, failures + 1, type(exc).__name__, exc, extra=fields,
            )  # fmt: skip
            self._requeue_rate_limited(key, priority)
            return
        self._forget(key)
        self.logger.error(
            "giving up on %s after %d retries: %s: %s",
            key, self.max_retries, type(exc).__name__, exc, extra=fields, exc_info=exc,
        )  # fmt: skip


if TYPE_CHECKING:

    def _controller_is_a_handler(controller: Controller) -> ResourceEventHandler:
        return controller

    def _controller_serves_resources(controller: Controller) -> ServesResources:
        return controller

    def _controller_class_declares_resources(cls: type[Controller]) -> DeclaresResources:
        return cls

    def _controller_follows_shards(controller: Controller) -> ShardAware:
        return controller
