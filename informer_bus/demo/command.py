"""``informer-bus demo``: the subcommand (see the package docstring for what it does and
its exit statuses)."""

from __future__ import annotations

import argparse

from common.service_runner import fail
from common.settings import SettingsError, add_flags, settings_from_args
from informer_bus.demo.settings import ENV_PREFIX, PROGRAM, DemoSettings
from informer_bus.demo.supervisor import run_demo
from informer_bus.subcommand import Subcommand

__all__ = ["DEMO", "HELP"]

HELP = (
    "Run the whole pipeline locally with a live view: Redis, the API server simulator with "
    "churning pods (or a real cluster with --kubeconfig), a reflector and processors."
)


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Children's logs go to a directory printed at start. A processor that dies "
        "(try kill -9) is reported, its shards move to the others, and it is restarted. "
        "Ctrl-C, SIGTERM or SIGHUP (closing the terminal) stops the processors and the "
        "reflector first, then the simulator and Redis (exit 0); the children die with the "
        "demo even when it is killed. Exit status: 0 after a clean stop, 1 when a child "
        "failed, 2 for a mistake. Every flag can also be set with the "
        "INFORMER_BUS_DEMO_<NAME> environment variable shown in its help; REDIS_URL is used "
        "when --redis-url is not given."
    )
    add_flags(parser, DemoSettings, ENV_PREFIX)


def _run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(DemoSettings, ENV_PREFIX, args)
    except SettingsError as exc:
        return fail(PROGRAM, str(exc))
    return run_demo(settings)


DEMO = Subcommand(name="demo", help=HELP, configure=_configure, run=_run)
