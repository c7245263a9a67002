"""However the demo ends (its terminal closes, ``kill -HUP``, ``kill -9``), nothing it started
keeps running; a dead processor is a failover to watch, a dead reflector one clear report.

Every demo here runs headless with a marker in its environment, which every child inherits
(redis-server included), so ``/proc`` finds whatever it left behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import subprocess
import termios
import threading
import time
import uuid
from pathlib import Path

import pytest

from informer_bus.status.collect import collect_status, status_client
from informer_bus.status.render import shard_ranges
from tests.app.demo.support import (
    DEMO,
    PROGRAM,
    assert_nothing_left,
    demo_env,
    pids,
    start_demo,
    stop,
    wait_for_output,
    wait_until_gone,
)
from tests.support.paths import ROOT

SMALL = ["--pods", "200", "--churn", "50", "--processors", "1", "--shard-count", "4"]
SYNCED = "pipeline synced after"
STARTED_CHILDREN = {"redis-server", "apiserver-sim", "reflector", "processor-1"}


def _take_terminal() -> None:
    """In the child: a session of its own whose controlling terminal is its stdin (a pty), as
    for a demo started from a terminal window (SIGINT and SIGHUP at their defaults:
    tests/support/inherited_signals.py)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class _TerminalReader:
    """Drains the pty master (a full pty would block the demo) until told to stop."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.data = bytearray()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # EIO: no process has the terminal open any more
                    return
                if not chunk:
                    return
                self.data += chunk

    def text(self) -> str:
        return self.data.decode(errors="replace")

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10)


def test_closing_the_terminal_stops_the_demo_in_order(tmp_path: Path) -> None:
    """The kernel's hangup (SIGHUP to the session leader, EIO on every later write) is a
    Ctrl-C: each child stops cleanly on SIGTERM (exit 0 says so) and none is left."""
    marker = uuid.uuid4().hex
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*DEMO, *SMALL, "--log-dir", str(tmp_path / "logs")],
        stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=demo_env(marker),
        start_new_session=True, preexec_fn=_take_terminal,  # noqa: PLW1509
    )  # fmt: skip
    os.close(slave)
    reader = _TerminalReader(master)
    try:
        deadline = time.monotonic() + 40
        while SYNCED not in reader.text():  # the live view (ANSI redraws) reaches synced
            assert process.poll() is None, reader.text()[-3000:]
            assert time.monotonic() < deadline, reader.text()[-3000:]
            time.sleep(0.1)
        assert "\x1b[H" in reader.text(), "a terminal gets the live view"
        started = pids(reader.text())
        assert set(started) == STARTED_CHILDREN
        reader.stop()
        os.close(master)  # the terminal window closes
        master = -1
        assert process.wait(40) == 0
    finally:
        reader.stop()
        if master >= 0:
            os.close(master)
        if process.poll() is None:  # whatever the test did, the demo does not outlive it
            process.kill()
            process.wait()
    wait_until_gone(started.values(), 10)
    assert_nothing_left(marker)
    log = (tmp_path / "logs" / "processor-1.log").read_text()
    assert re.search(r"processor demo-processor-1/\S+ stopped", log), log[-2000:]


def test_kill_hup_stops_the_demo_like_ctrl_c(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    out = tmp_path / "out.txt"
    process = start_demo(out, marker, *SMALL, "--log-dir", str(tmp_path / "logs"))
    try:
        started = pids(wait_for_output(out, process, SYNCED, 40))
        process.send_signal(signal.SIGHUP)
        assert process.wait(40) == 0, out.read_text()
    finally:
        stop(process)
    text = out.read_text()
    assert f"{PROGRAM}: SIGHUP: stopping (up to 65 s" in text
    assert text.rstrip().endswith(f"stopped cleanly; logs in {tmp_path / 'logs'}")
    assert set(started) == STARTED_CHILDREN
    wait_until_gone(started.values(), 10)
    assert_nothing_left(marker)


def test_kill_9_of_the_demo_takes_every_child_with_it(tmp_path: Path) -> None:
    """No cleanup can run in a SIGKILLed demo: the parent-death signal does the job, for the
    exec'd redis-server as for the Python children."""
    marker = uuid.uuid4().hex
    out = tmp_path / "out.txt"
    process = start_demo(out, marker, *SMALL, "--log-dir", str(tmp_path / "logs"))
    try:
        started = pids(wait_for_output(out, process, SYNCED, 40))
        assert set(started) == STARTED_CHILDREN
        process.kill()
        assert process.wait(10) == -signal.SIGKILL
    finally:
        stop(process)
    wait_until_gone(started.values(), 10)
    assert_nothing_left(marker)


REBALANCED = re.compile(
    r"shards rebalanced: processor-1 owns shards ([\d,-]+), processor-2 owns shards ([\d,-]+) "
    r"\(processor-1 owned (?:the same|([\d,-]+)) before it died\)"
)
"""The report once the restarted processor and the survivor share the shards again."""


def _status_lines_after(text: str, anchor: str) -> list[str]:
    return [line for line in text[text.index(anchor) :].splitlines() if line.startswith("[")]


def _holders(redis_url: str) -> dict[str, str]:
    """``{processor name: its shard ranges}`` as the shard leases in Redis say."""
    client = status_client(redis_url)
    try:
        group = collect_status(client, resources={"pods": 4}).resources[0].group()
    finally:
        client.close()
    assert group is not None
    held: dict[str, list[int]] = {}
    for shard in group.shards:
        assert shard.owner is not None, group
        member = shard.owner.split("/", 1)[0]
        held.setdefault(member.removeprefix("demo-"), []).append(shard.shard)
    return {name: shard_ranges(shards) for name, shards in held.items()}


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_killed_processor_fails_over_and_comes_back(tmp_path: Path) -> None:
    """kill -9 of a processor: one report, the survivor takes every shard over once the
    leases expire and the view calls the pipeline synced again without waiting for the dead
    one, the processor is restarted, and the demo says who owns which shards once they
    rebalanced, as Redis has it (not "again": the assignment is sticky, the shards it gets
    back are usually others); Ctrl-C then exits 0."""
    marker = uuid.uuid4().hex
    out = tmp_path / "out.txt"
    logs = tmp_path / "logs"
    process = start_demo(
        out, marker, "--pods", "200", "--churn", "50", "--processors", "2",
        "--shard-count", "4", "--lease-duration", "3", "--log-dir", str(logs),
    )  # fmt: skip
    try:
        started = pids(wait_for_output(out, process, SYNCED, 40))
        redis_url = re.search(r"private redis-server on (\S+)", out.read_text())
        assert redis_url, out.read_text()
        victim = started["processor-1"]
        os.kill(victim, signal.SIGKILL)
        text = wait_for_output(out, process, "shards rebalanced:", 90)
        holders = _holders(redis_url.group(1))
        restart = re.search(r"restarting processor-1 \(restart 1, pid (\d+)\)", text)
        assert restart, text
        process.send_signal(signal.SIGINT)
        assert process.wait(40) == 0, out.read_text()
    finally:
        stop(process)
    text = out.read_text()
    death = (
        f"processor-1 (pid {victim}) died: killed by SIGKILL; its log: {logs / 'processor-1.log'}"
    )
    assert text.count(f"(pid {victim})") == 1 and death in text, text
    assert "Traceback" not in text and "exited with status" not in text
    held_at_death = re.search(r"its shards ([\d,-]+) move to the other processors", text)
    assert held_at_death, text
    after_death = _status_lines_after(text, death)
    assert any(
        "owners 1 processors, 2/4 shards" in line and "synced no" in line
        for line in after_death
        if "processor-1: down, processor-2: 2 shards" in line
    ), "a killed processor's unexpired leases are not an owner:\n" + text
    takeover = re.search(r"shards [\d,-]+ of processor-1 taken over by processor-2", text)
    assert takeover, text
    alone = [line for line in _status_lines_after(text, takeover.group()) if
             "processor-1: down, processor-2: 4 shards" in line or
             "processor-1: starting (restarts 1), processor-2: 4 shards" in line]  # fmt: skip
    assert any("owners 1 processors, 4/4 shards" in line and "synced yes" in line
               for line in alone), f"the survivor alone is a synced pipeline:\n{text}"  # fmt: skip
    rebalanced = REBALANCED.search(text)
    assert rebalanced, text
    mine, theirs, before = rebalanced.groups()
    assert {"processor-1": mine, "processor-2": theirs} == holders, text
    if before is None:  # "owned the same"
        assert mine == held_at_death.group(1), text
    else:
        assert before == held_at_death.group(1) and mine != before, text
    assert text.rstrip().endswith(f"stopped cleanly; logs in {logs}")
    wait_until_gone([*started.values(), int(restart.group(1))], 10)
    assert_nothing_left(marker)


def test_a_dead_reflector_ends_the_demo_with_one_report(tmp_path: Path) -> None:
    marker = uuid.uuid4().hex
    out = tmp_path / "out.txt"
    logs = tmp_path / "logs"
    process = start_demo(out, marker, *SMALL, "--log-dir", str(logs))
    try:
        started = pids(wait_for_output(out, process, SYNCED, 40))
        os.kill(started["reflector"], signal.SIGKILL)
        assert process.wait(40) == 1, out.read_text()
    finally:
        stop(process)
    text = out.read_text()
    report = (f"{PROGRAM}: reflector (pid {started['reflector']}) died: killed by SIGKILL; its "
              f"log: {logs / 'reflector.log'}")  # fmt: skip
    assert text.count("reflector (pid") == 1 and report in text, text
    label = text.index(f"{PROGRAM}: last lines of reflector.log:")
    assert label > text.index(report)
    assert "stopped cleanly" not in text and text.rstrip().endswith(f"stopped; logs in {logs}")
    assert "processor-1 (pid" not in text and "had to be killed" not in text, text
    wait_until_gone(started.values(), 10)
    assert_nothing_left(marker)
