"""The simulator's bad watch lines (``apiserver_sim.faults.BAD_LINES``) and the
reason the reflector's decoder must give for each (``MalformedWatchEventError.reason``, the
``reason`` label of ``bad_watch_lines_total``)."""

from __future__ import annotations

from typing import Final

__all__ = ["BAD_LINE_REASONS"]

BAD_LINE_REASONS: Final = {
    "truncated": "invalid_json",
    "garbage": "invalid_json",
    "not_an_object": "not_an_object",
    "no_object": "no_object",
    "object_not_an_object": "no_object",
    "unknown_type": "unknown_type",
}
