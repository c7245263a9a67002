"""Label and field selectors with the apiserver's syntax and matching rules.

Parsing errors surface as ``400 BadRequest`` like a real server so reflector tests can see
how a bad selector fails; matching reads the labels and field values pre-extracted on each
stored revision, never the full object.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from informer_bus.apiserver_sim.status import ApiError, bad_request

__all__ = ["FieldSelector", "LabelSelector"]

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_NOT_EXISTS = re.compile(rf"^\s*!\s*({_KEY})\s*$")
_EXISTS = re.compile(rf"^\s*({_KEY})\s*$")
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^()]*)\)\s*$")
_COMPARE = re.compile(rf"^\s*({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")

Requirement = Callable[[Mapping[str, str]], bool]


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( )``."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _numeric(key: str, op: str, value: str) -> Requirement:
    try:
        bound = int(value)
    except ValueError:
        raise bad_request(
            f"unable to parse requirement: for '{op}', '{value}' must be an integer"
        ) from None

    def check(labels: Mapping[str, str]) -> bool:
        have = _int(labels.get(key))
        if have is None:
            return False
        return have > bound if op == ">" else have < bound

    return check


def _in_set(key: str, values: Collection[str], negate: bool) -> Requirement:
    if negate:
        return lambda labels: labels.get(key) not in values
    return lambda labels: labels.get(key) in values


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``labelSelector``: ``=``/``==``/``!=``, ``in``, ``notin``, ``key``, ``!key``,
    ``>``/``<``; requirements are ANDed."""

    text: str
    requirements: tuple[Requirement, ...]

    @property
    def empty(self) -> bool:
        return not self.requirements

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        text = (text or "").strip()
        if not text:
            return cls("", ())
        reqs: list[Requirement] = []
        for part in _split_top_level(text):
            reqs.append(_parse_requirement(part, text))
        return cls(text, tuple(reqs))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(req(labels) for req in self.requirements)


def _parse_requirement(part: str, text: str) -> Requirement:
    if m := _NOT_EXISTS.match(part):
        key = m.group(1)
        return lambda labels: key not in labels
    if m := _SET.match(part):
        key, op, raw = m.group(1), m.group(2), m.group(3)
        values = frozenset(v.strip() for v in raw.split(","))
        if not all(_VALUE_ONLY.match(v) for v in values) or values == {""}:
            raise _bad_label_selector(text, f"invalid values in set for {key!r}")
        return _in_set(key, values, negate=op == "notin")
    if m := _COMPARE.match(part):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op in (">", "<"):
            return _numeric(key, op, value)
        return _eq(key, value, negate=op == "!=")
    if m := _EXISTS.match(part):
        key = m.group(1)
        return lambda labels: key in labels
    raise _bad_label_selector(text, f"unable to parse requirement {part.strip()!r}")


def _eq(key: str, value: str, negate: bool) -> Requirement:
    if negate:
        return lambda labels: labels.get(key) != value
    return lambda labels: labels.get(key) == value


def _bad_label_selector(text: str, why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why} in labelSelector {text!r}")


@dataclass(frozen=True)
class FieldSelector:
    """A parsed ``fieldSelector``: ``field=value``, ``field==value``, ``field!=value``, ANDed,
    restricted to the labels the resource type supports."""

    text: str
    terms: tuple[tuple[str, bool, str], ...]

    @property
    def empty(self) -> bool:
        return not self.terms

    @classmethod
    def parse(cls, text: str | None, supported: Collection[str]) -> FieldSelector:
        text = (text or "").strip()
        if not text:
            return cls("", ())
        terms: list[tuple[str, bool, str]] = []
        for part in text.split(","):
            for op in ("!=", "==", "="):
                if op in part:
                    name, _, value = part.partition(op)
                    name, value = name.strip(), value.strip()
                    break
            else:
                raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
            if name not in supported:
                raise bad_request(f"field label not supported: {name}")
            terms.append((name, op == "!=", value))
        return cls(text, tuple(terms))

    def matches(self, values: Mapping[str, str]) -> bool:
        return all((values.get(name, "") == want) != negate for name, negate, want in self.terms)
