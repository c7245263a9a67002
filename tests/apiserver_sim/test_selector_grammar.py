"""Issue 36 point 4: the simulator's own selectors, checked against the Kubernetes documentation.

The examples are the documentation's: "Labels and Selectors" (equality- and set-based
requirements, the comma as AND, the two URL forms), the grammar documented for the API
machinery's label parser (``x in (foo,,baz),y,z notin ()``), "Field Selectors" (its examples,
chained selectors, the error for an unsupported field); and the character rules of label keys
and values ("Syntax and character set"). A refused selector is a 400 ``Status``, over HTTP.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
import pytest
import urllib3

from apiserver_sim import CONFIGMAPS, PODS, ApiError, Simulator
from apiserver_sim.selectors import FieldSelector, LabelSelector
from tests.support.objects import pod

# The documentation's example labels, one object each.
OBJECTS: dict[str, dict[str, str]] = {
    "prod-front": {"environment": "production", "tier": "frontend"},
    "prod-back": {"environment": "production", "tier": "backend", "partition": "customerA"},
    "qa-back": {"environment": "qa", "tier": "backend", "partition": "customerB"},
    "dev-cache": {"environment": "dev", "tier": "cache"},
    "bare": {},
}


def selected(selector: str) -> set[str]:
    parsed = LabelSelector.parse(selector)
    return {name for name, labels in OBJECTS.items() if parsed.matches(labels)}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", set(OBJECTS)),  # an empty selector selects every object
        ("environment = production", {"prod-front", "prod-back"}),
        ("environment == production", {"prod-front", "prod-back"}),
        # != also selects the objects without the key
        ("tier != frontend", {"prod-back", "qa-back", "dev-cache", "bare"}),
        ("environment=production,tier!=frontend", {"prod-back"}),
        ("environment in (production, qa)", {"prod-front", "prod-back", "qa-back"}),
        # notin also selects the objects without the key
        ("tier notin (frontend, backend)", {"dev-cache", "bare"}),
        ("partition", {"prod-back", "qa-back"}),
        ("!partition", {"prod-front", "dev-cache", "bare"}),
        ("partition,environment notin (qa)", {"prod-back"}),
        ("partition in (customerA, customerB),environment!=qa", {"prod-back"}),
        ("environment=production,tier=frontend", {"prod-front"}),
        ("environment in (production),tier in (frontend)", {"prod-front"}),
        ("environment,environment notin (frontend)", set(OBJECTS) - {"bare"}),
    ],
)
def test_the_label_examples_of_the_documentation(selector: str, expected: set[str]) -> None:
    assert selected(selector) == expected


def test_an_equality_is_a_set_of_one() -> None:
    """'environment=production is equivalent to environment in (production)'."""
    assert selected("environment=production") == selected("environment in (production)")
    assert selected("tier!=backend") == selected("tier notin (backend)")


def test_the_documented_grammar_example_with_empty_values() -> None:
    """``x in (foo,,baz),y,z notin ()``: the empty string is a valid value of a set, ``()``
    holds just it, and ``y`` only asks that the key exists."""
    parsed = LabelSelector.parse("x in (foo,,baz),y,z notin ()")
    assert parsed.matches({"x": "foo", "y": "any"})
    assert parsed.matches({"x": "", "y": "", "z": "set"})
    assert not parsed.matches({"x": "bar", "y": "any"})
    assert not parsed.matches({"x": "foo"})
    assert not parsed.matches({"x": "baz", "y": "any", "z": ""})
    assert LabelSelector.parse("x=").matches({"x": ""})  # an empty value, to the end
    assert not LabelSelector.parse("x=,y").matches({"x": "a", "y": "b"})


def test_greater_and_less_than_compare_integers() -> None:
    """The node selector operators ``Gt`` and ``Lt``: one value, interpreted as an integer; a
    label that is no integer is not selected."""
    parsed = LabelSelector.parse("replicas>2,age<10")
    assert parsed.matches({"replicas": "3", "age": "9"})
    assert not parsed.matches({"replicas": "2", "age": "9"})
    assert not parsed.matches({"replicas": "three", "age": "9"})
    assert not parsed.matches({"age": "9"})


def test_in_and_notin_are_operators_only_where_an_operator_stands() -> None:
    """A key is any valid label key: ``in`` and ``notin`` are ones."""
    assert LabelSelector.parse("in in (in),notin").matches({"in": "in", "notin": ""})
    assert LabelSelector.parse("!in").matches({})
    assert LabelSelector.parse("app=notin").matches({"app": "notin"})


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "A1",
        "a.b_c-d",
        "a" * 63,
        "example.com/app",
        "kubernetes.io/hostname",
        "a-b.c-d/x",
        ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 61)) + "/n",  # a 253-character prefix
    ],
)
def test_valid_label_keys(key: str) -> None:
    assert LabelSelector.parse(f"{key}=v").matches({key: "v"})


@pytest.mark.parametrize(
    "key",
    [
        "-a",  # the name starts and ends with an alphanumeric
        "a_",
        "a" * 64,  # the name has at most 63 characters
        "a/b/c",  # one prefix at most
        "/a",  # an empty prefix
        "a/",  # an empty name
        "Example.com/a",  # the prefix is a lowercase DNS subdomain
        "a..b/c",  # of DNS labels
        "-a.com/b",
        "a" * 254 + "/n",  # of at most 253 characters
        "a:b",
    ],
)
def test_invalid_label_keys_are_refused(key: str) -> None:
    with pytest.raises(ApiError) as refused:
        LabelSelector.parse(f"{key}=v")
    assert (refused.value.code, refused.value.reason) == (400, "BadRequest")
    assert key in refused.value.message


@pytest.mark.parametrize(
    "selector",
    [
        "a=-v",  # a value starts and ends with an alphanumeric
        "a=v.",
        "a=" + "v" * 64,  # a value has at most 63 characters
        "a in (x, -y)",
        "a in x",  # a set is in parentheses
        "a in (x y)",
        "a in (x",
        "a notin",
        "a b",
        "a=b=c",
        "!a=b",  # "!" only before a key that stands alone
        "a,",
        ",a",
        "a,,b",
        "a>x",  # Gt and Lt take an integer
        "a>",
        "a<1.5",
        "a>99999999999999999999",  # a 64-bit one
        "=a",
        "a=(b)",
        "a\u00a0=b",  # a no-break space is no blank: it is part of the key
        "a=b\u00a0",
        "a=b\x0b",  # nor is a vertical tab
    ],
)
def test_invalid_label_selectors_are_refused(selector: str) -> None:
    with pytest.raises(ApiError) as refused:
        LabelSelector.parse(selector)
    assert (refused.value.code, refused.value.reason) == (400, "BadRequest")
    assert refused.value.message.startswith("unable to parse requirement: ")


def test_spaces_tabs_and_line_breaks_delimit_tokens() -> None:
    """The API machinery's lexer (``isWhitespace``, ``labels/selector.go``) skips space, tab,
    ``\\r`` and ``\\n``, though the grammar's comment names only space and tab."""
    assert LabelSelector.parse("\ta \t in\t( b ,c ) , ! d ").matches({"a": "c"})
    assert LabelSelector.parse("app=web\r\n,\ntier").matches({"app": "web", "tier": ""})
    assert LabelSelector.parse(" \r\n\t").empty


def test_the_field_examples_of_the_documentation() -> None:
    fields = {"metadata.name": "my-service", "metadata.namespace": "shop"}
    assert FieldSelector.parse("metadata.name=my-service", PODS).matches(fields)
    assert FieldSelector.parse("metadata.namespace!=default", PODS).matches(fields)
    pending = PODS.field_values({"status": {"phase": "Pending"}, "spec": {}})
    assert FieldSelector.parse("status.phase=Pending", PODS).matches(pending)
    assert FieldSelector.parse("status.phase==Pending", PODS).matches(pending)
    chained = FieldSelector.parse("status.phase!=Running,spec.restartPolicy=Always", PODS)
    always = PODS.field_values(
        {"status": {"phase": "Pending"}, "spec": {"restartPolicy": "Always"}}
    )
    assert chained.matches(always) and not chained.matches(pending)
    assert FieldSelector.parse("", PODS).empty  # --field-selector "" selects everything
    # The API machinery's parser drops a term with neither field nor value (Transform in its
    # fields/selector.go), so "=" alone selects everything too.
    assert FieldSelector.parse("=", PODS).empty
    assert FieldSelector.parse("!=,status.phase=Pending", PODS).matches(pending)


def test_field_values_are_compared_as_the_server_renders_them() -> None:
    host = FieldSelector.parse("spec.hostNetwork=false", PODS)
    assert host.matches(PODS.field_values({"spec": {}}))  # a missing bool is false
    assert not host.matches(PODS.field_values({"spec": {"hostNetwork": True}}))
    escaped = FieldSelector.parse(r"metadata.name=a\,b\=c\\d", CONFIGMAPS)
    assert escaped.matches({"metadata.name": "a,b=c\\d"})
    assert FieldSelector.parse("metadata.name=a!b", CONFIGMAPS).matches({"metadata.name": "a!b"})


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("status.phase", "invalid selector: 'status.phase'; can't understand 'status.phase'"),
        ("spec.foo=x", "field label not supported: spec.foo"),
        ("status.phase =x", "field label not supported: status.phase "),  # nothing is trimmed
        (r"metadata.name=a\x", "invalid field selector: invalid escape sequence '\\x'"),
        ("metadata.name=a=b", "invalid field selector: unescaped '='"),
        ("metadata.name=a\\", "invalid field selector: invalid escape sequence '\\'"),
    ],
)
def test_invalid_field_selectors_are_refused(selector: str, message: str) -> None:
    with pytest.raises(ApiError) as refused:
        FieldSelector.parse(selector, PODS)
    assert (refused.value.code, refused.value.reason) == (400, "BadRequest")
    assert refused.value.message.startswith(message), refused.value.message


def _get(http: urllib3.PoolManager, url: str) -> tuple[int, Any]:
    response = http.request("GET", url)
    return response.status, orjson.loads(response.data)


def test_the_documented_url_forms_and_the_status_of_a_refusal(
    sim: Simulator, http: urllib3.PoolManager
) -> None:
    for name, labels in OBJECTS.items():
        sim.create("pods", {**pod(name), "metadata": {"name": name, "labels": labels}})
    base = f"{sim.url}/api/v1/namespaces/default/pods"

    def names(query: str) -> set[str]:
        status, body = _get(http, f"{base}?{query}")
        assert status == 200, body
        return {item["metadata"]["name"] for item in body["items"]}

    assert names("labelSelector=environment%3Dproduction,tier%3Dfrontend") == {"prod-front"}
    assert names("labelSelector=environment+in+%28production%2Cqa%29%2Ctier+in+%28frontend%29") == {
        "prod-front"
    }
    assert names("fieldSelector=metadata.name%3Dqa-back") == {"qa-back"}

    status, body = _get(http, f"{base}?labelSelector={quote('tier in frontend')}")
    assert status == 400
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "unable to parse requirement: found 'frontend', expected: '('",
        "reason": "BadRequest", "code": 400,
    }  # fmt: skip
    status, body = _get(http, f"{sim.url}/api/v1/configmaps?fieldSelector=foo.bar%3Dbaz")
    assert (status, body["reason"]) == (400, "BadRequest")
    # the answer the documentation quotes for a kind without fields of its own
    assert body["message"] == (
        '"foo.bar" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )
    status, body = _get(http, f"{base}?watch=1&labelSelector={quote('a in (b')}")
    assert (status, body["code"]) == (400, 400)
