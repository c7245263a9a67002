"""bench/compare_targets.py: each of issue 35's targets reads its own figures from the run's rows
(the right row, the right process, the median of its rounds) and is judged at its bound as it is
printed; a skipped contender leaves its targets unmeasured, not passed."""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import ROOT

Row = dict[str, Any]


@pytest.fixture
def targets(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # the benches import each other as scripts
    return importlib.import_module("compare_targets")


def row(workload: str, contender: str, in_all: float, **fields: Any) -> Row:
    return {"workload": workload, "contender": contender, "cpu_in_all_us_per_event": in_all,
            "cpu_us_per_event": fields.pop("cpu", {"contender": in_all}), **fields}  # fmt: skip


def ours(processors: float, in_all: float) -> dict[str, float]:
    return {"reflector": (in_all - processors) / 2, "redis": (in_all - processors) / 2,
            "processors": processors, "processor-0": processors}  # fmt: skip


def threads(peak: int) -> dict[str, int]:
    return {"peak": peak, "bench_handler": 1, "distinct": peak, "samples": 100}


def at_the_bounds() -> list[Row]:
    """A run whose every issue-35 figure sits exactly on its bound: every one passes."""
    return [
        row("watch burst", "bare", 20.0, events_per_s=9000.0),
        row("watch burst", "sharedinformer", 420.0, events_per_s=1000.0),
        row("watch burst", "informer-bus/1", 140.0, cpu=ours(36.0, 140.0), events_per_s=5000.0,
            threads=threads(7)),
        row("watch burst", "informer-bus/1/key-only", 120.0, cpu=ours(20.0, 120.0),
            events_per_s=6000.0, threads=threads(7)),
        row("watch burst", "informer-bus/2", 150.0, cpu=ours(60.0, 150.0), events_per_s=4000.0,
            threads=threads(30)),  # not the processor owning 16 shards
        row("steady", "bare", 100.0, p99_ms=1.0),
        row("steady", "sharedinformer", 500.0, p99_ms=2.0),
        row("steady", "informer-bus/1", 300.0, cpu=ours(200.0, 300.0), p99_ms=10.0),
        row("initial sync", "bare", 10.0, seconds=4.0),
        row("initial sync", "sharedinformer", 10.0, seconds=50.0),
        row("initial sync", "informer-bus/4", 10.0, cpu=ours(5.0, 10.0), seconds=10.0),
        row("warm restart", "informer-bus/4", 10.0, cpu=ours(5.0, 10.0), seconds=4.0),
    ]  # fmt: skip


BOUNDS = [1.0, 1.8, 7.0, 3.0, 2.0, 0.6, 10.0, 5.0, 5.0, 6.0]


def find(rows: list[Row], workload: str, contender: str) -> Row:
    return next(r for r in rows if (r["workload"], r["contender"]) == (workload, contender))


def test_every_figure_on_its_bound_passes(targets: ModuleType) -> None:
    judged = targets.issue35_targets(at_the_bounds())
    assert [t["value"] for t in judged] == BOUNDS
    assert [t["met"] for t in judged] == [True] * len(BOUNDS)
    assert [t["target"] for t in judged] == [
        "<= 1",
        "<= 1.8",
        "<= 7",
        ">= 3",
        "<= 2",
        "<= 0.6",
        "<= 10",
        ">= 5",
        ">= 5",
        "<= 6",
    ]


def _set(workload: str, contender: str, **fields: Any) -> Callable[[list[Row]], None]:
    def change(rows: list[Row]) -> None:
        target = find(rows, workload, contender)
        for name, value in fields.items():
            if name == "processors":
                target["cpu_us_per_event"]["processors"] = value
            else:
                target[name] = value

    return change


@pytest.mark.parametrize(
    ("missed", "change"),
    [
        ({0}, _set("watch burst", "informer-bus/1/key-only", processors=20.2)),
        ({1}, _set("watch burst", "informer-bus/1", processors=36.2)),
        ({2}, _set("watch burst", "informer-bus/1", cpu_in_all_us_per_event=140.2)),
        ({0, 1, 2}, _set("watch burst", "bare", cpu_in_all_us_per_event=19.9)),  # the yardstick
        ({3}, _set("watch burst", "sharedinformer", cpu_in_all_us_per_event=419.0)),
        ({4}, _set("steady", "informer-bus/1", processors=201.0)),
        ({4}, _set("steady", "bare", cpu_in_all_us_per_event=99.0)),
        ({5}, _set("steady", "sharedinformer", cpu_in_all_us_per_event=495.0)),
        ({6}, _set("steady", "informer-bus/1", p99_ms=10.01)),
        ({7}, _set("watch burst", "sharedinformer", events_per_s=1002.0)),
        ({8}, _set("initial sync", "informer-bus/4", seconds=10.02)),
        ({9}, _set("watch burst", "informer-bus/1/key-only", threads=threads(8))),
        ({9}, _set("watch burst", "informer-bus/1", threads=threads(8))),
    ],
)
def test_a_figure_past_its_bound_misses_its_targets_alone(
    targets: ModuleType, missed: set[int], change: Callable[[list[Row]], None]
) -> None:
    rows = copy.deepcopy(at_the_bounds())
    change(rows)
    judged = targets.issue35_targets(rows)
    assert {i for i, t in enumerate(judged) if t["met"] is False} == missed, judged
    assert all(t["met"] is not None for t in judged)


def test_a_process_figure_is_the_median_of_the_rounds_not_the_picked_rounds(
    targets: ModuleType,
) -> None:
    """A row is the round with the median CPU in all; its processor's figure in that round may
    be an outlier of the processor's own rounds."""
    rows = at_the_bounds()
    burst = find(rows, "watch burst", "informer-bus/1")
    burst["cpu_us_per_event"]["processors"] = 50.0  # 2.5x in the picked round
    burst["cpu_part_runs"] = {"processors": [50.0, 36.0, 30.0], "redis": [1.0, None, 2.0]}
    [_, reads_new, *_] = targets.issue35_targets(rows)
    assert (reads_new["value"], reads_new["met"]) == (1.8, True)


def test_a_value_is_judged_as_it_is_printed(targets: ModuleType) -> None:
    rows = at_the_bounds()
    find(rows, "watch burst", "informer-bus/1/key-only")["cpu_us_per_event"]["processors"] = 20.09
    [key_only, *_] = targets.issue35_targets(rows)
    assert targets.target_line(key_only).endswith(": 1.00 (<= 1) PASS")
    find(rows, "watch burst", "informer-bus/1/key-only")["cpu_us_per_event"]["processors"] = 20.1
    [key_only, *_] = targets.issue35_targets(rows)
    assert targets.target_line(key_only).endswith(": 1.01 (<= 1) MISS")


def test_a_skipped_contender_is_not_measured(targets: ModuleType) -> None:
    rows = [r for r in at_the_bounds() if r["contender"] != "sharedinformer"]
    judged = targets.issue35_targets(rows)
    unmeasured = {i for i, t in enumerate(judged) if t["met"] is None}
    assert unmeasured == {3, 5, 7, 8}  # every ratio to SharedInformer
    assert targets.target_line(judged[3]).endswith("(>= 3) not measured")
    assert all(judged[i]["met"] for i in set(range(len(judged))) - unmeasured)


def test_no_key_only_row_leaves_its_target_unmeasured(targets: ModuleType) -> None:
    rows = [r for r in at_the_bounds() if not r["contender"].endswith("key-only")]
    judged = targets.issue35_targets(rows)
    assert judged[0]["met"] is None
    assert judged[9]["value"] == 6  # the other 1-processor burst's threads


def test_issue16_keeps_only_what_issue35_does_not_restate(targets: ModuleType) -> None:
    every = targets.targets(at_the_bounds())
    assert [t["issue"] for t in every] == [35] * 10 + [16] * 7
    sixteen = [t["what"] for t in every if t["issue"] == 16]
    thirty_five = [t["what"] for t in every if t["issue"] == 35]
    assert not set(sixteen) & set(thirty_five) - {
        "burst CPU/event, SharedInformer's / informer-bus' in all (1 processor)"
    }
    shared = [t for t in every if t["what"].startswith("burst CPU/event, SharedInformer's")]
    assert [(t["issue"], t["target"]) for t in shared] == [(35, ">= 3"), (16, ">= 4")]


def test_the_key_only_row_is_never_the_peers_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 8's burst ratios compare the peers with informer-bus running the peers' handler:
    a faster key-only row must not become their reference."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    report = importlib.import_module("compare_report")
    results = [
        report.Result("watch burst", "informer-bus/1", "ours", 1000, 1.0, 50.0),
        report.Result("watch burst", "informer-bus/1/key-only", "keys", 1000, 0.5, 50.0),
        report.Result("watch burst", "sharedinformer", "theirs", 1000, 10.0, 50.0),
    ]
    rows = {r["contender"]: r for r in report.rows(results)}
    assert rows["sharedinformer"]["ratio"] == 10.0
    assert rows["sharedinformer"]["reference"] == "ours"
