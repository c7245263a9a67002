"""Running a service in the foreground until SIGTERM, SIGHUP or Ctrl-C, the same way for all.

User mistakes end with one line on stderr and exit status 2, never a traceback; a clean stop
exits 0. The first signal only sets a flag: the main thread then stops the service, which
drains, acks, releases its leases and joins its threads (kopf's and arq's shutdown model),
within a bound it states; a second signal ends the process at once
(:mod:`common.signalled_stop`).

Retries say what they retry (:func:`name_failures_in_logs`): every log line that carries a
Redis or Kubernetes API failure names the server it failed to reach, password masked. The
failures are logged from many loops (heartbeats, leases, shard workers, the reflector), none of
which knows the URL, and redis-py's ``repr`` of an error is only ``network:ConnectionError``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol, runtime_checkable

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
from common.signalled_stop import SignalledStop

__all__ = [
    "DEFAULT_STOP_TIMEOUT",
    "CommandMain",
    "FailureContext",
    "Runnable",
    "StopBounded",
    "command_main",
    "fail",
    "name_failures_in_logs",
    "prepare_service",
    "probe_address",
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


def fail(program: str, message: str, details: str = "") -> int:
    """Report a user mistake in one line (then ``details``, e.g. the traceback of the user's
    own code that failed); the exit status for it."""
    print(f"{program}: error: {message}", file=sys.stderr)
    if details:
        print(details.rstrip("\n"), file=sys.stderr)
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


def probe_address(settings: ServiceSettings) -> str:
    """Where a service serves its probes, with the flags that choose it: what
    :func:`run_until_signalled` names when that address cannot be bound."""
    return (
        f"{settings.http_host}:{settings.http_port} (--http-host {settings.http_host}, "
        f"--http-port {settings.http_port})"
    )


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

    The signals follow :mod:`common.signalled_stop`: the first stops the service cleanly (exit
    0) within its :attr:`StopBounded.stop_timeout` (else :data:`DEFAULT_STOP_TIMEOUT`), a second
    one, or the stop outliving that bound, ends the process at once naming what it abandons.
    ``on_started`` runs once the service is up (e.g. to print a readiness line);
    ``listen_address`` names what could not be bound when starting fails (with the flags that
    choose it, e.g. ``127.0.0.1:8080 (--http-host, --http-port)``).
    """
    bounded = service if isinstance(service, StopBounded) else None
    stop = SignalledStop(
        program,
        bound=lambda: DEFAULT_STOP_TIMEOUT if bounded is None else bounded.stop_timeout,
        abandons=lambda: "" if bounded is None else bounded.unfinished_stop(),
    ).install()
    try:
        service.start()
    except OSError as exc:  # a port is taken, most likely
        service.stop()
        stop.restore()
        where = f"listen on {listen_address}" if listen_address else "start"
        return fail(program, f"cannot {where}: {exc.strerror or exc}")
    if on_started is not None:
        on_started()
    with long_lived_heap_gc():
        while not stop.requested.wait(0.5):
            pass
    # The handlers stay until the process exits: a second signal during the stop, or during
    # the interpreter's exit after it, ends the process instead of raising in a join.
    service.stop()
    return 0


@runtime_checkable
class StopBounded(Protocol):
    """Optional for a :class:`Runnable`: how long its ``stop`` may take, and what ending the
    process before it finished would leave undone (for the line that says so)."""

    @property
    def stop_timeout(self) -> float: ...

    def unfinished_stop(self) -> str: ...


DEFAULT_STOP_TIMEOUT: Final = 10.0
"""The stop bound of a service that states none (the API server simulator: its threads)."""
