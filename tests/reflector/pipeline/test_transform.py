"""Point 8 of the reflector issue: managedFields stripped, Secrets redacted, user transforms."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.object_keys import Obj
from common.plugins import PluginError, load_plugin
from reflector_svc.transform import REDACTED, build_transform


def secret() -> Obj:
    return {
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "shop", "managedFields": [{"manager": "kubectl"}]},
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"user": "admin"},
        "type": "Opaque",
    }


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "ib_user_transform.py").write_text(
        textwrap.dedent(
            """
            def add_label(obj):
                obj["metadata"].setdefault("labels", {})["seen-by"] = "informer-bus"
                return obj

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "ib_user_transform"
    sys.modules.pop("ib_user_transform", None)


def test_managed_fields_are_stripped_by_default() -> None:
    transform = build_transform(is_secret=False)
    assert transform is not None
    pod = {"metadata": {"name": "p", "managedFields": [{"manager": "kubelet"}]}}
    assert transform(pod) == {"metadata": {"name": "p"}}


def test_nothing_to_do_gives_no_transform() -> None:
    assert build_transform(is_secret=False, strip_managed=False) is None


def test_secret_values_are_redacted_keys_kept() -> None:
    transform = build_transform(is_secret=True)
    assert transform is not None
    redacted = transform(secret())
    assert redacted["data"] == {"password": REDACTED}
    assert redacted["stringData"] == {"user": REDACTED}
    assert "managedFields" not in redacted["metadata"]
    assert "aHVudGVyMg==" not in repr(redacted)


def test_secret_data_published_only_when_explicitly_allowed() -> None:
    transform = build_transform(is_secret=True, allow_secret_data=True, strip_managed=False)
    assert transform is None
    transform = build_transform(is_secret=True, allow_secret_data=True)
    assert transform is not None
    assert transform(secret())["data"] == {"password": "aHVudGVyMg=="}


def test_user_transform_runs_last_and_is_idempotent(user_module: str) -> None:
    transform = build_transform(is_secret=False, user_transform=f"{user_module}:add_label")
    assert transform is not None
    pod: Obj = {"metadata": {"name": "p", "managedFields": []}}
    once = transform(pod)
    assert once == {"metadata": {"name": "p", "labels": {"seen-by": "informer-bus"}}}
    assert transform(once) == once


def test_user_transform_that_is_not_callable_is_refused(user_module: str) -> None:
    with pytest.raises(TypeError, match="not callable"):
        build_transform(is_secret=False, user_transform=f"{user_module}:NOT_CALLABLE")


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "expected MODULE:ATTRIBUTE"),
        (":attr", "expected MODULE:ATTRIBUTE"),
        ("ib_no_such_module_xyz:f", "cannot import module"),
        ("json:no_such_attribute", "has no attribute"),
    ],
)
def test_plugin_references_fail_with_one_line_messages(reference: str, message: str) -> None:
    with pytest.raises(PluginError, match=message) as exc:
        load_plugin(reference)
    assert "\n" not in str(exc.value)


def test_plugin_dotted_attribute() -> None:
    assert load_plugin("os:path.join") is __import__("os").path.join
