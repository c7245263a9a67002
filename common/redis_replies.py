"""What redis-py hands back, as text.

A client made with ``decode_responses=False`` (the services' clients: envelopes are bytes)
returns every reply as bytes; one made with ``decode_responses=True`` (``informer-bus
status``) returns str; code that serves both decodes each reply value with :func:`as_text`.
Pure: no Redis here, only its replies.
"""

from __future__ import annotations

from typing import overload

__all__ = ["as_text"]


@overload
def as_text(value: bytes | str) -> str: ...
@overload
def as_text(value: bytes | str | None) -> str | None: ...
def as_text(value: bytes | str | None) -> str | None:
    """``value`` as str (UTF-8, as Redis stores what we write); ``None`` stays ``None`` (a
    missing hash field, a key that is not there)."""
    return value.decode() if isinstance(value, bytes) else value
