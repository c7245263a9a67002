"""examples/nodejs-consumer against a real pipeline: docs/wire.md is enough to read the bus.

The Node.js consumer implements docs/wire.md with no Python behind it; it must print exactly
what ``informer-bus subscribe`` prints for the same streams (every delta type, a relist's
tombstone), and its known-state read exactly what a new durable group's initial list holds.
Node.js and npm are requirements of this test, not options: without them it fails, saying so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pytest

from tests.support.bus import Entry
from tests.support.cli import run_command
from tests.support.paths import ROOT
from tests.support.subscribe_cli import Pipeline, json_lines, run_subscribe
from tests.support.waiting import wait_until

EXAMPLE = ROOT / "examples" / "nodejs-consumer"
# What the comparison covers: everything subscribe prints, the stream name included.
Line = dict[str, Any]


@pytest.fixture(scope="session")
def node_consumer(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """``node consumer.mjs`` in a copy of the example with its locked dependencies installed
    (``npm ci``, once per session; the working tree gets no node_modules)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(
            "node and npm are required by this test (Node.js >= 20: examples/nodejs-consumer); "
            f"not found on PATH (node: {node}, npm: {npm})"
        )
    copy = tmp_path_factory.mktemp("nodejs-consumer")
    for name in ("package.json", "package-lock.json", "consumer.mjs", "envelope.mjs"):
        shutil.copy(EXAMPLE / name, copy / name)
    installed = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=copy, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    if installed.returncode != 0:
        pytest.fail(f"npm ci failed in {copy}:\n{installed.stdout}\n{installed.stderr}")
    return [node, str(copy / "consumer.mjs")]


def run_node(command: Sequence[str], redis_url: str, *args: str) -> list[Line]:
    result = run_command(command, "--redis-url", redis_url, "--resource", "pods", *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json_lines(result.stdout)


def per_shard(lines: list[Line]) -> dict[int, list[Line]]:
    shards: dict[int, list[Line]] = defaultdict(list)
    for line in lines:
        shards[line["shard"]].append(line)
    return dict(shards)


def make_tombstone(pipeline: Pipeline, key: str) -> None:
    """Delete ``key`` where no watch sees it and make the reflector relist: compacted history
    answers its re-watch with 410, and the relist diff publishes a tombstone."""
    pipeline.sim.silent_delete("pods", key)
    pipeline.sim.compact()
    pipeline.sim.drop_watches()

    def published() -> bool:
        entries = pipeline.bus.by_key().get(key, [])
        return bool(entries) and entries[-1].tombstone

    wait_until(published, 60, what=f"the tombstone of {key} on the bus")


def churn(pipeline: Pipeline) -> list[Entry]:
    """Creates, updates, deletions and a tombstone, all on the bus; every entry, by shard."""
    keys = pipeline.churn(updates=5, deletions=3)
    namespace = keys[0].partition("/")[0]
    for name in ("wire-spec-a", "wire-spec-b"):
        pipeline.sim.create("pods", {"metadata": {"name": name, "namespace": namespace}})
    wait_until(pipeline.caught_up, 30, what="the creations on the bus")
    make_tombstone(pipeline, keys[-1])
    return pipeline.bus.all_entries()


@pytest.mark.timeout(240)
def test_the_node_consumer_sees_what_subscribe_sees(
    pipeline: Pipeline, node_consumer: list[str]
) -> None:
    on_the_bus = churn(pipeline)
    count = str(len(on_the_bus))
    url = pipeline.reflector.settings.redis.url

    python = run_subscribe(url, "pods", "--from-beginning", "-o", "json", "--count", count)
    assert python.returncode == 0, python.stderr
    expected = json_lines(python.stdout)
    node = run_node(node_consumer, url, "--from-beginning", "--count", count)

    assert len(node) == len(expected) == len(on_the_bus)
    # the same deltas, shard by shard in stream order, every printed field equal
    assert per_shard(node) == per_shard(expected)
    assert sorted(node, key=lambda d: (d["shard"], d["id"])) == sorted(
        expected, key=lambda d: (d["shard"], d["id"])
    )
    # and this really covered what the brief of the wire names: every kind of delta
    kinds = {(d["type"], d["tombstone"]) for d in node}
    assert {("Added", False), ("Updated", False), ("Deleted", False), ("Deleted", True)} <= kinds
    assert any(d["key"].endswith("/wire-spec-a") for d in node)


@pytest.mark.timeout(240)
def test_the_node_consumers_snapshot_is_a_new_durable_groups_initial_list(
    pipeline: Pipeline, node_consumer: list[str]
) -> None:
    pipeline.churn(updates=4, deletions=2)
    url = pipeline.reflector.settings.redis.url
    live = len(pipeline.sim.ground_truth("pods"))
    count = str(live)

    python = run_subscribe(url, "pods", "--group", "wire-spec", "-o", "json", "--count", count)
    assert python.returncode == 0, python.stderr
    expected = json_lines(python.stdout)
    node = run_node(node_consumer, url, "--snapshot", "--count", count)

    assert len(node) == len(expected) == live
    assert all(d["initial"] and d["type"] == "Added" for d in node)
    # shard after shard, keys sorted, each "as of" its stream's last entry: line for line
    assert node == expected
    assert {d["key"] for d in node} == set(pipeline.sim.ground_truth("pods"))
