"""``apiserver-sim`` (or ``python -m apiserver_sim``): serve in the foreground until a stop signal.

Flags are generated from :class:`SimulatorSettings`, so the command line, the env vars and the
Python API can never disagree. The first line on stdout is ``apiserver-sim listening on URL``
once the server answers (``SimulatorProcess`` and the demo wait for it); a mistake ends with one
line and exit status 2, never a traceback. SIGTERM, SIGINT and SIGHUP stop it cleanly (a hangup
that whoever started it ignored, as ``nohup`` does, stays ignored); a second one while it stops
ends it at once, with status 1.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from apiserver_sim.settings import SettingsError, SimulatorSettings
from apiserver_sim.simulator import Simulator

__all__ = ["PROGRAM", "READY_PREFIX", "build_parser", "main", "serve"]

PROGRAM = "apiserver-sim"
READY_PREFIX = "apiserver-sim listening on "

HELP = (
    "Run a simulated Kubernetes API server (list/watch/bookmarks/watch-list, pods, configmaps, "
    "secrets, nodes, namespaces, events, example.com/v1 widgets) with fault injection under "
    "/_sim/. Every flag can also be set with the INFORMER_BUS_SIM_<NAME> environment variable "
    "shown in its help; flags win over the environment."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=HELP)
    SimulatorSettings.add_flags(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = SimulatorSettings.from_args(args)
    except SettingsError as exc:
        return _fail(str(exc))
    return serve(settings)


def _fail(message: str) -> int:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)
    return 2


class _StopSignals:
    """The stop signals as an event while serving; a second one while stopping exits at once
    (the stop joins the server's threads, which a hung client could make slow)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.stopping = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            os.write(2, f"{PROGRAM}: {signal.Signals(signum).name} again, exiting now\n".encode())
            os._exit(1)
        self.requested.set()

    def install(self) -> dict[int, object]:
        wanted = [signal.SIGTERM, signal.SIGINT]
        if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            wanted.append(signal.SIGHUP)
        return {int(signum): signal.signal(signum, self) for signum in wanted}


def serve(settings: SimulatorSettings) -> int:
    """Serve ``settings`` until a stop signal; the exit status. The process's main: it tunes the
    garbage collector for a long-lived heap and leaves it so."""
    simulator = Simulator(settings)
    signals = _StopSignals()
    previous = signals.install()
    try:
        try:
            simulator.start()
        except OSError as exc:  # the port is taken, most likely
            return _fail(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}")
        print(READY_PREFIX + simulator.url, flush=True)
        # What exists now (a populated store can hold 100k objects) is long-lived: the
        # collector need not scan it again each time a request's garbage fills generation 0.
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 10)
        while not signals.requested.wait(0.5):
            pass
    finally:
        signals.stopping = True
        simulator.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
    return 0
