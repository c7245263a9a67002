"""``informer-bus demo``: the subcommand (see the package docstring for what it does and
its exit statuses)."""

from __future__ import annotations

from informer_bus.demo.settings import ENV_PREFIX, PROGRAM, DemoSettings
from informer_bus.demo.supervisor import run_demo
from informer_bus.subcommand import settings_subcommand

__all__ = ["DEMO", "HELP"]

HELP = (
    "Run the whole pipeline locally with a live view: Redis, the API server simulator with "
    "churning pods (or a real cluster with --kubeconfig), a reflector and processors."
)


DEMO = settings_subcommand(
    "demo",
    help=HELP,
    description=(
        HELP + " Children's logs go to a directory printed at start. A processor that dies "
        "(try kill -9) is reported, its shards move to the others, and it is restarted. "
        "Ctrl-C, SIGTERM or SIGHUP (closing the terminal) stops the processors and the "
        "reflector first, then the simulator and Redis (exit 0); the children die with the "
        "demo even when it is killed. Exit status: 0 after a clean stop, 1 when a child "
        "failed, 2 for a mistake. Every flag can also be set with the "
        "INFORMER_BUS_DEMO_<NAME> environment variable shown in its help; the Redis is "
        "--redis-url, else INFORMER_BUS_DEMO_REDIS_URL, else REDIS_URL (as for every "
        "command), else a private one."
    ),
    settings=DemoSettings,
    env_prefix=ENV_PREFIX,
    program=PROGRAM,
    run=run_demo,
)
