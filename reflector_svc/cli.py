"""``informer-bus reflector`` / ``python -m reflector_svc``: run a reflector until stopped.

Flags come from :class:`~reflector_svc.settings.ReflectorSettings`; a user mistake (a bad
flag value, an unknown resource, an unreadable kubeconfig) ends with one line on stderr and
exit status 2, never a traceback. SIGTERM, SIGHUP and Ctrl-C stop it cleanly (exit 0); a second
signal ends it at once (``common.signalled_stop``).
"""

from __future__ import annotations

import argparse

from common.plugins import PluginError
from common.redis_config import redacted_url
from common.service_runner import (
    command_main,
    fail,
    name_failures_in_logs,
    prepare_service,
    probe_address,
    run_until_signalled,
)
from common.settings import ENV_PREFIX, SettingsError, describe_command, settings_from_args
from reflector_svc.api_errors import KubeError
from reflector_svc.resources import ResourceSpec, UnknownResourceError
from reflector_svc.service import ReflectorService
from reflector_svc.settings import ReflectorSettings

__all__ = ["HELP", "configure_parser", "main", "run"]

HELP = (
    "List and watch Kubernetes resources and publish their deltas onto sharded Redis streams "
    "(leader-elected per resource: run two or more replicas)."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe_command(
        parser,
        HELP + " SIGTERM, Ctrl-C and SIGHUP stop it cleanly (exit 0) within 10 s; a second "
        "signal ends it at once (exit 128 + the signal: 130 for Ctrl-C).",
        ReflectorSettings,
        ENV_PREFIX,
    )


PROGRAM = "informer-bus reflector"


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(ReflectorSettings, ENV_PREFIX, args)
        if not settings.resource:
            raise SettingsError("give at least one --resource (e.g. --resource pods)")
        for spec in settings.resource:  # before connecting anything: a typo is no outage
            ResourceSpec.parse(spec)
        redactor = prepare_service(settings, args.redis_url)
        service = ReflectorService(settings)
        name_failures_in_logs(
            redactor,
            {KubeError: f"Kubernetes API {redacted_url(service.api_client.configuration.host)}"},
        )
    except PluginError as exc:  # a --transform that cannot load: the user's traceback follows
        return fail(PROGRAM, str(exc), exc.user_traceback)
    except (SettingsError, UnknownResourceError, KubeError, ValueError) as exc:
        return fail(PROGRAM, str(exc))
    return run_until_signalled(service, program=PROGRAM, listen_address=probe_address(settings))


main = command_main("python -m reflector_svc", HELP, configure_parser, run)
