"""``informer-bus apiserver-sim``: run the simulator in the foreground until Ctrl-C/SIGTERM.

Flags are generated from :class:`SimulatorSettings` so the CLI, the env vars and the Python
API can never disagree. The first line on stdout is ``apiserver-sim listening on URL`` once
the server answers (``SimulatorProcess`` waits for it); mistakes end with one line and exit 2.
"""

from __future__ import annotations

from apiserver_sim.settings import ENV_PREFIX, SimulatorSettings
from apiserver_sim.simulator import Simulator
from common.service_runner import run_until_signalled
from common.settings import flag_name
from informer_bus.subcommand import settings_subcommand

__all__ = ["APISERVER_SIM", "READY_PREFIX", "flag_name"]

READY_PREFIX = "apiserver-sim listening on "

HELP = (
    "Run a simulated Kubernetes API server (list/watch/bookmarks/watch-list, pods, configmaps, "
    "secrets, nodes, namespaces, example.com/v1 widgets) with fault injection under /_sim/."
)


PROGRAM = "informer-bus apiserver-sim"


def _run(settings: SimulatorSettings) -> int:
    sim = Simulator(settings)
    return run_until_signalled(
        sim,
        program=PROGRAM,
        on_started=lambda: print(READY_PREFIX + sim.url, flush=True),
        listen_address=f"{settings.host}:{settings.port}",
    )


APISERVER_SIM = settings_subcommand(
    "apiserver-sim",
    help=HELP,
    description=(
        HELP + " Every flag can also be set with the INFORMER_BUS_SIM_<NAME> environment "
        "variable shown in its help; flags win over the environment."
    ),
    settings=SimulatorSettings,
    env_prefix=ENV_PREFIX,
    program=PROGRAM,
    run=_run,
)
