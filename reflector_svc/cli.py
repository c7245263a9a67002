"""``informer-bus reflector`` / ``python -m reflector_svc``: run a reflector until stopped.

Flags come from :class:`~reflector_svc.settings.ReflectorSettings`; a user mistake (a bad
flag value, an unknown resource, an unreadable kubeconfig) ends with one line on stderr and
exit status 2, never a traceback. SIGTERM and Ctrl-C stop it cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from common.observability import configure_logging
from common.plugins import PluginError
from common.runtime import long_lived_heap_gc
from common.settings import SettingsError, add_flags, settings_from_args
from reflector_svc.kube import KubeError
from reflector_svc.resources import UnknownResourceError
from reflector_svc.service import ReflectorService, redis_password
from reflector_svc.settings import ENV_PREFIX, ReflectorSettings

__all__ = ["HELP", "configure_parser", "main", "run"]

HELP = (
    "List and watch Kubernetes resources and publish their deltas onto sharded Redis streams "
    "(leader-elected per resource: run two or more replicas)."
)

log = logging.getLogger("reflector_svc")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Every flag can also be set with the INFORMER_BUS_<NAME> environment variable "
        "shown in its help; flags win over the environment."
    )
    add_flags(parser, ReflectorSettings, ENV_PREFIX)


def _fail(message: str) -> int:
    print(f"informer-bus reflector: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(ReflectorSettings, ENV_PREFIX, args)
        if not settings.resource:
            raise SettingsError("give at least one --resource (e.g. --resource pods)")
        secrets = [p for p in (redis_password(settings.redis_url),) if p]
        configure_logging(settings.log_level, settings.log_json, redact=secrets)
        service = ReflectorService(settings)
    except (SettingsError, PluginError, UnknownResourceError, KubeError, ValueError) as exc:
        return _fail(str(exc))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        try:
            service.start()
        except OSError as exc:
            service.stop()
            return _fail(f"cannot serve metrics on port {settings.http_port}: {exc.strerror}")
        with long_lived_heap_gc():
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        log.info("stopping")
        service.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reflector_svc", description=HELP)
    configure_parser(parser)
    return run(parser.parse_args(argv))
