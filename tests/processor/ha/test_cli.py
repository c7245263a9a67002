"""``python -m processor_svc`` and ``informer-bus processor``: help, user mistakes, SIGTERM.

Issue 5, points 8 and 10: every flag also as an ``INFORMER_BUS_*`` env var; a user mistake ends
with one line and exit status 2, never a traceback; SIGTERM drains, acknowledges and releases
the shard leases at once, so another processor takes over without waiting for them to expire.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from common.sharding import shard_ranges
from informer_bus.apiserver_sim import Simulator
from reflector_svc.service import ReflectorService
from tests.processor.ha.conftest import (
    HANDLER,
    SHARDS,
    wait_balanced,
    wait_converged,
)
from tests.support.bus import Bus, ProcessorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[3]
MODULE = [sys.executable, "-m", "processor_svc"]
CONSOLE = [str(Path(sys.executable).with_name("informer-bus")), "processor"]
EXAMPLE = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"


def _run(
    command: Sequence[str], *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_command(command, *args, env=env)


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    return one_line_error(result, "informer-bus processor")


@pytest.mark.parametrize("command", [MODULE, CONSOLE], ids=["python-m", "informer-bus"])
def test_help_explains_every_flag_and_its_env_var(command: list[str]) -> None:
    result = _run(command, "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines
    assert "per-shard indexed caches" in text
    assert "INFORMER_BUS_<NAME>" in text
    for flag, env in [
        ("--resource", "INFORMER_BUS_RESOURCE"),
        ("--handler", "INFORMER_BUS_HANDLER"),
        ("--redis-url", "INFORMER_BUS_REDIS_URL"),
        ("--shard-count", "INFORMER_BUS_SHARD_COUNT"),
        ("--member-id", "INFORMER_BUS_MEMBER_ID"),
        ("--heartbeat-interval", "INFORMER_BUS_HEARTBEAT_INTERVAL"),
        ("--member-ttl", "INFORMER_BUS_MEMBER_TTL"),
        ("--lease-duration", "INFORMER_BUS_LEASE_DURATION"),
        ("--renew-deadline", "INFORMER_BUS_RENEW_DEADLINE"),
        ("--retry-period", "INFORMER_BUS_RETRY_PERIOD"),
        ("--buffer-size", "INFORMER_BUS_BUFFER_SIZE"),
        ("--shutdown-grace", "INFORMER_BUS_SHUTDOWN_GRACE"),
        ("--http-port", "INFORMER_BUS_HTTP_PORT"),
    ]:
        assert flag in text
        assert f"env {env}" in text
    assert "default: 15.0" in text  # client-go's lease duration
    assert "MODULE:ATTR" in text


@pytest.mark.parametrize("command", [MODULE, CONSOLE], ids=["python-m", "informer-bus"])
def test_no_handler_is_a_one_line_error(command: list[str]) -> None:
    line = _one_line_error(_run(command, "--redis-url", "redis://127.0.0.1:1/0"))
    assert "--handler" in line


@pytest.mark.parametrize(
    ("reference", "env", "expected"),
    [
        ("nosuch.module:Thing", {}, "No module named 'nosuch'"),
        ("tests.support.recording_handler:Missing", {}, "Missing"),
        ("tests.support.recording_handler", {}, "expected MODULE:ATTR"),
        # The factory itself fails (it needs IB_RECORD_FILE): its error, in one line.
        (HANDLER, {}, "IB_RECORD_FILE"),
    ],
    ids=["no-module", "no-attribute", "no-colon", "factory-fails"],
)
def test_a_bad_handler_reference_is_a_one_line_error_naming_it(
    reference: str, env: dict[str, str], expected: str
) -> None:
    line = _one_line_error(_run(MODULE, "--handler", reference, env=env))
    assert reference in line
    assert expected in line


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--renew-deadline", "20"], {}, "renew_deadline"),
        (["--lease-duration", "1", "--renew-deadline", "2"], {}, "renew_deadline"),
        (["--retry-period", "9"], {}, "retry_period"),
        (["--shard-count", "0"], {}, "shard_count"),
        (["--heartbeat-interval", "5", "--member-ttl", "1"], {}, "member_ttl"),
        ([], {"INFORMER_BUS_MEMBER_TTL": "0.5"}, "member_ttl"),
        ([], {"INFORMER_BUS_BUFFER_SIZE": "-1"}, "buffer_size"),
        ([], {"INFORMER_BUS_SHARD_COUNT": "many"}, "INFORMER_BUS_SHARD_COUNT"),
    ],
    ids=[
        "deadline-over-lease", "deadline-over-short-lease", "retry-over-deadline",
        "shard-count-0", "heartbeat-over-ttl", "env-ttl-under-heartbeat", "env-negative-buffer",
        "env-not-a-number",
    ],
)  # fmt: skip
def test_bad_numbers_are_a_one_line_error(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    line = _one_line_error(_run(MODULE, "--handler", EXAMPLE, *args, env=env))
    assert expected in line  # names the setting (the wording is the settings' business)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--label-selector", "app in (a"], 'label selector "app in (a": unclosed "("'),
        (["--label-selector", "app=web,,x"], 'label selector "app=web,,x"'),
        (["--field-selector", "spec.foo=x"], "field label not supported for pods: spec.foo"),
        (["--project", "spec..x"], "spec..x"),
        (["--project", ""], "project"),
        (["--group", "a:b"], "group name 'a:b' is invalid"),
    ],
    ids=["unclosed-set", "empty-term", "unknown-field", "empty-path-part", "empty", "group"],
)
def test_a_malformed_view_or_group_is_a_one_line_error_naming_the_mistake(
    args: list[str], expected: str
) -> None:
    line = _one_line_error(_run(CONSOLE, "--handler", EXAMPLE, *args))
    assert expected in line


def test_a_flag_that_does_not_parse_is_an_argparse_error_without_traceback() -> None:
    result = _run(MODULE, "--handler", EXAMPLE, "--lease-duration", "long")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "argument --lease-duration: invalid float value: 'long'" in result.stderr


def test_sigterm_exits_0_and_hands_the_shards_over_at_once(
    sim: Simulator,
    bus: Bus,
    start_reflector: Callable[[], ReflectorService],
    spawn: Callable[..., ProcessorProcess],
    tmp_path: Path,
) -> None:
    sim.populate("pods", 200, seed=21)
    start_reflector()
    wait_until(bus.synced, 30, what="the reflector to sync")
    # 30 s leases: a shard that moves within seconds was released, not left to expire.
    slow_leases = {"lease_duration": 30.0, "renew_deadline": 20.0}
    # The first processor is configured through the environment alone.
    p1 = spawn("p1", by_env=True, **slow_leases)
    wait_balanced(bus, [p1])
    assert p1.owned_shards(bus) == list(range(SHARDS))
    # A second processor: p1 hands half of its shards over (released, not expired).
    p2 = spawn("p2", **slow_leases)
    wait_balanced(bus, [p1, p2], timeout=15)
    kept = p1.owned_shards(bus)
    assert len(kept) == SHARDS // 2

    sim.start_churn(rate=200, seconds=1, seed=21).wait(10)
    stopping = time.monotonic()
    assert p1.terminate(timeout=20) == 0
    assert time.monotonic() - stopping < 10
    holders = bus.shard_holders()
    assert not [s for s in kept if p1.holds(holders[s])], f"leases not released: {holders}"
    assert not [m for m in bus.members() if m.startswith("p1/")], "p1 did not leave"
    assert "Traceback" not in p1.log()
    assert "processor p1/" in p1.log() and "stopped" in p1.log()
    # Issue 34: one line for the shards handed back, not a "lost shard" line per shard.
    assert "SIGTERM: stopping (up to 15 s" in p1.log()
    assert f"stopping: handed back shards {shard_ranges(kept)}" in p1.log()
    assert "): stopping" not in p1.log()

    # p2 takes every shard over long before a 30 s lease could have expired.
    calls = wait_converged(bus, sim, [p2], tmp_path, timeout=15)
    assert p2.owned_shards(bus) == list(range(SHARDS))
    # ... with an initial list of each shard it took.
    initial = {c.shard for c in calls if c.member == "p2" and c.kind == "add" and c.initial}
    assert set(kept) <= initial
