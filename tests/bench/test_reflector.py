"""bench/reflector.py stays runnable: a tiny run reports every reader on both workloads, and the
reflector's rows say what Redis held after each run (the entries it published, the shards it
synced: read back from Redis, not computed), so a bench that timed a reflector which published
the wrong thing fails here. Timings are never checked, and neither is the arithmetic the
report derives from them; no process it started outlives it."""

from __future__ import annotations

import importlib.util
import signal
import sys
import time
import uuid
from types import ModuleType
from typing import Any

import orjson
import pytest

from tests.bench.support import (
    assert_no_survivors,
    assert_usage_errors,
    finish,
    run_bench,
    start_bench,
    survivors,
)
from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "reflector.py"
REFLECTOR = "informer-bus reflector"
READERS = {REFLECTOR, "bare urllib3+orjson", "kubernetes client (models)",
           "kubernetes SharedInformer"}  # fmt: skip
WORKLOADS = ("initial list", "watch burst")
TARGETS = {"kubernetes SharedInformer": 5.0, "bare urllib3+orjson": 0.70}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    args = ("--pods", "300", "--burst", "300", "--repeat", "1", "--json", "--quiet")
    result: dict[str, Any] = orjson.loads(run_bench(BENCH, *args, timeout=240))
    return result


def test_every_reader_and_workload_has_a_row(report: dict[str, Any]) -> None:
    rows = {(row["reader"], row["workload"]): row for row in report["rows"]}
    assert set(rows) == {(reader, workload) for reader in READERS for workload in WORKLOADS}
    assert len(report["rows"]) == len(rows)
    for row in report["rows"]:
        assert row["events"] == 300
        assert row["seconds"] > 0 and len(row["runs_seconds"]) == 1
        assert row["target_ratio"] == TARGETS.get(row["reader"])


def test_the_reflector_published_every_event_to_redis(report: dict[str, Any]) -> None:
    """Counted in Redis after the run: one stream entry per listed pod over all 16 shards,
    every shard's checkpoint synced, and one more entry per update of the burst."""
    rows = {(row["reader"], row["workload"]): row for row in report["rows"]}
    listed = rows[(REFLECTOR, "initial list")]
    assert listed["stream_entries_runs"] == [300]
    assert listed["synced_shards_runs"] == [16]
    assert rows[(REFLECTOR, "watch burst")]["stream_entries_runs"] == [300]
    commands = rows[(REFLECTOR, "watch burst")]["redis_commandstats"]
    assert sum(stats["calls"] for stats in commands.values()) > 0  # Redis saw the burst


def test_machine_sizes_and_notes_are_reported(report: dict[str, Any]) -> None:
    assert report["machine"]["cores"] >= 1
    assert report["machine"]["python"] == ".".join(map(str, sys.version_info[:3]))
    sizes = report["sizes"]
    assert (sizes["pods"], sizes["burst"], sizes["slow_pods"], sizes["slow_burst"]) == (
        300, 300, 300, 300,
    )  # fmt: skip
    assert sizes["shards"] == 16 and sizes["page_size"] == 500
    assert any("unpaginated" in note for note in report["notes"])


def _bench_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH.parent))  # as running the script does (harness)
    spec = importlib.util.spec_from_file_location(
        "bench_reflector_report", BENCH.with_name("reflector_report.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


def test_the_table_shows_every_row_with_its_verdict(
    report: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bench_module(monkeypatch).print_table(report)
    lines = capsys.readouterr().out.splitlines()
    assert any("cores" in line and "Python" in line for line in lines[:2])
    for row in report["rows"]:
        [line] = [
            line for line in lines if line.startswith(f"{row['reader']:28} {row['workload']}")
        ]
        assert f" {row['events']:,} " in line and f" {row['seconds']:.2f} " in line
        if row["met"] is not None:
            assert line.endswith("met" if row["met"] else "MISSED")
            assert f"{row['ratio']:.2f}x" in line


def test_bad_flags_end_with_a_usage_error() -> None:
    assert_usage_errors(BENCH, ["--pods", "0"], ["--pods", "10", "--slow-pods", "20"])


def test_ctrl_c_stops_every_child_process() -> None:
    marker = uuid.uuid4().hex
    process = start_bench(BENCH, marker, "--pods", "20000", "--burst", "300", "--slow-pods", "300",
                     "--slow-burst", "300", "--repeat", "1")  # fmt: skip
    assert process.stderr is not None
    seen = []
    for line in process.stderr:  # progress lines
        seen.append(line)
        if "reflector, list then burst" in line:
            break
    else:
        pytest.fail("the bench never reached the reflector:\n" + "".join(seen[-30:]))
    # Interrupt as soon as the reflector child exists (polling, not a fixed sleep: a fast
    # reflector can list 20k pods in well under a second).
    deadline = time.monotonic() + 30
    while not any("reflector_svc" in cmd for cmd in survivors(marker)):
        assert process.poll() is None, "the bench ended before its reflector started"
        assert time.monotonic() < deadline, "the reflector child never started"
        time.sleep(0.01)
    assert len(survivors(marker)) >= 3, "expected the simulator, redis-server and reflector"
    process.send_signal(signal.SIGINT)
    _, err = finish(process, timeout=60)
    assert process.returncode == 130, err[-3000:]
    assert_no_survivors(marker)
