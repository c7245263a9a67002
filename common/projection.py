"""Projections: the part of each object a processor group keeps (``--project``).

``full`` keeps the object as it is. ``metadata`` keeps what a ``PartialObjectMetadata``
informer keeps (``apiVersion``, ``kind``, ``metadata``) minus ``metadata.managedFields``: the
server-side-apply bookkeeping is often the largest part of the metadata and nothing routes on it.
A list of JSON paths (``spec.nodeName,status.phase,metadata.labels``, optionally ``$.``-prefixed,
with bracketed quoted keys ``metadata.annotations["example.com/x"]`` and ``[*]`` for every list
element, ``spec.containers[*].image``) keeps those subtrees plus, always, the identity fields:
``apiVersion``, ``kind``, ``metadata.name``, ``metadata.namespace``, ``metadata.resourceVersion``
and ``metadata.uid``, because the cache key, the version checks that drop stale deltas and the
uid checks that tell a re-created object apart need them whatever the user asked for.

A path that is missing from an object is left out (never written as ``null``); ``[*]`` on a
value that is not a list leaves it out too, and keeps list elements it cannot descend into as
``{}`` so positions line up with the original list. The projected object is a new dict and new
containers along every projected path; the kept leaves (a whole ``metadata.labels`` mapping, a
container list kept as a whole) are the input's own objects, not copies: the input is never
mutated, and both must be treated as read-only, like every object an informer cache hands out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["IDENTITY_PATHS", "Projection", "ProjectionError"]


class ProjectionError(ValueError):
    """A ``--project`` text that is not ``full``, ``metadata`` or a list of paths; the message
    is one line that quotes the text and names the mistake."""


class _Star:
    """The ``[*]`` segment (a distinct object, so a key spelled ``[*]`` stays a key)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "[*]"


STAR: Final = _Star()
Segment = str | _Star

_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_\-/]+")
"""Keys written without brackets; any other key (``example.com/x``) needs ``["..."]``."""

IDENTITY_PATHS: Final[tuple[tuple[str, ...], ...]] = (
    ("apiVersion",),
    ("kind",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "resourceVersion"),
    ("metadata", "uid"),
)
"""What every path projection keeps: the cache key and the version and uid checks need it."""


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _segment_text(seg: Segment, first: bool) -> str:
    if isinstance(seg, _Star):
        return "[*]"
    if _PLAIN_KEY.fullmatch(seg):
        return seg if first else "." + seg
    escaped = seg.replace("\\", "\\\\").replace('"', '\\"')
    return f'["{escaped}"]'


def _path_text(path: tuple[Segment, ...]) -> str:
    return "".join(_segment_text(seg, i == 0) for i, seg in enumerate(path))


class _PathParser:
    def __init__(self, whole: str, text: str) -> None:
        self.whole = whole
        self.text = text
        self.i = 0

    def fail(self, why: str) -> ProjectionError:
        return ProjectionError(f"projection {_q(self.whole)}: path {_q(self.text)}: {why}")

    def parse(self) -> tuple[Segment, ...]:
        text = self.text
        if text.startswith("$"):
            self.i = 1
            if text[1:2] == ".":
                self.i = 2
            elif text[1:2] != "[":
                raise self.fail('"$" must be followed by "." or "["')
        segments: list[Segment] = []
        expect_key = True  # a plain key may follow: at the start and after "."
        while self.i < len(text):
            ch = text[self.i]
            if ch == "[":
                segments.append(self.bracket())
                expect_key = False
            elif ch == ".":
                if expect_key:
                    raise self.fail(f"empty key at position {self.i}")
                self.i += 1
                expect_key = True
                if self.i == len(text):
                    raise self.fail('ends with "."')
            elif expect_key:
                m = _PLAIN_KEY.match(text, self.i)
                if m is None:
                    raise self.fail(
                        f"unexpected {_q(ch)} at position {self.i} "
                        '(quote such keys: ["example.com/x"])'
                    )
                segments.append(m.group())
                self.i = m.end()
                expect_key = False
            else:
                raise self.fail(f'expected ".", "[" or the end after a key, found {_q(ch)}')
        if not segments:
            raise self.fail("no key")
        return tuple(segments)

    def bracket(self) -> Segment:
        text = self.text
        start = self.i
        if text.startswith("[*]", start):
            self.i += 3
            return STAR
        quote = text[start + 1 : start + 2]
        if quote not in ('"', "'"):
            raise self.fail(f'"[" at position {start} must open ["key"], [\'key\'] or [*]')
        out: list[str] = []
        i = start + 2
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                if text[i + 1 : i + 2] != "]":
                    raise self.fail(f'expected "]" after the quoted key at position {i + 1}')
                self.i = i + 2
                if not out:
                    raise self.fail(f"empty quoted key at position {start}")
                return "".join(out)
            out.append(ch)
            i += 1
        raise self.fail(f"unclosed quoted key at position {start}")


def _split_paths(text: str) -> list[str]:
    """Split on commas outside quoted keys."""
    parts: list[str] = []
    start = 0
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == ",":
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


_Trie = dict[Segment, "_Trie | None"]
"""A node of the path tree: each child is a subtree (``None``: keep it whole)."""


def _insert(trie: _Trie, path: tuple[Segment, ...]) -> None:
    node = trie
    for i, seg in enumerate(path):
        last = i == len(path) - 1
        if seg in node and node[seg] is None:
            return  # an ancestor is already kept whole
        if last:
            node[seg] = None
            return
        child = node.get(seg)
        if child is None:
            child = {}
            node[seg] = child
        node = child


_MISSING: Final = object()


def _project_mapping(value: Mapping[str, Any], node: _Trie) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for seg, child in node.items():
        if isinstance(seg, _Star) or seg not in value:
            continue
        kept = value[seg] if child is None else _project(value[seg], child)
        if kept is not _MISSING:
            out[seg] = kept
    return out


def _project(value: Any, node: _Trie) -> Any:
    """``value`` cut down to ``node``; ``_MISSING`` when nothing of it is selected."""
    if isinstance(value, dict):
        return _project_mapping(value, node) or _MISSING
    if isinstance(value, list) and STAR in node:
        child = node[STAR]
        if child is None:
            return value
        items = []
        for item in value:
            kept = _project(item, child)
            items.append({} if kept is _MISSING else kept)
        return items
    return _MISSING


class Projection:
    """A parsed ``--project`` text; :meth:`apply` cuts objects down to it."""

    __slots__ = ("_mode", "_paths", "_trie")

    def __init__(self, mode: str, paths: tuple[tuple[Segment, ...], ...] = ()) -> None:
        self._mode = mode
        self._paths = paths
        self._trie: _Trie = {}
        for path in (*IDENTITY_PATHS, *paths):
            _insert(self._trie, path)

    @classmethod
    def parse(cls, text: str) -> Projection:
        """``full``, ``metadata`` or comma-separated paths; ``ProjectionError`` (one line)
        otherwise."""
        stripped = text.strip()
        if stripped in ("full", "metadata"):
            return cls(stripped)
        if not stripped:
            raise ProjectionError(
                'projection "": empty; expected full, metadata or comma-separated paths '
                "(e.g. spec.nodeName,status.phase)"
            )
        paths: set[tuple[Segment, ...]] = set()
        for raw in _split_paths(stripped):
            part = raw.strip()
            if not part:
                raise ProjectionError(f"projection {_q(text)}: empty path between commas")
            paths.add(_PathParser(text, part).parse())
        return cls("paths", tuple(sorted(paths, key=_path_text)))

    @property
    def is_full(self) -> bool:
        """True for ``full``: callers skip :meth:`apply` (it would return the object as is)."""
        return self._mode == "full"

    @property
    def is_metadata(self) -> bool:
        return self._mode == "metadata"

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths asked for, canonical and sorted (empty for ``full`` and ``metadata``);
        the identity fields are kept as well but not listed."""
        return tuple(_path_text(p) for p in self._paths)

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` cut down to the projection: a new dict (``full``: ``obj`` itself)."""
        if self._mode == "full":
            return obj
        if self._mode == "metadata":
            out: dict[str, Any] = {}
            if "apiVersion" in obj:
                out["apiVersion"] = obj["apiVersion"]
            if "kind" in obj:
                out["kind"] = obj["kind"]
            meta = obj.get("metadata")
            if isinstance(meta, dict):
                out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
            return out
        return _project_mapping(obj, self._trie)

    def __str__(self) -> str:
        """The canonical text: ``full``, ``metadata`` or the sorted canonical paths."""
        return self._mode if self._mode != "paths" else ",".join(self.paths)

    def __repr__(self) -> str:
        return f"Projection.parse({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Projection) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(("projection", str(self)))
