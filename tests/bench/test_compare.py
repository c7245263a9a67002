"""bench/compare.py (``make bench``) stays runnable: a tiny run reports every contender for every
workload with its ratio, latency, memory and verdict (timings are never checked), writes its JSON,
and no process it started outlives it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bench.support import run_bench
from tests.support.cli import one_line_error, run_command
from tests.support.paths import ROOT

BENCH = ROOT / "bench" / "compare.py"
PROGRAM = "bench/compare.py"
WORKLOADS = ("initial sync", "warm restart", "watch burst", "steady")
OURS = {"informer-bus/1", "informer-bus/2", "informer-bus/4", "informer-bus/1/plain"}
PEERS = {"bare", "watch", "sharedinformer", "kopf"}
CONTENDERS = OURS | PEERS
KEY_ONLY = "informer-bus/1/key-only"  # issue 35: a handler that reads nothing but keys
EXPECTED_ROWS = (
    {("initial sync", c) for c in {*PEERS, "informer-bus/4"}}  # informer-bus: its cold start
    | {("warm restart", c) for c in OURS}
    | {(w, c) for w in ("watch burst", "steady") for c in CONTENDERS}
    | {("watch burst", KEY_ONLY)}  # bursts only: it cannot see the commit stamp
)
PODS = BURST = 200

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    """The report, the printed table, and the directory the run wrote to."""
    out_dir = tmp_path_factory.mktemp("compare")
    report, chart = out_dir / "report.json", out_dir / "chart.png"
    args = ("--pods", str(PODS), "--burst", str(BURST), "--steady-seconds", "0.5", "--quiet",
            "--bare-runs", "2", "--rounds", "2",
            "--json", str(report), "--chart", str(chart))  # fmt: skip
    out = run_bench(BENCH, *args, timeout=200)
    result: dict[str, Any] = orjson.loads(report.read_bytes())
    return result, out, out_dir


def test_every_contender_has_a_sane_row_per_workload(
    run: tuple[dict[str, Any], str, Path],
) -> None:
    report, _, _ = run
    rows = {(row["workload"], row["contender"]): row for row in report["rows"]}
    assert set(rows) == EXPECTED_ROWS
    assert len(report["rows"]) == len(rows)
    for row in report["rows"]:
        assert row["events"] > 0 and row["seconds"] > 0 and row["peak_rss_mb"] > 10
        assert row["events_per_s"] == pytest.approx(row["events"] / row["seconds"], rel=0.02)
        ours = row["contender"].startswith("informer-bus/")
        assert (row["ratio"] is None) == ours
        if row["workload"] == "steady":
            assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
            assert row["rate_churned"] > 0, "the simulator's own account of the churn"
        if row["target"] is not None:
            assert row["met"] is not None
    for contender in CONTENDERS | {KEY_ONLY}:
        assert rows[("watch burst", contender)]["events"] == BURST
    for workload, contender in EXPECTED_ROWS:
        if workload in ("initial sync", "warm restart"):
            assert rows[(workload, contender)]["events"] == PODS
    assert rows[("initial sync", "informer-bus/4")]["label"].endswith("cold start")
    assert rows[("initial sync", "informer-bus/4")]["handled"] >= PODS
    cold = rows[("initial sync", "informer-bus/4")]
    assert 0 < cold["handled_seconds"] <= cold["seconds"], "ready after every pod was handled"
    assert 0 < rows[("watch burst", "kopf")]["handled"] <= BURST  # kopf may coalesce
    assert rows[("watch burst", "sharedinformer")]["target"] == 5.0
    assert rows[("watch burst", "kopf")]["target"] == 3.0
    assert rows[("watch burst", "bare")]["target"] == 0.6
    assert rows[("initial sync", "sharedinformer")]["reference"].startswith(
        "informer-bus, 4 processors"
    )
    assert rows[("steady", "informer-bus/1")]["target"] == 10.0


def test_every_row_has_the_cpu_per_event_of_each_process(
    run: tuple[dict[str, Any], str, Path],
) -> None:
    """Issue 16: every contender's and every informer-bus process' CPU per event, per workload,
    the in-all sum and its ratio to the bare reader's in the same workload."""
    report, out, _ = run
    bare = {row["workload"]: row for row in report["rows"] if row["contender"] == "bare"}
    for row in report["rows"]:
        cpu = row["cpu_us_per_event"]
        if row["contender"].startswith("informer-bus/"):
            processors = [name for name in cpu if name.startswith("processor-")]
            count = int(row["contender"].split("/")[1])
            assert len(processors) == count, row
            assert cpu["processors"] == pytest.approx(sum(cpu[n] for n in processors), abs=1)
            parts = ("processors", "redis")
            if row["workload"] != "warm restart":  # the reflector is not part of a restart
                parts += ("reflector",)
        else:
            parts = ("contender",)
        assert all(cpu[part] >= 0 for part in parts), row
        assert row["cpu_in_all_us_per_event"] == pytest.approx(sum(cpu[p] for p in parts), abs=0.2)
        reference = bare["initial sync" if row["workload"] == "warm restart" else row["workload"]]
        if reference["cpu_in_all_us_per_event"]:
            assert row["cpu_ratio_to_bare"] == pytest.approx(
                row["cpu_in_all_us_per_event"] / reference["cpu_in_all_us_per_event"], abs=0.01
            )
    for row in bare.values():  # the yardstick: the lower middle of its runs (x rounds)
        runs = sorted(row["cpu_runs"])
        assert len(runs) == (2 if row["workload"] == "initial sync" else 4), row
        assert row["cpu_in_all_us_per_event"] == runs[(len(runs) - 1) // 2]
    assert report["sizes"]["bare_runs"] == 2
    repeated = [row for row in report["rows"] if row["contender"].startswith("informer-bus/")
                and row["workload"] in ("warm restart", "watch burst", "steady")]  # fmt: skip
    assert len(repeated) == 13
    for row in repeated:  # informer-bus' rounds: the lower middle one, as for the bare reader
        assert len(row["cpu_runs"]) == 2
        assert row["cpu_in_all_us_per_event"] == min(row["cpu_runs"])
        if row["workload"] == "steady":
            assert row["p99_ms"] in row["p99_runs"]
    assert report["sizes"]["rounds"] == 2
    peers = [r for r in report["rows"] if r["contender"] in ("watch", "sharedinformer", "kopf")]
    assert len(peers) == 9
    for row in peers:  # their bursts and churns have rounds too; their one initial sync not
        if row["workload"] == "initial sync":
            assert "cpu_runs" not in row
        else:
            assert len(row["cpu_runs"]) == 2
            assert row["cpu_in_all_us_per_event"] == min(row["cpu_runs"])
    assert "CPU per event, µs" in out
    targets = report["targets"]
    assert [t["issue"] for t in targets] == [35] * 10 + [16] * 7
    for target in targets:
        assert target["value"] is not None and target["met"] is not None, target
        verdict = "PASS" if target["met"] else "MISS"
        line = f"  {target['what']}: {target['value']:.2f} ({target['target']}) {verdict}"
        assert line in out.splitlines()


def test_the_threads_of_every_processor_were_sampled_through_its_bursts(
    run: tuple[dict[str, Any], str, Path],
) -> None:
    """Issue 35: the processor owning all 16 shards runs at most 6 threads; the bench looks at
    /proc while each configuration bursts and judges the most it saw, less its own handler's."""
    report, _, _ = run
    bursts = {
        row["contender"]: row
        for row in report["rows"]
        if row["workload"] == "watch burst" and row["contender"].startswith("informer-bus/")
    }
    for row in bursts.values():
        threads = row["threads"]
        assert len(threads["runs"]) == 2 and threads["peak"] == max(threads["runs"])
        assert threads["peak"] >= 2, "at least the main thread and the handler's flusher"
        assert threads["distinct"] >= threads["peak"]
        assert threads["samples"] >= 2 * 2, "a look before and after every round at least"
        assert threads["bench_handler"] == 1
    [judged] = [t for t in report["targets"] if t["what"].startswith("threads of the processor")]
    one = [bursts["informer-bus/1"]["threads"], bursts[KEY_ONLY]["threads"]]
    assert judged["value"] == max(t["peak"] - t["bench_handler"] for t in one)
    assert judged["target"] == "<= 6"


def test_memory_machine_and_versions_are_reported(run: tuple[dict[str, Any], str, Path]) -> None:
    report, _, _ = run
    memory = report["memory"]
    assert 1000 < memory["pod_json_bytes"] < 10_000
    assert memory["redis_bytes_per_pod"] > memory["pod_json_bytes"] / 2
    assert memory["cached_pods"] == PODS
    assert "plain_processor_rss_growth_bytes_per_pod" in memory
    assert [t["what"] for t in report["memory_targets"]] == [
        "processor RSS growth per cached pod / pod JSON, the default (compact) cache",
        "processor RSS growth per cached pod / pod JSON, --cache plain",
        "Redis used_memory / JSON of (cached pods + retained stream entries)",
    ]
    assert [t["met"] for t in report["memory_targets"]] == [
        t["ratio"] <= t["target"] for t in report["memory_targets"]
    ]
    assert report["machine"]["cores"] >= 1
    assert report["versions"]["kopf"] == "1.45.2"
    assert report["sizes"]["pods"] == PODS


def test_the_table_and_the_chart_step(run: tuple[dict[str, Any], str, Path]) -> None:
    report, out, out_dir = run
    lines = out.splitlines()
    for row in report["rows"]:
        assert any(line.startswith(f"{row['workload']:13} {row['label']:40}") for line in lines)
    verdicts = [row["met"] for row in report["rows"] if row["met"] is not None]
    assert out.count("MISSED") >= verdicts.count(False)
    chart = out_dir / "chart.png"
    if chart.exists():  # matplotlib happens to be installed
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "chart skipped: matplotlib is not installed" in out


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--pods", "0"], "--pods and --burst must be at least 1"),
        (["--steady-rate", "-1"], "must be positive"),
        (["--bare-runs", "0"], "--bare-runs must be at least 1"),
        (["--rounds", "0"], "--rounds must be at least 1"),
        (["--skip", "nobody"], "invalid choice"),
        (["--chart-from", "missing.json", "--chart", "x.png"], "no such file"),
        (["--py-spy", "/proc/version/profiles"], "--py-spy: cannot create /proc/version/profiles"),
    ],
)
def test_a_bad_flag_is_one_line(args: list[str], complaint: str) -> None:
    result = run_command([sys.executable, str(BENCH)], *args)
    assert complaint in one_line_error(result, PROGRAM)


@pytest.mark.parametrize(
    ("runs", "peers", "before", "after"),
    [
        (5, 3, [1, 1, 1, 1], 1),  # the default: one beside every contender, one at the end
        (3, 3, [1, 0, 1, 0], 1),
        (2, 3, [1, 0, 0, 0], 1),
        (1, 3, [1, 0, 0, 0], 0),  # a single run: before everything
        (0, 3, [0, 0, 0, 0], 0),  # --skip bare
        (7, 1, [3, 3], 1),
    ],
)
def test_the_bare_reader_runs_first_last_and_between_the_contenders(
    monkeypatch: pytest.MonkeyPatch, runs: int, peers: int, before: list[int], after: int
) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import compare  # type: ignore[import-not-found]

    assert compare.bare_schedule(runs, peers) == (before, after)
