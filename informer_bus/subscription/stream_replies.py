"""Stream replies as redis-py returns them (bytes or text, RESP2 lists or RESP3 dicts), read
one way by both subscriptions and both clients (blocking and asyncio)."""

from __future__ import annotations

from typing import Any

from common.redis_replies import as_text as text

__all__ = ["Batches", "entry_order", "stream_batches", "text"]

Batches = list[tuple[str, list[tuple[bytes, Any]]]]
"""``[(stream, [(entry id, fields), ...]), ...]``: what one read returned, per stream."""


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry ID (``MS-SEQ``, or ``MS``) as a sortable pair."""
    ms, _, seq = text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def stream_batches(reply: Any) -> Batches:
    """An XREAD or XREADGROUP reply as :data:`Batches` (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3 wraps each stream's entries in one more list
        return [
            (text(stream), list(wrapped[0]) if wrapped else []) for stream, wrapped in reply.items()
        ]
    return [(text(stream), list(entries)) for stream, entries in reply]
