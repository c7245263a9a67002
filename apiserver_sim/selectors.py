"""Label and field selectors as the simulated API server takes them on LIST, WATCH and
DELETE of a collection, written from the Kubernetes documentation, not from the product's
parser: the simulator is what the product's own selector handling is tested against.

Label selectors ("Labels and Selectors", and the grammar documented for Go's
``k8s.io/apimachinery/pkg/labels.Parse``)::

    selector    ::= requirement ( "," requirement )*      (the comma is AND; "" selects all)
    requirement ::= [ "!" ] KEY [ ( "=" | "==" | "!=" ) VALUE
                                | ( "in" | "notin" ) "(" VALUE ( "," VALUE )* ")"
                                | ( ">" | "<" ) INTEGER ]

Tokens are delimited by blanks: space, tab, ``\\r`` and ``\\n`` (the grammar's comment names
only space and tab, but the API machinery's lexer, ``isWhitespace`` in its
``labels/selector.go``, skips all four; any other character, a no-break space too, is part of a
word). A VALUE may be empty (``x in (foo,,baz),y,z notin ()`` is valid). ``key`` selects
objects that have the label, ``!key`` those that do not; ``!=`` and ``notin`` also select
objects without the label, ``=`` and ``in`` do not; ``>`` and ``<`` (the node selector
operators ``Gt`` and ``Lt``: one value, "interpreted as an integer", and like every value a
label value, so unsigned) select objects whose label is an integer above or below it. A KEY is
an optional prefix (a DNS subdomain: lowercase DNS labels joined by dots, 253 characters at
most) and ``/``, then a name of at most 63 characters: alphanumerics, ``-``, ``_`` and ``.``,
beginning and ending with an alphanumeric. A VALUE is empty or follows the name's rules. ``in``
and ``notin`` are operators only where an operator may stand: ``in`` is a valid key and value.

Field selectors ("Field Selectors"): ``field=value``, ``field==value`` and ``field!=value``
chained with commas (AND), on the fields the kind supports (:mod:`~apiserver_sim.field_labels`);
the term splits at its first operator, and a backslash escapes ``\\``, ``,`` and ``=`` in a
value (what the API machinery's ``fields.EscapeValue`` writes). Nothing is trimmed: ``a = b``
names the field ``a `` and the value `` b``. A term with neither field nor value (``=``,
``==``, ``!=``) selects everything: the API machinery's parser drops it (``Transform`` in its
``fields/selector.go`` skips a requirement whose field and value are both empty).

A selector the server refuses is a ``400 BadRequest`` Status whose message says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from apiserver_sim.resources import ResourceType
from apiserver_sim.status import ApiError, bad_request

__all__ = ["FieldSelector", "LabelSelector", "parse_selectors"]

# -- label keys and values ------------------------------------------------------------------

_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN: Final = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAME_RULE: Final = (
    "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)


def _key_error(key: str) -> str | None:
    """Why ``key`` is no label key (``None``: it is one)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "prefix part must be non-empty"
    if slash and len(prefix) > 253:
        return "prefix part must be no more than 253 characters"
    if slash and not _SUBDOMAIN.fullmatch(prefix):
        return (
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.fullmatch(name):
        return f"name part must {_NAME_RULE}"
    return None


def _value_error(value: str) -> str | None:
    """Why ``value`` is no label value (``None``: it is one; the empty value is)."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _NAME.fullmatch(value):
        return f"a valid label must be an empty string or {_NAME_RULE}"
    return None


_INTEGER: Final = re.compile(r"[+-]?[0-9]+")


def _integer(text: str) -> int | None:
    """``text`` as a 64-bit integer, or ``None``."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


# -- the label selector's tokens ----------------------------------------------------------------

_BLANKS: Final = " \t\r\n"
_SYMBOLS: Final = ("==", "!=", "=", "!", "(", ")", ",", ">", "<")
_WORD: Final = re.compile(r"[^ \t\r\n!=(),<>]+")
_END: Final = ""


def _tokens(text: str) -> list[str]:
    """The symbols and words of ``text``, then ``_END`` (an empty word cannot occur)."""
    tokens: list[str] = []
    at = 0
    while True:
        while at < len(text) and text[at] in _BLANKS:
            at += 1
        if at == len(text):
            tokens.append(_END)
            return tokens
        symbol = next((s for s in _SYMBOLS if text.startswith(s, at)), None)
        if symbol is None:
            word = _WORD.match(text, at)
            assert word is not None  # every other character starts a word
            symbol = word.group()
        tokens.append(symbol)
        at += len(symbol)


def _is_word(token: str) -> bool:
    return token != _END and token not in _SYMBOLS


def _shown(token: str) -> str:
    return "end of string" if token == _END else f"'{token}'"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement: ``operator`` is ``exists``, ``!``, ``=``, ``!=``, ``in``, ``notin``,
    ``>`` or ``<``; ``values`` its values (one for ``=``, ``!=``, ``>`` and ``<``)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        operator = self.operator
        if operator == "exists":
            return value is not None
        if operator == "!":
            return value is None
        if operator in ("=", "in"):
            return value is not None and value in self.values
        if operator in ("!=", "notin"):
            return value is None or value not in self.values
        number = None if value is None else _integer(value)
        if number is None:
            return False
        (bound,) = self.values
        return number > int(bound) if operator == ">" else number < int(bound)


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at]

    def take(self) -> str:
        token = self.tokens[self.at]
        self.at += token != _END
        return token

    def selector(self) -> list[Requirement]:
        requirements = [self.requirement()]
        while (token := self.take()) != _END:
            if token != ",":
                raise _unparsable(f"found {_shown(token)}, expected: ',' or 'end of string'")
            requirements.append(self.requirement())
        return requirements

    def requirement(self) -> Requirement:
        token = self.take()
        absent = token == "!"
        if absent:
            token = self.take()
        if not _is_word(token):
            raise _unparsable(f"found {_shown(token)}, expected: identifier")
        key = token
        if problem := _key_error(key):
            raise _unparsable(f'key: Invalid value: "{key}": {problem}')
        if absent or self.peek() in (_END, ","):
            return Requirement(key, "!" if absent else "exists")
        operator = self.take()
        if operator in ("=", "==", "!="):
            value = "" if self.peek() in (_END, ",") else self.value()
            return Requirement(key, "!=" if operator == "!=" else "=", frozenset((value,)))
        if operator in ("in", "notin"):
            return Requirement(key, operator, self.value_set())
        if operator in (">", "<"):
            value = self.value()
            if _integer(value) is None:
                raise _unparsable(
                    f"values[0]: Invalid value: \"{value}\": for '{operator}', the value must "
                    "be an integer"
                )
            return Requirement(key, operator, frozenset((value,)))
        raise _unparsable(
            f"found {_shown(operator)}, expected: in, notin, =, ==, !=, gt, lt, ',' or "
            "'end of string'"
        )

    def value(self) -> str:
        token = self.take()
        if not _is_word(token):
            raise _unparsable(f"found {_shown(token)}, expected: identifier")
        if problem := _value_error(token):
            raise _unparsable(f'values[0]: Invalid value: "{token}": {problem}')
        return token

    def value_set(self) -> frozenset[str]:
        token = self.take()
        if token != "(":
            raise _unparsable(f"found {_shown(token)}, expected: '('")
        values: list[str] = []
        pending: str | None = None  # the value read since the "(" or the last ","
        while True:
            token = self.take()
            if token in (",", ")"):
                values.append(pending or "")  # "()", "(a,)" and "(a,,b)" hold the empty value
                pending = None
                if token == ")":
                    return frozenset(values)
                continue
            if not _is_word(token) or pending is not None:
                raise _unparsable(f"found {_shown(token)}, expected: ',' or ')'")
            if problem := _value_error(token):
                raise _unparsable(f'values[{len(values)}]: Invalid value: "{token}": {problem}')
            pending = token


def _unparsable(why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why}")


class LabelSelector:
    """A parsed ``labelSelector``; :meth:`matches` says whether a label set is selected."""

    __slots__ = ("requirements",)

    def __init__(self, requirements: tuple[Requirement, ...]) -> None:
        self.requirements = requirements

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """The selector ``text`` (``None``, or only blanks: everything); the server's 400
        ``ApiError`` when it refuses it."""
        if text is None or not text.strip(_BLANKS):
            return cls(())
        return cls(tuple(_LabelParser(text).selector()))

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)


# -- field selectors ----------------------------------------------------------------------------

_ESCAPED: Final = frozenset("\\,=")


def _split_terms(text: str) -> list[str]:
    """``text`` split at its commas that no backslash escapes."""
    terms: list[str] = []
    start = at = 0
    while at < len(text):
        if text[at] == "\\":
            at += 2
            continue
        if text[at] == ",":
            terms.append(text[start:at])
            start = at + 1
        at += 1
    terms.append(text[start:])
    return terms


def _unescape(raw: str) -> str:
    """A field selector value without its escapes; 400 for a bare ``=`` or an unknown escape."""
    out: list[str] = []
    chars = iter(raw)
    for char in chars:
        if char == "=":
            raise bad_request(f"invalid field selector: unescaped '=' in value {raw!r}")
        if char == "\\":
            escaped = next(chars, "")
            if escaped not in _ESCAPED:
                raise bad_request(
                    f"invalid field selector: invalid escape sequence '\\{escaped}' in value "
                    f"{raw!r}"
                )
            out.append(escaped)
        else:
            out.append(char)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class FieldTerm:
    """``field=value`` (``negated``: ``field!=value``)."""

    field: str
    value: str
    negated: bool


class FieldSelector:
    """A parsed ``fieldSelector``; :meth:`matches` reads the field values of a revision."""

    __slots__ = ("terms",)

    def __init__(self, terms: tuple[FieldTerm, ...]) -> None:
        self.terms = terms

    @classmethod
    def parse(cls, text: str | None, resource: ResourceType) -> FieldSelector:
        """The selector ``text`` on ``resource`` (``None`` or empty: everything); the server's
        400 ``ApiError`` when it refuses it."""
        if not text:
            return cls(())
        terms: list[FieldTerm] = []
        for term in _split_terms(text):
            if not term:
                continue  # "a=b," is "a=b"
            split = re.search("!=|==|=", term)
            if split is None:
                raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
            field, value = term[: split.start()], _unescape(term[split.end() :])
            if not field and not value:
                continue  # "=" and "!=" select everything: the parser drops such a term
            if field not in resource.field_labels:
                raise _unsupported(field, resource)
            terms.append(FieldTerm(field, value, split.group() == "!="))
        return cls(tuple(terms))

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, values: Mapping[str, str]) -> bool:
        """``values``: the field values of an object (:meth:`ResourceType.field_values`)."""
        return all((values.get(t.field, "") == t.value) is not t.negated for t in self.terms)


def _unsupported(field: str, resource: ResourceType) -> ApiError:
    """What the server answers for a field the kind does not support: a kind with fields of
    its own words it through its own conversion; the others give the generic answer the
    "Field Selectors" page quotes."""
    if resource.has_own_field_labels or not resource.namespaced:
        return bad_request(f"field label not supported: {field}")
    return bad_request(
        f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def parse_selectors(
    resource: ResourceType, label_selector: str | None, field_selector: str | None
) -> tuple[LabelSelector, FieldSelector]:
    """Both selectors of a request on ``resource``; a 400 ``ApiError`` for a refused one."""
    return LabelSelector.parse(label_selector), FieldSelector.parse(field_selector, resource)
