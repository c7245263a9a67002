"""The demo's restart cap, with real children that die at startup: a processor that can never
start is retried a few times with a growing backoff, then given up, loudly."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

from informer_bus.demo.children import Processor
from informer_bus.demo.settings import MAX_FAILED_STARTS, DemoSettings
from informer_bus.demo.supervisor import Demo
from informer_bus.demo.view import Output, View, ViewState
from informer_bus.local_redis import free_port

CRASH = [sys.executable, "-c", "import sys; print('cannot start', flush=True); sys.exit(3)"]
STAY = [sys.executable, "-c", "import time; time.sleep(60)"]


def _demo(tmp_path: Path, commands: list[list[str]]) -> tuple[Demo, View, io.StringIO]:
    sink = io.StringIO()
    settings = DemoSettings(processors=len(commands), log_dir=str(tmp_path))
    demo = Demo(settings, out=Output(sink), live=False)
    for number, command in enumerate(commands, 1):
        child = Processor(number, [], tmp_path / f"processor-{number}.log")
        child.args = command
        demo.processors.append(child)
        child.start({})
    view = View(
        redis_url=f"redis://127.0.0.1:{free_port()}/0", prefix="ib", resource="pods",
        shard_count=1, processors=demo.processors, header=[], out=Output(sink), live=False,
    )  # fmt: skip
    return demo, view, sink


def _supervise_until_done(demo: Demo, view: View, timeout: float) -> int | None:
    """Run the supervision ticks until every crashing processor is given up."""
    state = ViewState(0.0, None, None, None, None, ready=0, processors=len(demo.processors))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = demo._supervise(state, view)
        if ended is not None or any(p.given_up for p in demo.processors):
            return ended
        time.sleep(0.05)
    raise AssertionError("the crashing processor was never given up")


def test_a_processor_that_never_starts_is_given_up_and_the_others_go_on(tmp_path: Path) -> None:
    demo, view, sink = _demo(tmp_path, [CRASH, STAY])
    try:
        started = time.monotonic()
        assert _supervise_until_done(demo, view, 30) is None
        elapsed = time.monotonic() - started
    finally:
        demo._shutdown()
        view.close()
    text = sink.getvalue()
    log = tmp_path / "processor-1.log"
    assert text.count("processor-1 (pid") == MAX_FAILED_STARTS, text
    assert text.count(f"died: exited with status 3; its log: {log}") == MAX_FAILED_STARTS
    assert "restarting processor-1 (restart 2," in text and "(restart 3," not in text
    assert (f"processor-1 died {MAX_FAILED_STARTS} times in a row before its caches synced: "
            "not restarting it; going on with processor-2") in text  # fmt: skip
    assert elapsed >= 1 + 2, "a backoff of 1 s, then 2 s, between the starts"
    assert log.read_text().count("cannot start") == MAX_FAILED_STARTS
    assert not demo.processors[1].running


def test_no_processor_left_ends_the_demo(tmp_path: Path) -> None:
    demo, view, sink = _demo(tmp_path, [CRASH])
    try:
        assert _supervise_until_done(demo, view, 30) == 1
    finally:
        demo._shutdown()
        view.close()
    assert "no processor left, stopping" in sink.getvalue()
