"""User handlers named on the command line (``--handler module:attr[@resync]``), and their context.

Handler code is named only by the operator (flags or environment), never by anything read from a
stream: see ``common.plugins``. A reference names either

* an **object** with ``on_add``/``on_update``/``on_delete`` (a
  :class:`~common.handlers.ResourceEventHandler`), used as is; or
* a **class or factory** called once with a :class:`HandlerContext` and returning such an object.
  This is how a handler gets the things it cannot import: the lister over the owned shards, named
  workqueues that report metrics, a logger, the settings. A
  :class:`~processor_svc.controller.Controller` subclass is such a class.

**Resync periods** are part of the reference: ``mypkg.handlers:Audit@30s`` replays
``on_update(obj, obj)`` for every object of the local stores every 30 seconds (from the stores,
never from the API; reference 5.3). Units are ``ms``, ``s``, ``m``, ``h``, combinable Go-style
(``1m30s``); a bare number is seconds; ``@0`` or no suffix means no resync; anything from 0 to
1 s is refused (client-go's minimum is 1 s). The suffix lives in the reference, rather than in a
second flag, so a handler and its period cannot drift apart when flags are reordered or one of
several handlers is removed. The handler's *name* (log fields, metric labels, the dispatcher's
``resync_periods`` key) is the reference without the suffix.

**Lifecycle**: a handler may also have ``start()`` and ``stop(timeout)`` (:class:`Startable`,
:class:`Stoppable`). The processor calls
:func:`start_handlers` once, before the first shard is attached, and :func:`stop_handlers` at
shutdown after the last event was delivered, in reverse order (a Controller's workers run only
between the two).
"""

from __future__ import annotations

import builtins  # ``builtins.list`` in annotations: Lister.list shadows it in the class
import inspect
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from common.handlers import ResourceEventHandler
from common.object_keys import Obj
from common.plugins import PluginError, load_plugin, user_traceback
from common.priority_queue import PriorityQueue
from common.publication import ResourceLayout
from common.rate_limiters import Clock, RateLimiter
from common.resource_ids import check_resource_id
from common.store import IndexFunc
from common.workqueue import MetricsProvider, RateLimitingQueue
from processor_svc.async_dispatch import is_async_handler
from processor_svc.event_loop import EventLoopThread
from processor_svc.resync import MIN_RESYNC_PERIOD, ResyncPeriodError, checked_resync_period
from processor_svc.write_barrier import Expectation

__all__ = [
    "DeclaresResources",
    "Expectation",
    "ExpectationStore",
    "HandlerContext",
    "HandlerLoadError",
    "HandlerSpec",
    "Lister",
    "LoadedHandler",
    "ResourceUse",
    "ServesResources",
    "ShardAware",
    "Startable",
    "Stoppable",
    "WorkqueueFactory",
    "declared_resources",
    "load_handler",
    "load_handlers",
    "make_workqueue_factory",
    "parse_duration",
    "parse_handler_spec",
    "resync_periods",
    "start_handlers",
    "stop_handlers",
]

_HANDLER_METHODS = ("on_add", "on_update", "on_delete")
""":class:`~common.handlers.ResourceEventHandler`'s methods, named in error messages."""

WorkqueueFactory = Callable[[str], RateLimitingQueue[str]]
"""Makes a named rate-limiting queue of keys; the name is the ``name`` label of its metrics."""


class Lister(Protocol):
    """What a handler may do with the cache: read it, wait for it, and add indexes to it.

    The read-only face of :class:`~processor_svc.lister.ShardedLister`: which shards it shows
    (``attach``/``detach``) and when they count as synced (``mark_synced``) are the
    processor's business, never a handler's. Objects are shared: never mutate them.
    """

    @property
    def shard_count(self) -> int | None: ...

    def shards(self) -> builtins.list[int]: ...

    def has_synced(self, shard: int | None = None) -> bool: ...

    def wait_for_cache_sync(
        self, timeout: float | None = None, stop: threading.Event | None = None
    ) -> bool: ...

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None: ...

    def get_indexers(self) -> dict[str, IndexFunc]: ...

    def owns(self, key: str) -> bool: ...

    def shard_of(self, key: str) -> int | None: ...

    def get_by_key(self, key: str) -> Obj | None: ...

    def get(self, namespace_or_key: str, name: str | None = None) -> Obj | None: ...

    def list(self) -> builtins.list[Obj]: ...

    def list_keys(self) -> builtins.list[str]: ...

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]: ...

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]: ...

    def index(self, index_name: str, obj: Obj) -> builtins.list[Obj]: ...

    def list_index_func_values(self, index_name: str) -> builtins.list[str]: ...

    def __len__(self) -> int: ...

    def __contains__(self, key: object) -> bool: ...


@runtime_checkable
class Startable(Protocol):
    """Optional for a handler: ``start()`` runs once, before the first shard is attached."""

    def start(self) -> None: ...


@runtime_checkable
class Stoppable(Protocol):
    """Optional for a handler: ``stop(timeout)`` runs at shutdown, after the last event;
    returning ``False`` says it did not stop within ``timeout`` seconds (``None``: no limit)."""

    def stop(self, timeout: float | None = None) -> bool | None: ...


def _no_layout(resource: str) -> ResourceLayout | None:
    return None


class HandlerLoadError(PluginError):
    """A handler reference that cannot become a handler; the message is one line for a human."""


@dataclass(frozen=True, slots=True)
class ResourceUse:
    """A resource a handler class declares it needs (:class:`DeclaresResources`)."""

    resource: str
    """The resource id (``configmaps``, ``widgets.example.com``)."""
    replicate: bool = False
    """Every member of the group reads every shard of it (a small lookup set), instead of
    owning its shards together with the other resources' (co-sharded)."""


@runtime_checkable
class DeclaresResources(Protocol):
    """Optional for a handler *class*: the resources its instances need, asked before the
    processor builds its caches (so ``--resource`` need not repeat them). The first non-replicated
    one is the primary unless ``--resource`` names one."""

    @classmethod
    def declared_resources(cls) -> Sequence[ResourceUse]: ...


@runtime_checkable
class ServesResources(Protocol):
    """Optional for a handler: one event handler per resource it wants events of, instead of
    being itself the handler of the primary's events (a controller's ``For``/``Owns``/
    ``Watches``). Asked once, after construction."""

    def resource_handlers(self) -> Mapping[str, ResourceEventHandler]: ...


@runtime_checkable
class ShardAware(Protocol):
    """Optional for a handler that does work of its own per key after its events returned (a
    controller's reconciles), so that the work follows shard ownership: two processors never
    work on one key at once, and a new owner starts from the old owner's expectations.

    Shard numbers are the co-sharded group's: shard *i* of every co-sharded resource moves
    together. ``shards_acquired`` comes before the shards' events are delivered;
    ``shards_leaving`` when the shards are about to go (no new work may start for their keys:
    it must not block); ``wait_shards_idle`` after their events stopped and before the leases
    are released: it returns once no work for their keys runs, or ``False`` after ``timeout``.
    """

    def shards_acquired(self, shards: Sequence[int]) -> None: ...

    def shards_leaving(self, shards: Sequence[int]) -> None: ...

    def wait_shards_idle(self, shards: Sequence[int], timeout: float) -> bool: ...


class ExpectationStore(Protocol):
    """Where a controller keeps the unmet expectations of its keys beyond its own process: the
    shard's next owner loads them (``processor_svc.write_barrier``; in Redis, one hash per
    primary shard). Keyed by the shard of the queue key (a primary's key)."""

    def save(self, shard: int, key: str, expectations: Sequence[Expectation]) -> None:
        """Record ``key``'s expectations (replacing what it had); an empty sequence forgets."""
        ...

    def load(self, shard: int) -> dict[str, list[Expectation]]:
        """Every key's recorded expectations in ``shard``."""
        ...


@dataclass(frozen=True)
class HandlerContext:
    """What a handler factory receives: everything a handler needs and cannot import.

    ``lister`` is the read-only view over the owned shards of the processor's primary resource
    (objects are shared: never mutate them); ``listers`` has one for every resource the
    processor serves, the primary's included (:meth:`lister_for`). ``workqueue_factory(name)``
    makes a rate-limiting queue whose metrics carry ``name``. ``settings`` is the processor's
    settings object; ``resource`` the primary resource id (``pods``, ``deployments.apps``).

    Filled in by the processor once it knows them (tests may leave the defaults):
    ``layouts(resource)`` is what the resource's reflector recorded (kind, scope, shard key;
    ``None`` before it is known), ``key_synced(key)`` whether the caches that can hold the
    primary with key ``key`` and what is co-sharded with it are loaded, ``expectations`` where
    controllers persist their write expectations.
    """

    lister: Lister
    workqueue_factory: WorkqueueFactory
    logger: logging.Logger
    settings: object
    resource: str
    listers: Mapping[str, Lister] = field(default_factory=dict)
    layouts: Callable[[str], ResourceLayout | None] = _no_layout
    key_synced: Callable[[str], bool] | None = None
    expectations: ExpectationStore | None = None
    event_loop: EventLoopThread | None = None
    """The processor's event loop, where async controllers run their reconciles."""

    def lister_for(self, resource: str) -> Lister:
        """The lister of ``resource``; ``KeyError`` (saying how to serve it) if it is not one
        of this processor's resources."""
        if resource == self.resource:
            return self.lister
        try:
            return self.listers[resource]
        except KeyError:
            served = ", ".join(sorted({self.resource, *self.listers})) or "none"
            raise KeyError(
                f"resource {resource!r} is not served by this processor (it serves {served}): "
                f"give it --resource {resource}, or declare it in the controller"
            ) from None

    def all_listers(self) -> dict[str, Lister]:
        """Every served resource's lister, the primary's first."""
        return {self.resource: self.lister, **self.listers}

    def wait_for_cache_sync(
        self, timeout: float | None = None, stop: threading.Event | None = None
    ) -> bool:
        """Block until every served resource's cache is synced (client-go's
        ``WaitForCacheSync`` over all informers of a factory); ``False`` if ``timeout`` passes
        or ``stop`` is set first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for lister in self.all_listers().values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not lister.wait_for_cache_sync(left, stop):
                return False
        return True

    def synced_for(self, key: str) -> bool:
        """Whether the caches holding the primary ``key`` and what is co-sharded with it are
        loaded (without a processor's answer: whether every cache is)."""
        if self.key_synced is not None:
            return self.key_synced(key)
        return all(lister.has_synced() for lister in self.all_listers().values())


@dataclass(frozen=True)
class HandlerSpec:
    """A parsed ``[resource=]module:attr[@period]``: what to load, for which resource's events,
    and how often to resync it."""

    reference: str
    resync_period: float | None = None
    resource: str | None = None
    """The resource whose events the handler gets; ``None``: the processor's primary."""

    @property
    def name(self) -> str:
        """The handler's name everywhere else (logs, the ``handler`` metric label): its
        reference without the resync suffix, behind its resource when one was given."""
        return self.reference if self.resource is None else f"{self.resource}={self.reference}"


@dataclass(frozen=True)
class LoadedHandler:
    """A loaded handler with the name and resync period the dispatcher needs."""

    name: str
    handler: ResourceEventHandler
    resync_period: float | None


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``"30s"``, ``"1m30s"``, ``"500ms"``, ``"2h"`` or a bare number of seconds, as seconds."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if seconds >= 0 and seconds != float("inf"):
            return seconds
        raise ValueError(f"invalid duration {text!r}: must be a finite number >= 0")
    parts = _DURATION_PART.findall(text)
    if not text or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {text!r} (examples: 30s, 1m30s, 500ms, 2h)")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def parse_handler_spec(text: str) -> HandlerSpec:
    """Split ``configmaps=module:attr@30s`` into the resource (``None`` when not given), the
    reference and the resync period (``None``: no resync). The resource comes first because a
    resource id may hold an ``@`` of its own (``widgets.example.com@shop``); a module path never
    holds a ``=``."""
    stripped = text.strip()
    head, equals, rest = stripped.partition("=")
    resource: str | None = None
    if equals:
        try:
            resource = check_resource_id(head)
        except ValueError as exc:
            raise HandlerLoadError(f"handler {stripped!r}: {exc}") from None
    else:
        rest = stripped
    reference, sep, period_text = rest.rpartition("@")
    if not sep:
        return HandlerSpec(rest, None, resource)
    try:
        period = parse_duration(period_text)
    except ValueError as exc:
        raise HandlerLoadError(f"handler {stripped!r}: bad resync period: {exc}") from None
    try:
        return HandlerSpec(reference, checked_resync_period(period), resource)
    except ResyncPeriodError:
        raise HandlerLoadError(
            f"handler {stripped!r}: resync period {period_text!r} is below the minimum "
            f"of {MIN_RESYNC_PERIOD:g}s (use @0 for no resync)"
        ) from None


def declared_resources(reference: str) -> tuple[ResourceUse, ...]:
    """The resources the handler class ``reference`` names declares (:class:`DeclaresResources`),
    ``()`` for any other handler; asked before anything is constructed. Raises
    :class:`HandlerLoadError` (one line) when the reference cannot be imported or the
    declarations cannot be read."""
    ref = parse_handler_spec(reference).reference
    target = _load(ref)
    if not (isinstance(target, type) and isinstance(target, DeclaresResources)):
        return ()
    try:
        uses = tuple(target.declared_resources())
        for use in uses:
            check_resource_id(use.resource)
    except Exception as exc:
        raise HandlerLoadError(
            f"handler {ref!r}: its declared resources are unusable: {_one_line(exc)}"
        ) from None
    return uses


def load_handler(reference: str, context: HandlerContext) -> ResourceEventHandler:
    """Load the handler ``reference`` names (a resync suffix is accepted and ignored here).

    Raises :class:`HandlerLoadError` with a one-line message when the reference cannot be
    imported, names neither a handler nor a callable, names a factory that does not take a
    context, or names a factory that raises or returns something that is not a handler.
    """
    ref = parse_handler_spec(reference).reference
    target = _load(ref)
    if not isinstance(target, type) and isinstance(target, ResourceEventHandler):
        return _sync_or_async(ref, target)
    if not callable(target):
        raise HandlerLoadError(
            f"handler {ref!r} is a {type(target).__name__}: expected an object with "
            "on_add/on_update/on_delete, or a class or factory taking a HandlerContext"
        )
    _check_takes_context(ref, target)
    try:
        handler = target(context)
    except Exception as exc:
        raise HandlerLoadError(
            f"handler factory {ref!r} failed: {type(exc).__name__}: {_one_line(exc)}",
            user_traceback=user_traceback(exc),
        ) from exc
    if not isinstance(handler, ResourceEventHandler):
        raise HandlerLoadError(
            f"handler factory {ref!r} returned a {type(handler).__name__} without "
            f"{', '.join(_missing_methods(handler))}"
        )
    return _sync_or_async(ref, handler)


def _sync_or_async(ref: str, handler: ResourceEventHandler) -> ResourceEventHandler:
    """``handler``, if its event methods are all ``def`` or all ``async def``."""
    try:
        is_async_handler(handler)
    except ValueError as exc:
        raise HandlerLoadError(f"handler {ref!r}: {exc}") from None
    return handler


def load_handlers(references: Iterable[str], context: HandlerContext) -> list[LoadedHandler]:
    """Load every ``--handler`` value, in order; a handler named twice is an error.

    Names must be unique because they key the dispatcher's ``resync_periods``, logs and
    metrics; the references are all checked before any handler is constructed.
    """
    specs = [parse_handler_spec(reference) for reference in references]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise HandlerLoadError(f"handler {spec.name!r} is given more than once")
        seen.add(spec.name)
    return [
        LoadedHandler(spec.name, load_handler(spec.reference, context), spec.resync_period)
        for spec in specs
    ]


def resync_periods(handlers: Iterable[LoadedHandler]) -> dict[str, float]:
    """``{handler name: seconds}`` for the handlers that resync: the dispatcher's input."""
    return {h.name: h.resync_period for h in handlers if h.resync_period is not None}


def make_workqueue_factory(
    metrics: MetricsProvider | None = None,
    *,
    rate_limiter_factory: Callable[[], RateLimiter[str]] | None = None,
    clock: Clock | None = None,
    priority: bool = True,
) -> WorkqueueFactory:
    """A :data:`WorkqueueFactory` for :class:`HandlerContext`.

    Each queue gets a fresh limiter from ``rate_limiter_factory`` (default: client-go's
    default controller rate limiter) and reports to ``metrics`` (e.g. a
    :class:`common.prometheus_workqueue.PrometheusMetricsProvider`) under its name. Queues are
    :class:`~common.priority_queue.PriorityQueue`, so a controller's initial list, takeovers
    and resyncs wait behind fresh events (controller-runtime's default since v0.23);
    ``priority=False`` makes FIFO queues (controller-runtime's ``UsePriorityQueue: false``).
    """

    def new_queue(name: str) -> RateLimitingQueue[str]:
        limiter = rate_limiter_factory() if rate_limiter_factory is not None else None
        if priority:
            return PriorityQueue[str](limiter, name=name, metrics=metrics, clock=clock)
        return RateLimitingQueue[str](limiter, name=name, metrics=metrics, clock=clock)

    return new_queue


def start_handlers(handlers: Iterable[ResourceEventHandler]) -> None:
    """Call ``start()`` on each handler that has one, in order."""
    for handler in handlers:
        if isinstance(handler, Startable):
            handler.start()


def stop_handlers(handlers: Sequence[ResourceEventHandler], timeout: float | None = None) -> bool:
    """Call ``stop(timeout)`` on each handler that has one, in reverse order, within ``timeout``.

    Returns ``False`` if a handler reported (by returning ``False``) that it did not stop in
    time. Every handler is asked even when an earlier one ran out the clock.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    all_stopped = True
    for handler in reversed(handlers):
        if not isinstance(handler, Stoppable):
            continue
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if handler.stop(remaining) is False:
            all_stopped = False
    return all_stopped


def _missing_methods(obj: object) -> list[str]:
    """The handler methods ``obj`` lacks, for an error message: what makes
    ``isinstance(obj, ResourceEventHandler)`` false, one method at a time."""
    return [method for method in _HANDLER_METHODS if getattr(obj, method, None) is None]


def _check_takes_context(ref: str, factory: Callable[..., object]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature: just try the call
        return
    try:
        signature.bind(object())
    except TypeError:
        raise HandlerLoadError(
            f"handler factory {ref!r} must take one argument (the HandlerContext), "
            f"but its signature is {signature}"
        ) from None


def _load(ref: str) -> Any:
    """The object ``ref`` names; :class:`HandlerLoadError` (with the user's traceback when
    their module failed) when it cannot be imported."""
    try:
        return load_plugin(ref)
    except PluginError as exc:
        raise HandlerLoadError(
            f"handler {ref!r}: {_one_line(exc)}", user_traceback=exc.user_traceback
        ) from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
