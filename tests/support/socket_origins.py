"""Where each open socket of the test process was created, to name the code behind a leak.

A socket left in a reference cycle is only noticed when the collector frees it, long after the
code that opened it ran; the ResourceWarning then names the socket's addresses, not its owner.
:func:`install` makes every socket remember the call stack that created it (file, line and
function of a few frames: cheap enough to stay on for the whole suite) until it is closed, and
:func:`origin_of` tells it for the socket a warning is about.
"""

from __future__ import annotations

import socket
import sys
from types import FrameType
from typing import Any

__all__ = ["install", "origin_of"]

_FRAMES = 14
_origins: dict[int, tuple[tuple[str, int, str], ...]] = {}


def install() -> None:
    """Record the creating stack of every socket made from now on (idempotent)."""
    if getattr(socket.socket.__init__, "records_origin", False):
        return
    original_init = socket.socket.__init__
    original_close = socket.socket._real_close  # type: ignore[attr-defined]

    def recording_init(self: socket.socket, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        frames: list[tuple[str, int, str]] = []
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and len(frames) < _FRAMES:
            code = frame.f_code
            frames.append((code.co_filename, frame.f_lineno, code.co_name))
            frame = frame.f_back
        _origins[id(self)] = tuple(frames)

    def forgetting_close(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
        _origins.pop(id(self), None)
        return original_close(self, *args, **kwargs)

    recording_init.records_origin = True  # type: ignore[attr-defined]
    socket.socket.__init__ = recording_init  # type: ignore[method-assign]
    socket.socket._real_close = forgetting_close  # type: ignore[attr-defined]


def origin_of(sock: object) -> str | None:
    """The creating stack of ``sock`` (most recent call first), if it was recorded."""
    frames = _origins.get(id(sock)) if isinstance(sock, socket.socket) else None
    if frames is None:
        return None
    return "\n".join(f"    {name} ({path}:{line})" for path, line, name in frames)
