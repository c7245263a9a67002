"""The metric names a PromQL expression reads, for checking a dashboard or a rules file against
what Prometheus actually scraped (a typo in a name is otherwise an empty panel or an alert that
never fires, with no error anywhere).

A small tokenizer, not a PromQL parser: it drops what cannot name a metric (strings, label
matchers in ``{...}``, ranges and subqueries in ``[...]``, numbers, Grafana's ``$variables``,
the label lists after ``by``/``without``/``on``/``ignoring``/``group_left``/``group_right``) and
keeps every identifier that is neither a function call, an aggregation operator nor a keyword.
That covers ``name{...}``, ``name[5m]`` and a bare ``name``, which is how metrics appear.
"""

from __future__ import annotations

import re

__all__ = ["metric_names"]

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<variable>\$\{[^}]*\}|\$\w+)
    | (?P<number>(?:0x[0-9a-fA-F]+|\d[\w.]*(?:[eE][+-]?\d+)?))
    | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
    | (?P<open>[({\[])
    | (?P<close>[)}\]])
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_LABEL_LISTS = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right"))
_KEYWORDS = _LABEL_LISTS | {"and", "or", "unless", "bool", "offset"}
_AGGREGATIONS = frozenset((
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile", "limitk", "limit_ratio",
))  # fmt: skip


def _tokens(expr: str) -> list[tuple[str, str]]:
    """(kind, text) pairs without whitespace; strings, variables and numbers kept as kinds."""
    found = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            found.append((kind, match.group()))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (``up`` included; ``ALERTS`` too, if named)."""
    tokens = _tokens(expr)
    names: set[str] = set()
    depth = {"{": 0, "[": 0}
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        index += 1
        if kind == "open" and text in depth:
            depth[text] += 1
            continue
        if kind == "close" and text in "}]":
            opener = "{" if text == "}" else "["
            depth[opener] = max(0, depth[opener] - 1)
            continue
        if depth["{"] or depth["["] or kind != "ident":
            continue
        if text in _LABEL_LISTS:
            if following == ("open", "("):  # the label names up to the closing parenthesis
                while index < len(tokens) and tokens[index] != ("close", ")"):
                    index += 1
                index += 1
            continue
        if text in _KEYWORDS or text.lower() in ("inf", "nan"):  # Inf, NaN in any case
            continue
        if following == ("open", "("):  # a function or an aggregation's argument list
            continue
        if text in _AGGREGATIONS and following[1] in ("by", "without"):
            continue
        names.add(text)
    return names
