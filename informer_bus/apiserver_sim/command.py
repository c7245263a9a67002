"""``informer-bus apiserver-sim``: run the simulator in the foreground until Ctrl-C/SIGTERM.

Flags are generated from :class:`SimulatorSettings` so the CLI, the env vars and the Python
API can never disagree. The first line on stdout is ``apiserver-sim listening on URL`` once
the server answers (``SimulatorProcess`` waits for it); mistakes end with one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
import sys
import threading
from types import FrameType
from typing import Any

from common.runtime import long_lived_heap_gc
from informer_bus.apiserver_sim.settings import SettingsError, SimulatorSettings
from informer_bus.apiserver_sim.simulator import Simulator
from informer_bus.subcommand import Subcommand

__all__ = ["APISERVER_SIM", "READY_PREFIX", "flag_name"]

READY_PREFIX = "apiserver-sim listening on "

HELP = (
    "Run a simulated Kubernetes API server (list/watch/bookmarks/watch-list, pods, configmaps, "
    "secrets, nodes, namespaces, example.com/v1 widgets) with fault injection under /_sim/."
)


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Every flag can also be set with the INFORMER_BUS_SIM_<NAME> environment "
        "variable shown in its help; flags win over the environment."
    )
    for f in dataclasses.fields(SimulatorSettings):
        help_text = str(f.metadata.get("help", ""))
        env = SimulatorSettings.env_name(f.name)
        default = f.default
        shown = "unlimited" if isinstance(default, float) and math.isinf(default) else default
        full_help = f"{help_text} (default: {shown}; env {env})"
        kind = type(default)
        if kind is bool:
            parser.add_argument(
                flag_name(f.name), action=argparse.BooleanOptionalAction, default=None,
                help=full_help,
            )  # fmt: skip
        else:
            parser.add_argument(
                flag_name(f.name), type=kind, default=None, dest=f.name, help=full_help,
                metavar=f.name.split("_")[-1].upper(),
            )  # fmt: skip


def _fail(message: str) -> int:
    print(f"informer-bus apiserver-sim: error: {message}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        f.name: getattr(args, f.name, None) for f in dataclasses.fields(SimulatorSettings)
    }
    try:
        settings = SimulatorSettings.from_env(**overrides)
    except SettingsError as exc:
        return _fail(str(exc))
    sim = Simulator(settings)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            sim.start()
        except OSError as exc:
            sim.stop()
            why = exc.strerror or str(exc)
            return _fail(f"cannot listen on {settings.host}:{settings.port}: {why}")
        print(READY_PREFIX + sim.url, flush=True)
        # Hundreds of thousands of long-lived, acyclic revisions: see common.runtime.
        with long_lived_heap_gc():
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sim.stop()
    return 0


APISERVER_SIM = Subcommand(name="apiserver-sim", help=HELP, configure=_configure, run=_run)
