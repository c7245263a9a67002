"""bench/redis_memory.py stays runnable and reports what Redis holds: a tiny run on the test's
own redis-server, whose streams, known state and key sizes are then read back from Redis and
compared with the report (so a bench that counted or sized the wrong keys fails here), and bad
flags end in one line. How much memory Redis needs is not judged, only that the report says
what Redis holds."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from common.redis_layout import ShardKeys
from common.wire import decode_envelope
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer

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


@dataclass(frozen=True)
class Run:
    report: dict[str, Any]
    client: redis.Redis
    """On the Redis the bench measured, as the bench left it (the last state)."""


@pytest.fixture
def run(redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path) -> Iterator[Run]:
    path = tmp_path / "report.json"
    args = [
        *("--objects", str(OBJECTS), "--shards", str(SHARDS), "--redis-url", redis_server.url),
        *("--retention-min-entries", str(MIN_ENTRIES), "--json", str(path), "--quiet"),
    ]
    result = subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=50, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "initial list" in result.stdout and "per stream entry" in result.stdout
    yield Run(orjson.loads(path.read_bytes()), redis_client)


def _states(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {state["state"]: state for state in report["states"]}


def _shards() -> list[ShardKeys]:
    return [ShardKeys("ib", "pods", shard) for shard in range(SHARDS)]


def test_every_state_is_reported_in_order(run: Run) -> None:
    report = run.report
    assert [state["state"] for state in report["states"]] == list(STATES)
    assert (report["objects"], report["shards"]) == (OBJECTS, SHARDS)
    assert report["redis_version"] == run.client.info("server")["redis_version"]


def test_the_last_state_is_what_redis_holds(run: Run) -> None:
    """Read back from Redis: the stream entries, the known state (one version and one object
    per pod), each key kind's ``MEMORY USAGE``, and the consumer group caught up."""
    last = _states(run.report)[STATES[-1]]
    client = run.client
    entries = sum(client.xlen(keys.stream) for keys in _shards())
    assert last["stream_entries"] == entries
    assert SHARDS * MIN_ENTRIES <= entries < OBJECTS  # retention trimmed what the group read
    assert sum(client.hlen(keys.versions) for keys in _shards()) == OBJECTS
    assert sum(client.hlen(keys.objects) for keys in _shards()) == OBJECTS
    sizes = {
        kind: sum(int(client.memory_usage(getattr(keys, kind), samples=0)) for keys in _shards())
        for kind in ("stream", "versions", "objects")
    }
    assert last["by_kind_bytes"] == sizes
    for keys in _shards():
        [group] = client.xinfo_groups(keys.stream)
        assert group["lag"] == 0 and group["pending"] == 0


def test_entries_follow_the_workload_and_retention(run: Run) -> None:
    """Two entries per pod before retention (list + update); retention keeps the unread
    updates, then trims what the group read."""
    initial, peak, unread, read = (_states(run.report)[name] for name in STATES)
    assert (initial["stream_entries"], peak["stream_entries"]) == (OBJECTS, 2 * OBJECTS)
    assert OBJECTS <= unread["stream_entries"] < peak["stream_entries"]
    assert read["stream_entries"] < unread["stream_entries"]
    assert peak["by_kind_bytes"]["stream"] > 1.8 * initial["by_kind_bytes"]["stream"]


def test_sizes_are_those_of_the_envelopes_redis_holds(run: Run) -> None:
    """The known state holds each pod's last envelope (its update): their sizes, read back,
    are the bench's update envelope size, and the pods in them its realistic stripped Pods."""
    report = run.report
    envelopes = [envelope for keys in _shards() for envelope in run.client.hvals(keys.objects)]
    assert len(envelopes) == OBJECTS
    assert report["avg_update_envelope_bytes"] == pytest.approx(sum(map(len, envelopes)) / OBJECTS)
    pods = [decode_envelope(envelope).obj for envelope in envelopes]
    assert all(pod is not None and "managedFields" not in pod["metadata"] for pod in pods)
    json_bytes = sum(len(orjson.dumps(pod)) for pod in pods) / OBJECTS
    # The initial list's pods lack the update's one annotation: a little smaller.
    assert 0.9 * json_bytes < report["avg_json_bytes"] <= json_bytes
    assert 1_500 < report["avg_json_bytes"] < 3_500  # bench/pods.py's ~3.5 KB, stripped


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
