"""Per-handler resync periods: the one rule for what a period may be.

A handler with a resync period gets ``on_update(obj, obj)`` for every object of the local
stores, once per period (reference 5.3/5.4; :mod:`processor_svc.dispatch` runs it). Periods come
from ``--handler mod:attr@30s`` (:mod:`processor_svc.handlers`) or from Python
(``HandlerDispatcher(resync_periods=...)``); both go through :func:`checked_resync_period`, so
the command line and the Python API accept and refuse the same periods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

__all__ = [
    "MIN_RESYNC_PERIOD",
    "ResyncPeriodError",
    "checked_resync_period",
    "checked_resync_periods",
]

MIN_RESYNC_PERIOD: Final = 1.0
"""client-go's minimumResyncPeriod, in seconds: a resync period is 0 (none) or at least this.

One rule for every way in (:func:`checked_resync_period`): a shorter period is *refused*, by
``--handler mod:attr@0.5s`` (a one-line error at startup) and by :class:`HandlerDispatcher`
alike. client-go raises it to the minimum with a warning instead; refusing means a typo such
as ``@500ms`` can never run at a period nobody asked for, with the warning lost in the logs."""


class ResyncPeriodError(ValueError):
    """A resync period that is negative, or between 0 and :data:`MIN_RESYNC_PERIOD`."""


def checked_resync_period(period: float) -> float | None:
    """``period`` seconds as a resync period: ``None`` for 0 (no resync), else itself.

    Raises :class:`ResyncPeriodError` for a negative period or one below
    :data:`MIN_RESYNC_PERIOD` (the one place that rule is decided)."""
    if not period >= 0:
        raise ResyncPeriodError(f"resync period must be >= 0, got {period!r}")
    if period == 0:
        return None
    if period < MIN_RESYNC_PERIOD:
        raise ResyncPeriodError(
            f"resync period {period!r} s is below the minimum of {MIN_RESYNC_PERIOD:g}s "
            "(0: no resync)"
        )
    return float(period)


def checked_resync_periods(names: Sequence[str], periods: Mapping[str, float]) -> dict[str, float]:
    """``periods`` (handler name -> seconds) checked against the handlers ``names``: those that
    resync, as floats. Raises ``ValueError`` for an unknown name and
    :class:`ResyncPeriodError` (naming the handler) for a period :func:`checked_resync_period`
    refuses."""
    unknown = sorted(set(periods) - set(names))
    if unknown:
        raise ValueError(f"resync periods for unknown handlers: {unknown}")
    result: dict[str, float] = {}
    for name, requested in periods.items():
        try:
            period = checked_resync_period(requested)
        except ResyncPeriodError as err:
            raise ResyncPeriodError(f"handler {name!r}: {err}") from None
        if period is not None:
            result[name] = period
    return result
