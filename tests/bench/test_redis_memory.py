"""bench/redis_memory.py stays runnable and its numbers add up: a tiny run reports every state
with memory that follows the stream's length and the known state, and bad flags end in one line.
Nothing here checks how much memory Redis uses, only that the report is self-consistent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "redis_memory.py"
OBJECTS = 400
SHARDS = 4
MIN_ENTRIES = 20
STATES = (
    "initial list",
    f"+ {OBJECTS} updates, before retention",
    "retention, updates unread",
    "retention, updates read",
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("bench") / "report.json"
    args = [
        *("--objects", str(OBJECTS), "--shards", str(SHARDS)),
        *("--retention-min-entries", str(MIN_ENTRIES), "--json", str(path), "--quiet"),
    ]
    result = subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=50, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "initial list" in result.stdout and "per stream entry" in result.stdout
    parsed: dict[str, Any] = orjson.loads(path.read_bytes())
    return parsed


def _states(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {state["state"]: state for state in report["states"]}


def test_every_state_is_reported_in_order(report: dict[str, Any]) -> None:
    assert [state["state"] for state in report["states"]] == list(STATES)
    assert (report["objects"], report["shards"]) == (OBJECTS, SHARDS)
    assert int(report["redis_version"].split(".")[0]) >= 7


def test_stream_lengths_follow_the_workload_and_retention(report: dict[str, Any]) -> None:
    initial, peak, unread, read = (_states(report)[name] for name in STATES)
    assert initial["stream_entries"] == OBJECTS  # one entry per object
    assert peak["stream_entries"] == 2 * OBJECTS  # plus one update each
    # Unread updates are never trimmed; read ones go down to about MIN_ENTRIES per shard
    # (``~`` trimming removes whole stream nodes, so a few more may stay).
    assert unread["stream_entries"] >= OBJECTS
    assert SHARDS * MIN_ENTRIES <= read["stream_entries"] < unread["stream_entries"]


def test_memory_follows_the_stream_and_the_known_state(report: dict[str, Any]) -> None:
    initial, peak, _, read = (_states(report)[name] for name in STATES)
    for state in report["states"]:
        kinds = state["by_kind_bytes"]
        assert set(kinds) == {"stream", "versions", "objects"}
        assert all(size > 0 for size in kinds.values())
        assert state["used_memory_bytes"] > 0
        assert state["used_memory_bytes"] == sum(kinds.values()) + state["other_bytes"]
        assert state["per_object_bytes"] == pytest.approx(state["used_memory_bytes"] / OBJECTS)
        assert state["ratio_to_json"] == pytest.approx(
            state["per_object_bytes"] / report["avg_json_bytes"]
        )
        # The key kinds are most of what Redis holds: "other" is bookkeeping.
        assert abs(state["other_bytes"]) < 0.25 * state["used_memory_bytes"]
    # The stream doubles with the updates; the known state keeps one envelope per object.
    assert peak["by_kind_bytes"]["stream"] > 1.8 * initial["by_kind_bytes"]["stream"]
    assert read["by_kind_bytes"]["stream"] < initial["by_kind_bytes"]["stream"]
    assert peak["by_kind_bytes"]["objects"] == pytest.approx(
        initial["by_kind_bytes"]["objects"], rel=0.1
    )
    assert read["used_memory_bytes"] < initial["used_memory_bytes"] < peak["used_memory_bytes"]


def test_sizes_are_those_of_realistic_stripped_pods(report: dict[str, Any]) -> None:
    # bench/pods.py makes ~3.5 KB Pods; managedFields (~40 %) is stripped before publishing.
    assert 1_500 < report["avg_json_bytes"] < 3_500
    assert report["avg_envelope_bytes"] > report["avg_json_bytes"]  # the envelope wraps it
    # A stream entry and an objects-hash field each hold one envelope plus Redis overhead.
    assert report["per_stream_entry_bytes"] > report["avg_envelope_bytes"]
    assert report["per_object_known_state_bytes"] > report["avg_envelope_bytes"]
    initial = _states(report)["initial list"]
    assert report["per_stream_entry_bytes"] == pytest.approx(
        initial["by_kind_bytes"]["stream"] / OBJECTS
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--objects", "0"], "at least 1"),
        (["--shards", "-2"], "at least 1"),
        (["--retention-min-entries", "-1"], "at least 0"),
        (["--objects", "many"], "invalid"),
    ],
)
def test_bad_flags_end_with_one_line_and_status_2(flags: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), *flags],
        capture_output=True, text=True, cwd=ROOT, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert message in result.stderr
