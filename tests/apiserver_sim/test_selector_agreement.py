"""Issue 36 point 4: the product's selectors (``common.selectors``) and the simulator's own
(``apiserver_sim.selectors``, written from the Kubernetes documentation) agree: on generated
selectors, both accept or both refuse, and an accepted one selects the same label sets.

Where they disagreed, the Kubernetes source decided which one was right (k8s.io/apimachinery,
``pkg/labels/selector.go`` and ``pkg/fields/selector.go``); each case is kept below as a
parametrized example that names what the source does, and the generated selectors spell it too:
``in`` and ``notin`` are label keys where a key stands; only space, tab, ``\\r`` and ``\\n``
separate label selector tokens (the simulator had taken the documented space and tab only); the
value after ``>``/``<`` has no sign; a field selector value escapes only ``\\``, ``,`` and
``=`` (a bare ``!`` is part of it, ``\\!`` is refused); and a field selector is not trimmed
(blanks alone are refused).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from apiserver_sim import PODS, ApiError
from apiserver_sim import selectors as simulator
from common import selectors as product
from common.selectable_fields import field_values, supported_fields

# -- label selectors ------------------------------------------------------------------------------

KEYS = ("app", "in", "notin", "tier", "a.b", "x-y_z", "A1", "example.com/app", "k8s.io/x", "n" * 63)
BAD_KEYS = ("-a", "a/", "/a", "a/b/c", "Bad.com/x", "n" * 64, "a b")
VALUES = ("", "in", "notin", "web", "db", "7", "42", "a.b", "x_y-z", "v" * 63)
BAD_VALUES = ("-x", "x-", "v" * 64, "a(b", "a!b", "web\u00a0")
BLANKS = st.sampled_from(("", " ", "  ", "\t", "\n", "\r\n"))

keys = st.sampled_from(KEYS) | st.sampled_from(BAD_KEYS)
values = st.sampled_from(VALUES) | st.sampled_from(BAD_VALUES)


@st.composite
def requirements(draw: st.DrawFn) -> str:
    """One requirement, valid or not, spelt with the documented tokens and blanks between."""
    key = draw(keys)
    blank = draw(BLANKS)
    shape = draw(st.sampled_from(("exists", "!", "=", "==", "!=", "in", "notin", ">", "<")))
    if shape == "exists":
        return key
    if shape == "!":
        return f"!{blank}{key}"
    if shape in ("in", "notin"):
        members = draw(st.lists(values, max_size=4))
        inside = f"{blank},{blank}".join(members)
        return f"{key} {shape}{blank}({blank}{inside}{blank})"
    if shape in (">", "<"):
        bound = draw(st.sampled_from(("0", "7", "007", "42", "9" * 19, "x", "", "-1", "+5")))
        return f"{key}{blank}{shape}{blank}{bound}"
    return f"{key}{blank}{shape}{blank}{draw(values)}"


label_selectors = st.lists(requirements(), min_size=1, max_size=4).map(",".join) | st.text(
    alphabet="abinotx=!(),<> \t\r\n\u00a0\x0b",
    max_size=20,
)
label_sets = st.dictionaries(st.sampled_from(KEYS), st.sampled_from((*VALUES, "-3", "+5")))


def _accepted(parse: Callable[[], object], refused: type[Exception]) -> object | None:
    try:
        return parse()
    except refused:
        return None


@given(label_selectors, st.lists(label_sets, max_size=5))
@example("app=web,tier in (db, ,7),!x-y_z,A1,a.b notin ()", [{"app": "web", "tier": ""}])
@example("app>7,tier<42", [{"app": "8", "tier": "-3"}, {"app": "+5"}])
def test_the_product_and_the_simulator_agree_on_label_selectors(
    text: str, label_sets: list[dict[str, str]]
) -> None:
    mine = _accepted(lambda: product.LabelSelector.parse(text), product.SelectorError)
    theirs = _accepted(lambda: simulator.LabelSelector.parse(text), ApiError)
    assert (mine is None) == (theirs is None), (text, mine, theirs)
    if isinstance(mine, product.LabelSelector) and isinstance(theirs, simulator.LabelSelector):
        for labels in label_sets:
            assert mine.matches(labels) == theirs.matches(labels), (text, labels)


# -- field selectors ------------------------------------------------------------------------------

FIELDS = (*supported_fields("pods"), "spec.unknown", "metadata.names", "", " status.phase", "a ")
FIELD_VALUES = ("", "Running", "node-1", r"a\,b", r"a\=b", r"a\\b", "a=b", "a\\", r"a\xb")
FIELD_VALUES += ("!", "a!b", "!=", r"a\!b", r"\!", " ", "Running ", " node-1")


@st.composite
def field_terms(draw: st.DrawFn) -> str:
    operator = draw(st.sampled_from(("=", "==", "!=", "")))
    return f"{draw(st.sampled_from(FIELDS))}{operator}{draw(st.sampled_from(FIELD_VALUES))}"


field_selectors = st.lists(field_terms(), min_size=1, max_size=3).map(",".join) | st.text(
    alphabet="ab ,=!\\", max_size=8
)
pods = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({
        "name": st.sampled_from(("a,b", "a=b", "a\\b", "web")),
        "namespace": st.sampled_from(("default", "shop")),
    }),
    "spec": st.fixed_dictionaries({"nodeName": st.sampled_from(("node-1", "", " node-1"))}),
    "status": st.fixed_dictionaries({"phase": st.sampled_from(("Running", "Pending"))}),
})  # fmt: skip


@given(field_selectors, st.lists(pods, max_size=4))
@example(r"metadata.name=a\,b,status.phase!=Running,spec.nodeName=", [])
def test_the_product_and_the_simulator_agree_on_field_selectors(
    text: str, objects: list[dict[str, dict[str, str]]]
) -> None:
    mine = _accepted(
        lambda: product.FieldSelector.parse(text, supported_fields("pods")), product.SelectorError
    )
    theirs = _accepted(lambda: simulator.FieldSelector.parse(text, PODS), ApiError)
    assert (mine is None) == (theirs is None), (text, mine, theirs)
    if isinstance(mine, product.FieldSelector) and isinstance(theirs, simulator.FieldSelector):
        for obj in objects:
            product_view, simulator_view = field_values("pods", obj), PODS.field_values(obj)
            assert product_view == simulator_view
            assert mine.matches(product_view) == theirs.matches(simulator_view), (text, obj)


# -- where the two disagreed, decided by the Kubernetes source ------------------------------------
# Each case cites what k8s.io/apimachinery does: pkg/labels/selector.go (its Lexer, Parser and
# NewRequirement) and pkg/fields/selector.go (splitTerms, splitTerm, UnescapeValue); the
# generated selectors above spell these cases too.


def _both_accept_labels(text: str, labels: dict[str, str]) -> None:
    theirs = simulator.LabelSelector.parse(text)
    assert theirs.matches(labels)
    try:
        mine = product.LabelSelector.parse(text)
    except product.SelectorError as exc:
        raise AssertionError(f"the product refuses {text!r}: {exc}") from None
    assert mine.matches(labels)


def _both_refuse_labels(text: str) -> None:
    with pytest.raises(ApiError):
        simulator.LabelSelector.parse(text)
    try:
        product.LabelSelector.parse(text)
    except product.SelectorError:
        return
    raise AssertionError(f"the product accepts {text!r}")


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        # pkg/labels/selector.go, isWhitespace: the lexer skips " ", "\t", "\r" and "\n", though
        # Parse's comment says "Delimiter is white space: (' ', '\t')"
        ("app=web\n,tier", {"app": "web", "tier": ""}),
        ("\r\napp\r\nin\n(web)\r\n", {"app": "web"}),
        # Parser.lookahead/consume: in the Values context (where parseKeyAndInferOperator reads a
        # key, and where values are read) the in/notin tokens are identifiers; only
        # parseOperator reads them as operators. "in" and "notin" are valid label keys.
        ("in=x", {"in": "x"}),
        ("notin", {"notin": ""}),
        ("!in", {}),
        ("app in (a),in notin (b)", {"app": "a"}),
        ("in in (in),notin notin (notin)", {"in": "in"}),
    ],
)
def test_both_accept_the_label_selectors_kubernetes_accepts(
    text: str, labels: dict[str, str]
) -> None:
    _both_accept_labels(text, labels)


@pytest.mark.parametrize(
    "text",
    [
        # isWhitespace: any blank other than " ", "\t", "\r", "\n" is part of the word, which is
        # then no valid label key or value
        "app=web\u00a0",
        "app\u2003=web",
        "\u00a0",
        "app=web\x0b,tier",
        "app\x0c",
        # NewRequirement: a Gt/Lt value must parse with strconv.ParseInt(v, 10, 64) and, like
        # every value, pass validateLabelValue (begins and ends with an alphanumeric): no sign
        "replicas>-1",
        "replicas<+5",
        "replicas>" + "0" * 63 + "1",
    ],
)
def test_both_refuse_the_label_selectors_kubernetes_refuses(text: str) -> None:
    _both_refuse_labels(text)


def _fields_of(text: str) -> tuple[product.FieldSelector, simulator.FieldSelector]:
    theirs = simulator.FieldSelector.parse(text, PODS)
    try:
        return product.FieldSelector.parse(text, supported_fields("pods")), theirs
    except product.SelectorError as exc:
        raise AssertionError(f"the product refuses {text!r}: {exc}") from None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        # pkg/fields/selector.go: splitTerm splits a term at its first operator and
        # UnescapeValue refuses only an unescaped "," or "=" in the rest, so a bare "!" is
        # part of the value (EscapeValue escapes only "\\", "," and "=")
        ("metadata.name=hello!world", "hello!world"),
        ("metadata.name=!", "!"),
        ("metadata.name!=!x", "x"),
        ("metadata.name=!\\=x", "!=x"),
        # parseSelector trims nothing: a blank is part of the value, and only empty terms
        # are skipped
        ("metadata.name=x ", "x "),
        ("metadata.name= x,", " x"),
        (",metadata.name=x,,", "x"),
        # Transform (which parseSelector applies) drops a term whose field and value are both
        # empty: "=", "==" and "!=" alone select everything
        ("==", "x"),
        ("!=,metadata.name=x", "x"),
    ],
)
def test_both_accept_the_field_selectors_kubernetes_accepts(text: str, name: str) -> None:
    mine, theirs = _fields_of(text)
    for pod_name in (name, name.strip(), "other"):
        pod = {"metadata": {"name": pod_name, "namespace": "default"}, "spec": {}, "status": {}}
        selected = mine.matches(field_values("pods", pod))
        assert selected == theirs.matches(PODS.field_values(pod)), pod_name
        assert selected or pod_name != name


def _both_refuse_fields(text: str) -> None:
    with pytest.raises(ApiError):
        simulator.FieldSelector.parse(text, PODS)
    with pytest.raises(product.SelectorError):
        product.FieldSelector.parse(text, supported_fields("pods"))


@pytest.mark.parametrize(
    "text",
    [
        # UnescapeValue: a backslash escapes only "\\", "," and "=": "\\!" is an invalid
        # escape sequence
        "metadata.name=hello\\!world",
        # splitTerm: a field has no escapes, the first operator splits the term
        "metadata.name\\=x",
        # parseSelector trims nothing: blanks alone are a term with no operator, and a blank
        # around a field makes it one the kind does not support
        " ",
        "metadata.name=x, ",
        " metadata.name=x",
        "metadata.name =x",
    ],
)
def test_both_refuse_the_field_selectors_kubernetes_refuses(text: str) -> None:
    _both_refuse_fields(text)
