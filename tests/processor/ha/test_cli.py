"""``python -m processor_svc`` and ``informer-bus processor``: help, user mistakes, SIGTERM.

Issue 5, points 8 and 10: every flag also as an ``INFORMER_BUS_*`` env var; a user mistake ends
with one line and exit status 2, never a traceback; SIGTERM drains, acknowledges and releases
the shard leases at once, so another processor takes over without waiting for them to expire.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from apiserver_sim import Simulator
from common.sharding import shard_ranges
from reflector_svc.service import ReflectorService
from tests.support.bus import Bus, ProcessorProcess
from tests.support.cli import one_line_error, run_command
from tests.support.processor_ha import SHARDS, wait_balanced, wait_converged
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

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
        ("--max-concurrent-reconciles", "INFORMER_BUS_MAX_CONCURRENT_RECONCILES"),
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
    ],
    ids=["no-module", "no-attribute", "no-colon"],
)
def test_a_bad_handler_reference_is_a_one_line_error_naming_it(
    reference: str, env: dict[str, str], expected: str
) -> None:
    line = _one_line_error(_run(MODULE, "--handler", reference, env=env))
    assert reference in line
    assert expected in line


def test_a_handler_module_in_the_working_directory_loads(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """Issue 34: ``--handler myhandler:RecDel`` beside ``myhandler.py`` failed with "No module
    named 'myhandler'" from the informer-bus script (``python -m`` finds it: so does it now)."""
    (tmp_path / "myhandler.py").write_text(_HANDLER_SOURCE)
    log_path = tmp_path / "processor.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*CONSOLE, "--handler", "myhandler:RecDel", "--redis-url", redis_server.url,
             "--http-host", "127.0.0.1", "--http-port", "0"],
            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=_clean_env(),
        )  # fmt: skip
    try:
        wait_until(lambda: "started for pods" in log_path.read_text() or process.poll(), 30)
        assert process.poll() is None, log_path.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


_HANDLER_SOURCE = """
class RecDel:
    def __init__(self, context):
        self.context = context

    def on_add(self, obj, is_in_initial_list):
        pass

    def on_update(self, old, new):
        pass

    def on_delete(self, obj):
        pass
"""


class _Failure(NamedTuple):
    """A handler module that fails, and what the error says."""

    source: str
    reference: str
    summary: str
    """The one error line, after ``informer-bus processor: error:``."""
    where: list[str]
    """Texts of the user's frames."""
    last: str
    """How the traceback's last line starts (``Type: message``)."""


_FAILURES = [
    _Failure(
        "import json\nimport not_installed_here\n", "broken:H",
        "handler 'broken:H': cannot import module 'broken' for 'broken:H': No module named "
        "'not_installed_here'", ["line 2, in <module>", "import not_installed_here"],
        "ModuleNotFoundError: No module named 'not_installed_here'",
    ),
    _Failure(
        "class H:\n    def __init__(self, context):\n        setup()\n\n\n"
        "def setup():\n    raise RuntimeError('boom in ctor')\n", "ctorfail:H",
        "handler factory 'ctorfail:H' failed: RuntimeError: boom in ctor",
        ["line 3, in __init__", "line 7, in setup", "raise RuntimeError('boom in ctor')"],
        "RuntimeError: boom in ctor",
    ),
    _Failure(
        "def broken(:\n    pass\n", "syntax:H",
        "handler 'syntax:H': importing 'syntax' for 'syntax:H' failed: SyntaxError",
        ["line 1", "def broken(:"], "SyntaxError: ",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "failure", _FAILURES, ids=["import-error", "constructor-fails", "syntax-error"]
)
def test_a_failing_handler_shows_the_users_own_traceback(tmp_path: Path, failure: _Failure) -> None:
    """Issue 34: an import error or a failing constructor was one line without a file or a
    line number. Now: that line, then the traceback of the user's frames only."""
    module = failure.reference.partition(":")[0]
    (tmp_path / f"{module}.py").write_text(failure.source)
    result = subprocess.run(
        [*CONSOLE, "--handler", failure.reference], capture_output=True, text=True,
        cwd=tmp_path, env=_clean_env(), timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    first, *rest = result.stderr.splitlines()
    assert first.startswith(f"informer-bus processor: error: {failure.summary}"), result.stderr
    assert f'File "{tmp_path / module}.py", ' in result.stderr
    for text in failure.where:
        assert text in result.stderr
    assert rest[-1].startswith(failure.last)
    for ours in ("processor_svc", "common/plugins.py", "importlib", "informer_bus"):
        assert ours not in "\n".join(rest), result.stderr


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("INFORMER_BUS_", "IB_"))}


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
        ([], {"INFORMER_BUS_MAX_CONCURRENT_RECONCILES": "0"}, "max_concurrent_reconciles"),
        ([], {"INFORMER_BUS_SHARD_COUNT": "many"}, "INFORMER_BUS_SHARD_COUNT"),
    ],
    ids=[
        "deadline-over-lease", "deadline-over-short-lease", "retry-over-deadline",
        "shard-count-0", "heartbeat-over-ttl", "env-ttl-under-heartbeat", "env-negative-buffer",
        "env-no-concurrency", "env-not-a-number",
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
