"""Reading a group's members from outside the heartbeat scripts: who is live, by Redis's clock.

``ib:{R}:members`` maps member id -> heartbeat deadline in milliseconds on Redis's clock
(:mod:`.membership_scripts` writes it). A member is live while its deadline is ahead of Redis's
``TIME``: the scripts judge it so, and so do the readers that cannot run scripts (``status``,
a durable subscriber checking that no processor uses its group), through this module. Pure:
the caller's pipeline sends the commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.redis_replies import as_text

__all__ = [
    "decode_deadlines",
    "is_live",
    "queue_deadlines",
    "queue_live_count",
    "redis_time_ms",
]


def redis_time_ms(reply: Sequence[Any]) -> int:
    """``TIME``'s reply (seconds, microseconds) in milliseconds: the clock of the deadlines."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def is_live(deadline_ms: float, now_ms: int) -> bool:
    """Whether a member whose deadline is ``deadline_ms`` is live at ``now_ms``."""
    return deadline_ms > now_ms


def queue_live_count(pipe: Any, key: str, now_ms: int) -> None:
    """Add the count of the live members of ``key`` at ``now_ms`` to ``pipe`` (``ZCOUNT``)."""
    pipe.zcount(key, f"({now_ms}", "+inf")


def queue_deadlines(pipe: Any, key: str) -> None:
    """Add the read of every member of ``key`` with its deadline to ``pipe``; decode its reply
    with :func:`decode_deadlines`."""
    pipe.zrange(key, 0, -1, withscores=True)


def decode_deadlines(reply: Sequence[Any] | None) -> list[tuple[str, float]]:
    """:func:`queue_deadlines`' reply as ``(member, deadline ms)`` pairs (``None``: no read)."""
    return [(as_text(member), float(score)) for member, score in reply or ()]
