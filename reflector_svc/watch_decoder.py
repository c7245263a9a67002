"""Watch framing and decoding: a byte stream into lines, lines into typed events.

Pure (no socket): :class:`~reflector_svc.watch_stream.WatchStream` feeds it what each network
read returned, and the fuzz tests feed it hostile bytes.

Why a bad line ends the stream rather than being skipped: see :mod:`reflector_svc.api_errors`
(:class:`~reflector_svc.api_errors.MalformedWatchEventError`). Why the framer never holds
more than the line limit: a server (or a proxy) sending one endless line must cost bounded
memory, and the over-long line is still reported in its place, in order with the others.
"""

from __future__ import annotations

from typing import Final

import orjson

from reflector_svc.api_errors import (
    EXCERPT_BYTES,
    ApiStatusError,
    KubeError,
    MalformedWatchEventError,
    error_from_status,
)
from reflector_svc.watch_events import WatchEvent

__all__ = ["DEFAULT_MAX_LINE_BYTES", "LineFramer", "OverlongLine", "WatchDecoder"]

DEFAULT_MAX_LINE_BYTES: Final = 16 << 20
"""Longest watch line accepted (the apiserver's own request limit is ~3 MiB per object)."""

_EVENT_TYPES: Final = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))


class OverlongLine(bytes):
    """Stands, in a framer's output, for a line longer than the limit: only its first bytes
    (at most 200) are kept, so that it is reported where it was, in order with the others."""

    __slots__ = ()


class LineFramer:
    """Splits a byte stream into lines without ever holding more than ``max_line`` bytes of an
    unfinished line: an over-long line comes out once, in its place, as an
    :class:`OverlongLine`, and the rest of it is skipped up to its newline."""

    __slots__ = ("_max", "_parts", "_size", "_skipping")

    def __init__(self, max_line: int) -> None:
        self._max = max_line
        self._parts: list[bytes] = []
        self._size = 0
        self._skipping = False

    @property
    def pending(self) -> int:
        """Bytes of the unfinished line held right now."""
        return self._size

    def feed(self, data: bytes) -> list[bytes]:
        """Complete lines found in ``data`` (without their ``\\n``), in order."""
        pieces = data.split(b"\n")
        tail = pieces.pop()
        if pieces:
            if self._skipping:
                self._skipping = False
                pieces[0] = b""
            elif self._parts:
                self._parts.append(pieces[0])
                pieces[0] = b"".join(self._parts)
                self._parts = []
                self._size = 0
            if len(data) > self._max or len(pieces[0]) > self._max:
                limit = self._max
                pieces = [
                    OverlongLine(line[:EXCERPT_BYTES]) if len(line) > limit else line
                    for line in pieces
                ]
        if tail and not self._skipping:
            if self._size + len(tail) > self._max:
                # Too long before its end arrived: it comes out now, after the lines before it.
                start = self._parts[0] if self._parts else tail
                pieces.append(OverlongLine(start[:EXCERPT_BYTES]))
                self._parts = []
                self._size = 0
                self._skipping = True
            else:
                self._parts.append(tail)
                self._size += len(tail)
        return pieces


class WatchDecoder:
    """Turns the complete lines of one watch stream into :class:`WatchEvent` s.

    ``watch_list`` says whether the stream was asked for its initial events, which is how an
    ERROR event's 400/422 is recognised as "no watch-list here". Holds no state between lines:
    the framing is :class:`LineFramer`'s.
    """

    __slots__ = ("max_line_bytes", "watch_list")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, watch_list: bool) -> None:
        self.max_line_bytes = max_line_bytes
        self.watch_list = watch_list

    def parse_lines(self, lines: list[bytes]) -> tuple[list[WatchEvent], KubeError | None]:
        """Events of complete lines, stopping at an ERROR event or a bad line (the error is
        returned, not raised, so the events before it are delivered first)."""
        events: list[WatchEvent] = []
        parse = self.parse
        for line in lines:
            try:
                event = parse(line)
            except (ApiStatusError, MalformedWatchEventError) as error:
                return events, error
            if event is not None:
                events.append(event)
        return events, None

    def parse(self, line: bytes) -> WatchEvent | None:
        """The event of one line; ``None`` for an empty line; raises the typed error of an
        ERROR event, or :class:`MalformedWatchEventError`."""
        if not line:
            return None
        if type(line) is OverlongLine:
            detail = f"line longer than {self.max_line_bytes} bytes"
            raise MalformedWatchEventError("line_too_long", detail, line, whole=False)
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise MalformedWatchEventError("invalid_json", f"invalid JSON: {exc}", line) from None
        if type(doc) is not dict:
            raise MalformedWatchEventError("not_an_object", "event is not a JSON object", line)
        etype = doc.get("type")
        obj = doc.get("object")
        if type(etype) is str and etype in _EVENT_TYPES:  # a list or dict is unhashable
            if type(obj) is not dict or type(obj.get("metadata")) is not dict:
                detail = f"{etype} event without an object with metadata"
                raise MalformedWatchEventError("no_object", detail, line)
            return WatchEvent(etype, obj)
        if etype == "ERROR":
            if isinstance(obj, dict):
                raise error_from_status(500, obj, watch_list_requested=self.watch_list)
            raise ApiStatusError(500, "InternalError", f"watch ERROR event without a Status: {obj}")
        detail = f"unknown event type {str(etype)[:40]!r}"
        raise MalformedWatchEventError("unknown_type", detail, line)
