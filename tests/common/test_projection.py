"""Projections (``--project``): full, metadata-only and path lists."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.projection import IDENTITY_PATHS, Projection, ProjectionError


def pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u1",
            "resourceVersion": "42",
            "generation": 3,
            "labels": {"app": "web"},
            "annotations": {"example.com/x": "1", "other": "2"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "a", "image": "img:1", "ports": [1]}, {"name": "b"}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


IDENTITY: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "resourceVersion": "42"},
}


def test_full_returns_the_object_itself() -> None:
    projection = Projection.parse("full")
    obj = pod()
    assert projection.is_full and not projection.is_metadata
    assert projection.apply(obj) is obj
    assert str(projection) == "full"


def test_metadata_keeps_type_and_metadata_without_managed_fields() -> None:
    projection = Projection.parse(" metadata ")
    assert projection.is_metadata and not projection.is_full
    obj = pod()
    out = projection.apply(obj)
    expected_meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    assert out == {"apiVersion": "v1", "kind": "Pod", "metadata": expected_meta}
    assert "managedFields" in obj["metadata"]  # the input is untouched
    assert str(projection) == "metadata"


def test_paths_keep_their_subtrees_and_the_identity_fields() -> None:
    out = Projection.parse("spec.nodeName,status.phase,metadata.labels").apply(pod())
    assert out == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**IDENTITY["metadata"], "labels": {"app": "web"}},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("text", "extra"),
    [
        ("$.spec.nodeName", {"spec": {"nodeName": "n1"}}),
        ('$["spec"]["nodeName"]', {"spec": {"nodeName": "n1"}}),
        ("spec['nodeName']", {"spec": {"nodeName": "n1"}}),
        (
            'metadata.annotations["example.com/x"]',
            {"metadata": {**IDENTITY["metadata"], "annotations": {"example.com/x": "1"}}},
        ),
        (
            "spec.containers[*].image",
            {"spec": {"containers": [{"image": "img:1"}, {}]}},
        ),
        (
            "spec.containers[*].name,spec.containers[*].ports",
            {"spec": {"containers": [{"name": "a", "ports": [1]}, {"name": "b"}]}},
        ),
        ("spec.missing,status.nothing.deeper", {}),
        ("spec.nodeName.deeper", {}),  # a string has no keys
        ("spec.nodeName[*]", {}),  # nor elements
        ("metadata.labels[*]", {}),  # [*] selects list elements only
        ("spec,spec.nodeName", {"spec": pod()["spec"]}),  # a parent path wins
    ],
)
def test_path_forms(text: str, extra: dict[str, Any]) -> None:
    assert Projection.parse(text).apply(pod()) == {**IDENTITY, **extra}


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("status.phase,spec.nodeName", "spec.nodeName,status.phase"),
        ("$.spec.nodeName, spec.nodeName", "spec.nodeName"),
        ('$["metadata"]["annotations"]["example.com/x"]', 'metadata.annotations["example.com/x"]'),
        ("spec.containers[*].image", "spec.containers[*].image"),
        ('a["[*]"]', 'a["[*]"]'),
        ('a["we\\"ird,\\\\"]', 'a["we\\"ird,\\\\"]'),
        ("a['x,y']", 'a["x,y"]'),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    projection = Projection.parse(text)
    assert str(projection) == canonical
    assert Projection.parse(canonical) == projection


def test_quoted_keys_may_hold_anything() -> None:
    obj = {"a": {"[*]": 1, 'we"ird,\\': 2, "x,y": 3}}
    assert Projection.parse('a["[*]"]').apply(obj) == {"a": {"[*]": 1}}
    assert Projection.parse('a["we\\"ird,\\\\"]').apply(obj) == {"a": {'we"ird,\\': 2}}
    assert Projection.parse("a['x,y']").apply(obj) == {"a": {"x,y": 3}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'projection "": empty; expected full, metadata or comma-separated paths'),
        ("   ", "empty; expected full, metadata"),
        ("a,,b", 'projection "a,,b": empty path between commas'),
        ("a,", "empty path between commas"),
        ("a.", 'path "a.": ends with "."'),
        (".a", 'path ".a": empty key at position 0'),
        ("a..b", "empty key at position 2"),
        ("a[0]", '"[" at position 1 must open ["key"], [\'key\'] or [*]'),
        ('a["x"', 'expected "]" after the quoted key at position 5'),
        ('a["x', "unclosed quoted key at position 1"),
        ('a[""]', "empty quoted key at position 1"),
        ("$x", '"$" must be followed by "." or "["'),
        ("$.", 'path "$.": no key'),
        ("spec.node Name", 'expected ".", "[" or the end after a key, found " "'),
        ("metadata.annotations.example.com/x", None),  # valid: nested keys example, com/x
        ("a.{b}", 'unexpected "{" at position 2 (quote such keys: ["example.com/x"])'),
    ],
)
def test_malformed_projections_name_the_mistake(text: str, message: str | None) -> None:
    if message is None:
        Projection.parse(text)
        return
    with pytest.raises(ProjectionError) as exc:
        Projection.parse(text)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)
    assert isinstance(exc.value, ValueError)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["spec", "a", "b", "name", "uid"]), inner, max_size=3)
    ),
    max_leaves=12,
)
_objects = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.just("v1"),
        "kind": st.just("Pod"),
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": st.text(max_size=3),
                "namespace": st.text(max_size=3),
                "uid": st.text(max_size=3),
                "resourceVersion": st.text(max_size=3),
                "labels": st.dictionaries(st.text(max_size=2), st.text(max_size=2)),
                "managedFields": _json,
            },
        ),
        "spec": _json,
        "status": _json,
    },
)
_segments = st.sampled_from(["spec", "a", "b", "name", "[*]", "metadata", "labels", "uid"])
_paths = st.lists(_segments, min_size=1, max_size=4).filter(lambda s: s[0] != "[*]")
_projections = st.just("metadata") | st.lists(_paths, min_size=1, max_size=3).map(
    lambda paths: ",".join(".".join(p).replace(".[*]", "[*]") for p in paths)
)


_ABSENT = object()


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _ABSENT
        obj = obj[part]
    return obj


@given(_objects, _projections)
def test_projection_never_mutates_and_always_keeps_identity(obj: dict[str, Any], text: str) -> None:
    before = copy.deepcopy(obj)
    projection = Projection.parse(text)
    out = projection.apply(obj)
    assert obj == before
    assert out is not obj
    assert isinstance(out, dict)
    for path in IDENTITY_PATHS:
        source = _get(obj, path)
        if source is not _ABSENT:
            assert _get(out, path) == source, (text, path)
    if "managedFields" in out.get("metadata", {}):  # only when a path asks for it
        assert text != "metadata"
        assert any(
            p == "metadata" or p.startswith("metadata.managedFields") for p in text.split(",")
        )
    # Projecting twice changes nothing more.
    assert projection.apply(out) == out
