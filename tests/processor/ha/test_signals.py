"""A processor stopped by real signals, as a terminal, ``timeout`` and an orchestrator send them.

Issue 34, point 1: a second Ctrl-C during a slow stop raised ``KeyboardInterrupt`` inside a
``thread.join`` and the process then waited forever for its other threads (``timeout -s INT``,
which signals the child and then its process group, hung for minutes). The rule now
(``common/signalled_stop.py``, docs/operations.md): the first signal stops cleanly within a
bound it states, a second one ends the process at once saying what it abandons.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from apiserver_sim import Simulator
from common.signalled_stop import SAME_REQUEST
from reflector_svc.service import ReflectorService
from tests.processor.ha.test_cli import CONSOLE
from tests.support.bus import Bus, ProcessorProcess
from tests.support.paths import ROOT
from tests.support.processor_ha import processor_settings
from tests.support.redis_server import RedisServer
from tests.support.waiting import wait_until

PODS = 3000


def _buffered(processor: ProcessorProcess) -> float:
    """Notifications in the handlers' buffers (the one being handled included)."""
    with urllib.request.urlopen(processor.url() + "/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "informer_bus_processor_handler_buffer"
    )


def _published(sim: Simulator, bus: Bus, start_reflector: Callable[[], ReflectorService]) -> None:
    sim.populate("pods", PODS, seed=34)
    start_reflector()
    wait_until(bus.synced, 60, what="the reflector to sync")


def test_ctrl_c_twice_during_an_initial_list_ends_the_processor_at_once(
    sim: Simulator,
    bus: Bus,
    start_reflector: Callable[[], ReflectorService],
    spawn: Callable[..., ProcessorProcess],
) -> None:
    _published(sim, bus, start_reflector)
    # Every handler call sleeps 60 s: the clean stop waits for the one running (grace 120 s).
    p1 = spawn("p1", env={"IB_RECORD_DELAY": "60"}, shutdown_grace=120)
    wait_until(lambda: _buffered(p1) > 1, 60, what="the initial list to reach the handler")
    assert p1.probe("/readyz") == 503  # its initial list is still being delivered

    p1.send(signal.SIGINT)
    wait_until(lambda: "SIGINT: stopping (up to 125 s" in p1.log(), 30, what="the first stop")
    time.sleep(SAME_REQUEST + 0.1)  # a second Ctrl-C, not the first one delivered twice
    p1.send(signal.SIGINT)
    status = p1.wait(20)  # a liveness bound: the clean stop would have taken 60 s

    log = p1.log()
    assert status == 130, log[-3000:]
    assert "Traceback" not in log
    assert "second signal (SIGINT) while stopping: exiting with status 130, abandoning " in log
    assert "1 running handler call" in log


def test_timeout_s_int_stops_the_processor_cleanly_within_its_bound(
    sim: Simulator,
    bus: Bus,
    start_reflector: Callable[[], ReflectorService],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """``timeout -s INT 8 informer-bus processor ...``: the child gets SIGINT twice (directly,
    then as a member of timeout's process group), which is one request to stop."""
    _published(sim, bus, start_reflector)
    args: list[str] = []
    for name, value in processor_settings(redis_server.url, "p1").items():
        args += ["--" + name.replace("_", "-"), value]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("INFORMER_BUS_", "IB_"))}
    env = {**clean, "IB_RECORD_FILE": str(tmp_path / "p1.jsonl"), "IB_RECORD_DELAY": "0.05"}
    log_path = tmp_path / "p1.log"
    started = time.monotonic()
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            ["timeout", "-s", "INT", "8", *CONSOLE, *args], stdout=log_file,
            stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        status = process.wait(timeout=8 + 15 + 15)  # the signal, the stop's bound, slack
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    elapsed = time.monotonic() - started
    log = log_path.read_text(errors="replace")
    print(f"timeout -s INT 8: ended after {elapsed:.1f} s")
    assert status == 124, log[-3000:]  # timeout's status: it had to signal, the child obeyed
    assert "processor p1/" in log and "started" in log  # it was running when signalled
    assert "SIGINT: stopping (up to 15 s" in log
    assert "while stopping" not in log  # the group's copy of the signal was no second request
    assert "handed back shards 0-7" in log
    assert "Traceback" not in log
