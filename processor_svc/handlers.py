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

**Lifecycle**: a handler may also have ``start()`` and ``stop(timeout)``. The processor calls
:func:`start_handlers` once, before the first shard is attached, and :func:`stop_handlers` at
shutdown after the last event was delivered, in reverse order (a Controller's workers run only
between the two).
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from common.handlers import ResourceEventHandler
from common.plugins import PluginError, load_plugin
from common.rate_limiters import Clock, RateLimiter
from common.workqueue import MetricsProvider, RateLimitingQueue
from processor_svc.lister import ShardedLister

__all__ = [
    "MIN_RESYNC_PERIOD",
    "HandlerContext",
    "HandlerLoadError",
    "HandlerSpec",
    "LoadedHandler",
    "WorkqueueFactory",
    "load_handler",
    "load_handlers",
    "make_workqueue_factory",
    "parse_duration",
    "parse_handler_spec",
    "resync_periods",
    "start_handlers",
    "stop_handlers",
]

MIN_RESYNC_PERIOD = 1.0
"""Seconds; shorter resync periods are refused (client-go's ``minimumResyncPeriod``)."""

_HANDLER_METHODS = ("on_add", "on_update", "on_delete")

WorkqueueFactory = Callable[[str], RateLimitingQueue[str]]
"""Makes a named rate-limiting queue of keys; the name is the ``name`` label of its metrics."""


class HandlerLoadError(PluginError):
    """A handler reference that cannot become a handler; the message is one line for a human."""


@dataclass(frozen=True)
class HandlerContext:
    """What a handler factory receives: everything a handler needs and cannot import.

    ``lister`` is the read-only view over the owned shards (objects are shared: never mutate
    them). ``workqueue_factory(name)`` makes a rate-limiting queue whose metrics carry ``name``.
    ``settings`` is the processor's settings object; ``resource`` the resource id (``pods``,
    ``deployments.apps``) the handler is loaded for.
    """

    lister: ShardedLister
    workqueue_factory: WorkqueueFactory
    logger: logging.Logger
    settings: object
    resource: str


@dataclass(frozen=True)
class HandlerSpec:
    """A parsed ``module:attr[@period]``: what to load and how often to resync it."""

    reference: str
    resync_period: float | None = None

    @property
    def name(self) -> str:
        """The handler's name everywhere else: its reference without the resync suffix."""
        return self.reference


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
    """Split ``module:attr@30s`` into the reference and the resync period (``None``: no resync)."""
    reference, sep, period_text = text.strip().rpartition("@")
    if not sep:
        return HandlerSpec(text.strip())
    try:
        period = parse_duration(period_text)
    except ValueError as exc:
        raise HandlerLoadError(f"handler {text.strip()!r}: bad resync period: {exc}") from None
    if period == 0:
        return HandlerSpec(reference)
    if period < MIN_RESYNC_PERIOD:
        raise HandlerLoadError(
            f"handler {text.strip()!r}: resync period {period_text!r} is below the minimum "
            f"of {MIN_RESYNC_PERIOD:g}s (use @0 for no resync)"
        )
    return HandlerSpec(reference, period)


def load_handler(reference: str, context: HandlerContext) -> ResourceEventHandler:
    """Load the handler ``reference`` names (a resync suffix is accepted and ignored here).

    Raises :class:`HandlerLoadError` with a one-line message when the reference cannot be
    imported, names neither a handler nor a callable, names a factory that does not take a
    context, or names a factory that raises or returns something that is not a handler.
    """
    ref = parse_handler_spec(reference).reference
    try:
        target: Any = load_plugin(ref)
    except PluginError as exc:
        raise HandlerLoadError(f"handler {ref!r}: {_one_line(exc)}") from None
    if not isinstance(target, type) and _is_handler(target):
        return cast(ResourceEventHandler, target)
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
            f"handler factory {ref!r} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    missing = [
        method for method in _HANDLER_METHODS if not callable(getattr(handler, method, None))
    ]
    if missing:
        raise HandlerLoadError(
            f"handler factory {ref!r} returned a {type(handler).__name__} without "
            f"{', '.join(missing)}"
        )
    return cast(ResourceEventHandler, handler)


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
) -> WorkqueueFactory:
    """A :data:`WorkqueueFactory` for :class:`HandlerContext`.

    Each queue gets a fresh limiter from ``rate_limiter_factory`` (default: client-go's
    default controller rate limiter) and reports to ``metrics`` (e.g. a
    :class:`common.prometheus_workqueue.PrometheusMetricsProvider`) under its name.
    """

    def new_queue(name: str) -> RateLimitingQueue[str]:
        limiter = rate_limiter_factory() if rate_limiter_factory is not None else None
        return RateLimitingQueue[str](limiter, name=name, metrics=metrics, clock=clock)

    return new_queue


def start_handlers(handlers: Iterable[ResourceEventHandler]) -> None:
    """Call ``start()`` on each handler that has one, in order."""
    for handler in handlers:
        start = getattr(handler, "start", None)
        if callable(start):
            start()


def stop_handlers(handlers: Sequence[ResourceEventHandler], timeout: float | None = None) -> bool:
    """Call ``stop(timeout)`` on each handler that has one, in reverse order, within ``timeout``.

    Returns ``False`` if a handler reported (by returning ``False``) that it did not stop in
    time. Every handler is asked even when an earlier one ran out the clock.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    all_stopped = True
    for handler in reversed(handlers):
        stop = getattr(handler, "stop", None)
        if not callable(stop):
            continue
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if stop(remaining) is False:
            all_stopped = False
    return all_stopped


def _is_handler(obj: object) -> bool:
    return all(callable(getattr(obj, method, None)) for method in _HANDLER_METHODS)


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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
