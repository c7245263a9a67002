"""Running a service in the foreground until SIGTERM, SIGHUP or Ctrl-C, the same way for all.

User mistakes end with one line on stderr and exit status 2, never a traceback; a clean stop
exits 0. Signals only set a flag: the main thread then stops the service, which drains, acks,
releases its leases and joins its threads (kopf's and arq's shutdown model).

Retries say what they retry (:func:`name_failures_in_logs`): every log line that carries a
Redis or Kubernetes API failure names the server it failed to reach, password masked. The
failures are logged from many loops (heartbeats, leases, shard workers, the reflector), none of
which knows the URL, and redis-py's ``repr`` of an error is only ``network:ConnectionError``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Protocol

import redis

from common.observability import RedactingFilter, configure_logging
from common.redis_config import (
    check_redis_access,
    command_line_password_warning,
    redis_location,
    redis_secrets,
)
from common.runtime import long_lived_heap_gc
from common.settings import ServiceSettings

__all__ = [
    "CommandMain",
    "FailureContext",
    "Runnable",
    "command_main",
    "fail",
    "name_failures_in_logs",
    "prepare_service",
    "run_until_signalled",
]


class Runnable(Protocol):
    """Anything with ``start``/``stop`` (what ``start`` returns is ignored)."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


class CommandMain(Protocol):
    """A ``python -m`` entry point: parse ``argv`` (default ``sys.argv[1:]``), run, exit status."""

    def __call__(self, argv: Sequence[str] | None = None) -> int: ...


def command_main(
    prog: str,
    description: str,
    configure: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
) -> CommandMain:
    """The ``main(argv)`` of a service's ``python -m`` entry point: its own parser, configured
    as the ``informer-bus`` subcommand configures it, so both spellings take the same flags."""

    def main(argv: Sequence[str] | None = None) -> int:
        parser = argparse.ArgumentParser(prog=prog, description=description)
        configure(parser)
        return run(parser.parse_args(argv))

    return main


def fail(program: str, message: str) -> int:
    """Report a user mistake in one line; the exit status for it."""
    print(f"{program}: error: {message}", file=sys.stderr)
    return 2


class _Described:
    """A failure as a log argument: the same text for ``%s`` and ``%r``."""

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__


class FailureContext(logging.Filter):
    """Rewrites each log argument that is an exception of a known kind into ``Type: message
    [where]``: ``where`` (e.g. ``Redis redis://:***@host:6379/0``) is looked up by exception
    class, the first match in ``where``'s order wins. Records without such an argument pass
    untouched. ``where`` must hold no secret (use ``common.redis_config.redacted_url``)."""

    def __init__(self, where: Mapping[type[BaseException], str]) -> None:
        super().__init__()
        self._where = tuple(where.items())

    def describe(self, error: BaseException) -> str | None:
        for kind, where in self._where:
            if isinstance(error, kind):
                text = " ".join(str(error).split())
                return (
                    f"{type(error).__name__}: {text} [{where}]"
                    if text
                    else (f"{type(error).__name__} [{where}]")
                )
        return None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(arg, BaseException) for arg in args):
            described = []
            for arg in args:
                text = self.describe(arg) if isinstance(arg, BaseException) else None
                described.append(arg if text is None else _Described(text))
            record.args = tuple(described)
        return True


def name_failures_in_logs(
    redactor: RedactingFilter, where: Mapping[type[BaseException], str]
) -> FailureContext:
    """Install a :class:`FailureContext` on the log handler that ``redactor`` (what
    ``common.observability.configure_logging`` returned) guards, ahead of the redactor, so the
    added text is redacted too. Returns it (tests, or a second call's replacement)."""
    context = FailureContext(where)
    for handler in logging.getLogger().handlers:
        if redactor in handler.filters:
            handler.filters.insert(0, context)
    return context


def prepare_service(settings: ServiceSettings, url_flag: str | None) -> RedactingFilter:
    """What every service does before it builds anything: log as ``settings`` say with every
    Redis password masked, warn when ``url_flag`` (the ``--redis-url`` *flag*, not the env
    var) carries a password for ``ps`` to show, and check the Redis credentials and TLS once,
    so a wrong one is one line and exit 2 instead of retries (``RedisAccessError``, a
    ``ValueError``). Log lines that carry a Redis failure name the Redis they failed to reach.

    Returns the redactor, for :func:`name_failures_in_logs` with the service's other servers.
    """
    redactor = configure_logging(
        settings.log_level, settings.log_json, redact=redis_secrets(settings.redis)
    )
    warning = command_line_password_warning(url_flag)
    if warning is not None:
        logging.getLogger(__name__).warning(warning)
    check_redis_access(settings.redis)
    name_failures_in_logs(redactor, {redis.RedisError: _redis_named(settings)})
    return redactor


def _redis_named(settings: ServiceSettings) -> str:
    return f"Redis {redis_location(settings.redis)}"


def run_until_signalled(
    service: Runnable,
    *,
    program: str,
    on_started: Callable[[], None] | None = None,
    listen_address: str | None = None,
) -> int:
    """Start ``service``, wait for SIGTERM, SIGHUP or SIGINT, stop it; returns the exit status.

    ``on_started`` runs once the service is up (e.g. to print a readiness line);
    ``listen_address`` names what could not be bound when starting fails.
    """
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in _stop_signals()}
    try:
        try:
            service.start()
        except OSError as exc:  # a port is taken, most likely
            service.stop()
            where = f"listen on {listen_address}" if listen_address else "start"
            return fail(program, f"cannot {where}: {exc.strerror or exc}")
        if on_started is not None:
            on_started()
        with long_lived_heap_gc():
            while not stop.wait(0.5):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        service.stop()
    return 0


def _stop_signals() -> list[signal.Signals]:
    """SIGTERM (an orchestrator's stop) and SIGHUP (the terminal of a service started by hand
    closed): both stop the service cleanly, as Ctrl-C does. A hangup that is ignored already
    (``nohup``) stays ignored: whoever started the service asked it to outlive the terminal."""
    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    return signals
