"""``informer-bus processor`` / ``python -m processor_svc``: run a processor until stopped.

Flags come from :class:`~processor_svc.settings.ProcessorSettings`; a user mistake (a bad flag
value, a handler reference that cannot be loaded) ends with one line on stderr and exit status
2, never a traceback. SIGTERM, SIGHUP and Ctrl-C drain the handlers, acknowledge and hand the shards
over at once (exit 0); a second signal ends it at once (``common.signalled_stop``).
"""

from __future__ import annotations

import argparse

from common.plugins import PluginError
from common.service_runner import (
    command_main,
    fail,
    prepare_service,
    probe_address,
    run_until_signalled,
)
from common.settings import ENV_PREFIX, SettingsError, describe_command, settings_from_args
from processor_svc.service import ProcessorService
from processor_svc.settings import ProcessorSettings

__all__ = ["HELP", "PROGRAM", "configure_parser", "main", "run"]

HELP = (
    "Consume a resource's shard streams into per-shard indexed caches and run your handlers "
    "and controllers; start more processors to scale out (shards rebalance by themselves)."
)
PROGRAM = "informer-bus processor"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe_command(
        parser,
        HELP + " Until a reflector has completed a list of --resource under --prefix, a "
        "processor waits for it (it may start first): /readyz answers 503 with the reason, one "
        "warning says what it waits for, and no shard is taken. SIGTERM, Ctrl-C and SIGHUP "
        "stop it cleanly (exit 0) within the bound it logs (--shutdown-grace + 5 s); a second "
        "signal ends it at once (exit 128 + the signal: 130 for Ctrl-C).",
        ProcessorSettings,
        ENV_PREFIX,
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(ProcessorSettings, ENV_PREFIX, args)
        prepare_service(settings, args.redis_url)
        service = ProcessorService(settings)
    except PluginError as exc:  # a handler that cannot load: the user's traceback follows
        return fail(PROGRAM, str(exc), exc.user_traceback)
    except (SettingsError, ValueError) as exc:
        return fail(PROGRAM, str(exc))
    return run_until_signalled(service, program=PROGRAM, listen_address=probe_address(settings))


main = command_main("python -m processor_svc", HELP, configure_parser, run)
