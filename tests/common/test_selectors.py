"""Label and field selectors: the apiserver's grammar, validation and matching rules."""

from __future__ import annotations

import timeit
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.selectors import FieldSelector, LabelSelector, SelectorError

# -- label selector grammar ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        ("app=web", "app=web"),
        ("app==web", "app=web"),
        ("app!=web", "app!=web"),
        ("app = web", "app=web"),
        ("  app   ==   web  ", "app=web"),
        ("app=", "app="),
        ("app!=", "app!="),
        ("app in (web)", "app in (web)"),
        ("app in (web, db ,cache)", "app in (cache,db,web)"),
        ("app in(web)", "app in (web)"),
        ("app notin (web)", "app notin (web)"),
        ("app notin (web,db)", "app notin (db,web)"),
        ("app in ()", "app in ()"),
        ("app in (a,)", "app in (,a)"),
        ("tier", "tier"),
        ("!tier", "!tier"),
        ("! tier", "!tier"),
        ("replicas>3", "replicas>3"),
        ("replicas < 007", "replicas<7"),
        ("tier,app=web", "app=web,tier"),
        ("b=1,a=2,!c", "a=2,b=1,!c"),
        ("example.com/app=web", "example.com/app=web"),
        ("app=in", "app=in"),
        # "in" and "notin" are valid keys: Kubernetes' parser reads its in/notin tokens as
        # identifiers wherever a key or a value stands (k8s.io/apimachinery pkg/labels/selector.go,
        # Parser.lookahead/consume in the Values context), as operators only after a key.
        ("in=3", "in=3"),
        ("notin", "notin"),
        ("!in", "!in"),
        ("in in (in,notin)", "in in (in,notin)"),
        ("notin notin (x),in", "in,notin notin (x)"),
        # Only space, tab, "\r" and "\n" separate tokens (isWhitespace, the lexer of
        # k8s.io/apimachinery pkg/labels/selector.go).
        ("app=web\r\n,\ttier", "app=web,tier"),
        (" \r\n\t", ""),
        ("k=V.a-l_ue", "k=V.a-l_ue"),
        ("a.b-c_d=x", "a.b-c_d=x"),
    ],
)
def test_label_selector_grammar(text: str, canonical: str) -> None:
    selector = LabelSelector.parse(text)
    assert str(selector) == canonical
    assert LabelSelector.parse(str(selector)) == selector
    assert selector.empty == (canonical == "")


def test_none_is_the_empty_selector() -> None:
    assert LabelSelector.parse(None).empty
    assert LabelSelector.parse(None).matches({"any": "thing"})
    assert LabelSelector.parse("a,!b,c=d").keys == frozenset({"a", "b", "c"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app in (a", 'label selector "app in (a": unclosed "(" after "in"'),
        ("app in web", 'label selector "app in web": expected "(" after "in", found "web"'),
        ("app notin", 'label selector "app notin": expected "(" after "notin", found end of text'),
        ("app in (a b)", 'expected a value, "," or ")" in the set after "in", found "b"'),
        ("app in (a=)", 'expected a value, "," or ")" in the set after "in", found "="'),
        ("app=web,", 'expected a requirement after ",", found end of text'),
        (",app", 'expected a label key, found ","'),
        ("app=web,,x", 'expected a label key, found ","'),
        ("!", 'expected a label key after "!", found end of text'),
        ("!=x", 'expected a label key, found "!="'),
        (
            "x y",
            'expected an operator (=, ==, !=, in, notin, >, <) or "," after key "x", found "y"',
        ),
        ("a=b=c", 'expected "," or end of text after a requirement, found "="'),
        ("a=(", 'expected a value after "=", found "("'),
        ("a>x", 'for ">", the value must be an integer, found "x"'),
        ("a<", 'for "<", the value must be an integer, found end of text'),
        ("a>1_0", 'for ">", the value must be an integer, found "1_0"'),
        ("a>99999999999999999999", 'the value must be an integer, found "99999999999999999999"'),
        # A >/< value must parse with strconv.ParseInt and, like every value, be a valid label
        # value, so it has no sign (NewRequirement, k8s.io/apimachinery pkg/labels/selector.go).
        ("replicas>-1", 'for ">", the value must be an integer without a sign, found "-1"'),
        ("replicas<+5", 'for "<", the value must be an integer without a sign, found "+5"'),
        ("a>" + "0" * 63 + "1", 'invalid label value "0000'),
        ("in in", 'expected "(" after "in", found end of text'),
        ("app notin in", 'expected "(" after "notin", found "in"'),
        ("-app=x", 'invalid label key "-app": the name part must consist of alphanumeric'),
        (
            "Example.com/app=x",
            'invalid label key "Example.com/app": the prefix must be a lowercase',
        ),
        ("/app=x", "invalid label key \"/app\": the prefix before '/' is empty"),
        ("example.com/=x", 'invalid label key "example.com/": the name part is empty'),
        ("a" * 64 + "=x", "the name part is longer than 63 characters"),
        ("p" * 254 + "/a=x", "the prefix is longer than 253 characters"),
        ("app=-web", 'invalid label value "-web" for key "app": must be empty or consist of'),
        ("app=" + "v" * 64, 'for key "app": longer than 63 characters'),
        ("app in (ok,-bad)", 'invalid label value "-bad" in the set after "in"'),
        ("app=we/b", 'invalid label value "we/b" for key "app"'),
        # Any other blank is part of the key or value (pkg/labels/selector.go, isWhitespace),
        # shown escaped as Go's %q shows it.
        ("app=web\u00a0", 'invalid label value "web\\u00a0" for key "app"'),
        ("app\u2003=web", 'invalid label key "app\\u2003": the name part must'),
        ("\u00a0", 'invalid label key "\\u00a0"'),
        ("app=web\x0b,tier", 'invalid label value "web\\u000b" for key "app"'),
        ("app\x0c", 'invalid label key "app\\f"'),
    ],
)
def test_invalid_label_selectors_name_the_mistake(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        LabelSelector.parse(text)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith("label selector ")
    assert isinstance(exc.value, ValueError)


def test_a_newline_in_the_text_stays_escaped_in_the_one_line_message() -> None:
    with pytest.raises(SelectorError, match=r"^[^\n]*$"):
        LabelSelector.parse("a=b\n c")


def test_limits_are_inclusive() -> None:
    assert str(LabelSelector.parse("a" * 63 + "=" + "v" * 63))
    assert str(LabelSelector.parse("p" * 253 + "/a"))


# -- label selector matching -------------------------------------------------------------------

NONE: dict[str, str] = {}
WEB = {"app": "web"}
DB = {"app": "db"}
EMPTY_VALUE = {"app": ""}
NUMERIC = {"n": "5"}
TEXT = {"n": "five"}


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("app=web", WEB, True),
        ("app=web", DB, False),
        ("app=web", NONE, False),
        ("app=", EMPTY_VALUE, True),
        ("app=", NONE, False),
        ("app!=web", WEB, False),
        ("app!=web", DB, True),
        ("app!=web", NONE, True),  # absent labels are not equal to anything
        ("app in (web,db)", WEB, True),
        ("app in (web,db)", DB, True),
        ("app in (web)", DB, False),
        ("app in (web)", NONE, False),
        ("app in ()", EMPTY_VALUE, True),
        ("app notin (web)", WEB, False),
        ("app notin (web)", DB, True),
        ("app notin (web)", NONE, True),
        ("app", WEB, True),
        ("app", EMPTY_VALUE, True),
        ("app", NONE, False),
        ("!app", WEB, False),
        ("!app", NONE, True),
        ("n>4", NUMERIC, True),
        ("n>5", NUMERIC, False),
        ("n<6", NUMERIC, True),
        ("n<5", NUMERIC, False),
        ("n<0", {"n": "-3"}, True),  # the label's value is read with ParseInt: a sign is taken
        ("n>1", TEXT, False),
        ("n<1", TEXT, False),
        ("n<1", NONE, False),
        ("n>1", {"n": "1_000"}, False),  # Go's ParseInt refuses what Python's int() takes
        ("n>4", {"n": "+5"}, True),
        ("app=web,!tier", WEB, True),
        ("app=web,!tier", {"app": "web", "tier": "x"}, False),
        ("app=web,app!=web", WEB, False),
        ("", NONE, True),
    ],
)
def test_label_matching_truth_table(text: str, labels: dict[str, str], expected: bool) -> None:
    assert LabelSelector.parse(text).matches(labels) is expected


_keys = st.sampled_from(["a", "b", "example.com/c"])
_values = st.sampled_from(["", "x", "y", "3", "0", "12", "1x"])
_requirement = st.one_of(
    st.tuples(st.just("="), _keys, _values),
    st.tuples(st.just("=="), _keys, _values),
    st.tuples(st.just("!="), _keys, _values),
    st.tuples(st.sampled_from(["in", "notin"]), _keys, st.lists(_values, min_size=1, max_size=3)),
    st.tuples(st.sampled_from(["exists", "!"]), _keys, st.none()),
    st.tuples(st.sampled_from([">", "<"]), _keys, st.integers(0, 20)),
)
_labels = st.dictionaries(_keys, _values, max_size=3)


def _text_of(op: str, key: str, operand: object) -> str:
    if op == "exists":
        return key
    if op == "!":
        return f"!{key}"
    if op in ("in", "notin"):
        assert isinstance(operand, list)
        return f"{key} {op} ( {' , '.join(operand)} )"
    return f"{key} {op} {operand}"


def _reference(op: str, key: str, operand: object, labels: Mapping[str, str]) -> bool:
    """The rule as the Kubernetes docs state it, written as plainly as possible."""
    present = key in labels
    value = labels.get(key)
    if op in ("=", "=="):
        return present and value == operand
    if op == "!=":
        return not present or value != operand
    if op == "in":
        assert isinstance(operand, list)
        return present and value in operand
    if op == "notin":
        assert isinstance(operand, list)
        return not present or value not in operand
    if op == "exists":
        return present
    if op == "!":
        return not present
    assert isinstance(operand, int)
    if not present or value is None or not value.lstrip("-").isdigit():
        return False
    return int(value) > operand if op == ">" else int(value) < operand


@given(st.lists(_requirement, min_size=1, max_size=4), _labels)
def test_a_selector_matches_exactly_what_the_reference_predicate_says(
    requirements: list[tuple[str, str, object]], labels: dict[str, str]
) -> None:
    selector = LabelSelector.parse(", ".join(_text_of(*req) for req in requirements))
    expected = all(_reference(*req, labels) for req in requirements)
    assert selector.matches(labels) is expected
    # The canonical text parses to a selector that matches the same.
    assert LabelSelector.parse(str(selector)).matches(labels) is expected


@given(st.text(alphabet="ab=!,() <>in", max_size=12))
def test_any_text_parses_or_raises_a_one_line_selector_error(text: str) -> None:
    try:
        selector = LabelSelector.parse(text)
    except SelectorError as exc:
        assert "\n" not in str(exc)
    else:
        assert LabelSelector.parse(str(selector)) == selector


def test_matching_is_fast() -> None:
    """The docstring's figure: a 3-requirement selector on a 6-label dict (0.25 µs measured;
    the bound leaves room for a loaded CI machine)."""
    selector = LabelSelector.parse("app=web,tier in (front,back),!canary")
    labels = {"app": "web", "tier": "front", "a": "1", "b": "2", "c": "3", "d": "4"}
    assert selector.matches(labels)
    runs = 20_000
    best = min(timeit.repeat(lambda: selector.matches(labels), number=runs, repeat=5)) / runs
    assert best < 5e-6


# -- field selectors ---------------------------------------------------------------------------

POD_FIELDS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")


@pytest.mark.parametrize(
    ("text", "canonical", "fields"),
    [
        ("", "", set()),
        ("status.phase=Running", "status.phase=Running", {"status.phase"}),
        ("status.phase==Running", "status.phase=Running", {"status.phase"}),
        ("status.phase!=Running", "status.phase!=Running", {"status.phase"}),
        # Nothing is trimmed, as in the apiserver's fields.ParseSelector (k8s.io/apimachinery
        # pkg/fields/selector.go): a blank is part of the value, and only empty terms are
        # skipped.
        ("status.phase=Running ", "status.phase=Running ", {"status.phase"}),
        (",,", "", set()),
        # A term with neither field nor value is dropped: fields.ParseSelector's Transform skips
        # a requirement whose field and value are both empty (pkg/fields/selector.go).
        ("=", "", set()),
        ("!=,status.phase==Running", "status.phase=Running", {"status.phase"}),
        ("spec.nodeName=", "spec.nodeName=", {"spec.nodeName"}),
        (
            "status.phase=Running,metadata.name!=a",
            "metadata.name!=a,status.phase=Running",
            {"status.phase", "metadata.name"},
        ),
        ("metadata.name=a\\,b", "metadata.name=a\\,b", {"metadata.name"}),
        ("metadata.name=a\\=b!\\\\", "metadata.name=a\\=b!\\\\", {"metadata.name"}),
        # A bare "!" is part of a value: only "\\", "," and "=" are escaped, and the first
        # operator splits a term (k8s.io/apimachinery pkg/fields/selector.go: EscapeValue,
        # UnescapeValue, splitTerm).
        ("metadata.name=hello!world", "metadata.name=hello!world", {"metadata.name"}),
        ("metadata.name!=!x", "metadata.name!=!x", {"metadata.name"}),
        ("metadata.name=!\\=x", "metadata.name=!\\=x", {"metadata.name"}),
        ("status.phase=Running,", "status.phase=Running", {"status.phase"}),
    ],
)
def test_field_selector_grammar(text: str, canonical: str, fields: set[str]) -> None:
    selector = FieldSelector.parse(text, POD_FIELDS)
    assert str(selector) == canonical
    assert selector.fields == fields
    assert selector.empty == (not fields)
    assert FieldSelector.parse(str(selector), POD_FIELDS) == selector


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "spec.foo=x",
            'field selector "spec.foo=x": field label not supported for pods: spec.foo '
            "(supported: metadata.name, metadata.namespace, spec.nodeName, status.phase)",
        ),
        ("status.phase", 'field selector "status.phase": "status.phase" has no =, == or !='),
        ("=x", "field label not supported for pods: (empty)"),
        ("metadata.name=a,b", '"b" has no =, == or != operator'),
        # Blanks are not trimmed (pkg/fields/selector.go, parseSelector): blanks alone are a term
        # without an operator, and a blank around a field makes it unsupported.
        (" ", 'field selector " ": " " has no =, == or != operator'),
        ("status.phase=Running, ", '" " has no =, == or != operator'),
        (
            " status.phase = Running",
            'field label not supported for pods: " status.phase " (blanks are part of a field',
        ),
        (
            "metadata.name=a=b",
            'invalid value "a=b" for "metadata.name": an "=" in a value must be escaped with a',
        ),
        ("metadata.name=a\\x", 'invalid value "a\\\\x" for "metadata.name": a backslash escapes'),
        ("metadata.name=a\\", 'invalid value "a\\\\" for "metadata.name": it ends in a lone'),
        # "\\!" is no escape: the apiserver's UnescapeValue (pkg/fields/selector.go) refuses it.
        ("metadata.name=a\\!b", 'a backslash escapes only a backslash, "," or "=", not "!"'),
        # The first operator splits a term, even after a backslash (splitTerm): no escapes in
        # a field.
        ("metadata.name\\=x", "field label not supported for pods: metadata.name\\ ("),
    ],
)
def test_invalid_field_selectors_name_the_mistake(text: str, message: str) -> None:
    with pytest.raises(SelectorError) as exc:
        FieldSelector.parse(text, POD_FIELDS, resource="pods")
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_without_a_resource_the_message_names_no_resource() -> None:
    with pytest.raises(SelectorError, match=r": field label not supported: spec\.foo \("):
        FieldSelector.parse("spec.foo=x", POD_FIELDS)


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("status.phase=Running", {"status.phase": "Running"}, True),
        ("status.phase=Running", {"status.phase": "Failed"}, False),
        ("status.phase=Running", {}, False),
        ("status.phase!=Running", {"status.phase": "Failed"}, True),
        ("status.phase!=Running", {"status.phase": "Running"}, False),
        ("status.phase!=Running", {}, True),
        ("spec.nodeName=", {"spec.nodeName": ""}, True),
        ("spec.nodeName=", {}, True),  # a missing field reads "" as in the API
        ("spec.nodeName!=", {"spec.nodeName": "n1"}, True),
        ("spec.nodeName=n1,status.phase=Running", {"spec.nodeName": "n1"}, False),
        (
            "spec.nodeName=n1,status.phase=Running",
            {"spec.nodeName": "n1", "status.phase": "Running"},
            True,
        ),
        ("metadata.name=a\\,b", {"metadata.name": "a,b"}, True),
        ("metadata.name=hello!world", {"metadata.name": "hello!world"}, True),
        ("status.phase=Running ", {"status.phase": "Running"}, False),
        ("metadata.name!=!x", {"metadata.name": "!x"}, False),
        ("", {}, True),
    ],
)
def test_field_matching_truth_table(text: str, values: dict[str, str], expected: bool) -> None:
    assert FieldSelector.parse(text, POD_FIELDS).matches(values) is expected


_field_values = st.text(alphabet="ab,=!\\ x", max_size=6)


@given(st.lists(st.tuples(st.sampled_from(POD_FIELDS), st.booleans(), _field_values), max_size=4),
       st.dictionaries(st.sampled_from(POD_FIELDS), _field_values))  # fmt: skip
def test_escaped_values_round_trip_and_match_like_the_reference(
    terms: list[tuple[str, bool, str]], values: dict[str, str]
) -> None:
    def escape(value: str) -> str:
        return "".join("\\" + c if c in "\\,=" else c for c in value)

    text = ",".join(f"{name}{'!=' if neg else '='}{escape(v)}" for name, neg, v in terms)
    selector = FieldSelector.parse(text, POD_FIELDS)
    expected = all((values.get(name, "") == v) != neg for name, neg, v in terms)
    assert selector.matches(values) is expected
    assert FieldSelector.parse(str(selector), POD_FIELDS) == selector
