"""``informer-bus subscribe RESOURCE``: the command line of :mod:`informer_bus.subscription`.

Deltas are printed as they arrive (JSON lines, or a table), one write per delta, so a pipe
sees each at once; a reader that went away (``| head``) ends it, even while no delta comes.
With ``--group`` a delta is acknowledged only once it has been written and flushed: a
subscriber killed at any point prints again, on its next start, what it might not have printed.

``--output cloudevents`` prints CloudEvents instead (:mod:`informer_bus.cloudevents`), and
``--sink URL`` POSTs them to a receiver instead of printing anything
(:mod:`informer_bus.cloudevents_sink`): there a delta is acknowledged only once the receiver
accepted it (2xx) or refused it for good.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import select
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import IO, Any, Final

import orjson
import redis

from common.deltas import DeltaType
from common.redis_config import connection_kwargs, describe_redis_error, redis_location
from common.service_runner import fail
from common.settings import (
    ENV_PREFIX,
    BusSettings,
    SettingsError,
    add_flags,
    settings_from_args,
)
from common.signalled_stop import SignalledStop
from informer_bus.cloudevents import EventMapper
from informer_bus.cloudevents_sink import (
    HttpSink,
    SinkMode,
    SinkOptions,
    SinkStopped,
    check_sink_url,
)
from informer_bus.initial_list_progress import InitialListProgress
from informer_bus.subcommand import Subcommand
from informer_bus.subscription import (
    FROM_BEGINNING,
    FROM_NOW,
    VALID_TYPES,
    DurableSubscription,
    StopSignal,
    SubscribedDelta,
    SubscribeError,
    Subscription,
    UndecodableEntry,
    check_start,
    parse_types,
    subscribe,
    subscribe_durable,
)

__all__ = ["HELP", "PROGRAM", "SUBSCRIBE", "SubscribeSettings"]

PROGRAM: Final = "informer-bus subscribe"
HELP: Final = (
    "Print a resource's deltas as they reach the bus, all shards merged, one per line "
    "(JSON lines by default); reads without joining the processors' consumer group."
)
_OUTPUTS: Final = ("json", "table", "cloudevents")
_SINK_MODES: Final = tuple(mode.value for mode in SinkMode)
_STOP_SECONDS: Final = 10.0
"""The stop bound of a printing subscriber: its last acknowledgement (one Redis call)."""
_SINK_STOP_MARGIN: Final = 5.0
"""A sink's stop: the POST in flight (connect and read timeouts), then this for the acks."""
_PROGRESS_SECONDS: Final = 10.0
"""How often a sink reports what it sent (stderr), when it sent anything since."""
_EXIT_REDIS_LOST: Final = 1


@dataclasses.dataclass(frozen=True)
class SubscribeSettings(BusSettings):
    """Where the bus is: the services' ``--redis-url`` and ``--prefix`` (same env vars)."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Ctrl-C, SIGTERM and SIGHUP stop it cleanly (a --sink first finishes the POST "
        "in flight; a second signal ends it at once); so does closing its output (| head). A "
        "resource no reflector has published under the prefix is an error (exit 2, one line "
        "saying so) unless --wait is given: then one line on stderr says what it waits for, "
        "and the deltas start with the first one published. Exit status: 0 when stopped by a "
        "signal or done (--count), 1 when Redis is lost, 2 for a mistake, 128 + the signal "
        "(130 for Ctrl-C) when a second signal ended it. The --redis-* flags and "
        "--prefix can also be set with the INFORMER_BUS_<NAME> environment variable shown in "
        "their help."
    )
    parser.add_argument(
        "resource",
        metavar="RESOURCE",
        help="the resource id of the streams (pods, deployments.apps, pods@shop) or the "
        "reflector's --resource spec (deployments.v1.apps)",
    )
    start = parser.add_argument_group(
        "where to start (one of; default --from-now; none with --group)"
    )
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="every delta still on the streams, then new ones",
    )
    start.add_argument("--from-now", action="store_true", help="only deltas published from now on")
    start.add_argument(
        "--from-id",
        metavar="ID",
        help="deltas after this entry ID on every shard (an 'id' printed before, e.g. "
        "1714567890123-0, or just milliseconds since the epoch)",
    )
    parser.add_argument(
        "--group",
        metavar="NAME",
        help="read as durable subscriber NAME: a consumer group of its own that acknowledges "
        "each delta once printed and resumes there after a restart (at least once); a new "
        "group first prints the known state as Added deltas marked initial. One subscriber "
        "process per group; a group processors use is refused",
    )
    parser.add_argument(
        "--type",
        dest="types",
        action="append",
        metavar="TYPES",
        help=f"only these delta types, comma-separated, repeatable ({VALID_TYPES})",
    )
    parser.add_argument("--namespace", "-n", metavar="NS", help="only objects in this namespace")
    parser.add_argument(
        "--output",
        "-o",
        action="append",
        metavar="FORMAT",
        help="json (JSON lines: stream, shard, id, type, key, resourceVersion, uid, "
        "observedAt, tombstone, object, initial), table (time, shard, type, key, "
        "resourceVersion) or cloudevents (CloudEvents 1.0, structured-mode JSON lines; see "
        "docs/cloudevents.md); default json",
    )
    sink = parser.add_argument_group(
        "sending CloudEvents to an HTTP receiver (instead of printing; see docs/cloudevents.md)"
    )
    sink.add_argument(
        "--sink",
        metavar="URL",
        help="POST each delta as a CloudEvent to this http(s) URL, one at a time, retrying "
        "connection errors, timeouts, 408, 429 and 5xx with exponential backoff; another 4xx "
        "skips the event (one line on stderr). With --group a delta is acknowledged only once "
        "the receiver accepted it (at least once; dedupe by the event id); without it delivery "
        "is best effort",
    )
    sink.add_argument(
        "--sink-mode",
        metavar="MODE",
        help="binary (ce-* headers, the object as the body; default) or structured (the "
        "whole event as application/cloudevents+json)",
    )
    sink.add_argument(
        "--sink-timeout",
        metavar="SECONDS",
        help="seconds to connect and to wait for the answer before retrying (default 10)",
    )
    sink.add_argument(
        "--sink-backoff",
        metavar="SECONDS",
        help="first retry delay; it doubles (with jitter) up to --sink-backoff-max (default 0.1)",
    )
    sink.add_argument(
        "--sink-backoff-max",
        metavar="SECONDS",
        help="longest retry delay before jitter (default 10)",
    )
    parser.add_argument("--count", metavar="N", help="stop after N deltas (after filtering)")
    parser.add_argument(
        "--wait",
        action="store_true",
        help="if no reflector has published RESOURCE yet, wait for one (saying so on stderr) "
        "instead of exiting with status 2",
    )
    parser.add_argument(
        "--shards",
        "--shard-count",
        dest="shards",
        metavar="N",
        help="the resource's shard count (default: found from the keys in Redis)",
    )
    add_flags(parser, SubscribeSettings, ENV_PREFIX)


@dataclasses.dataclass(frozen=True)
class _Options:
    start: str | None
    types: frozenset[DeltaType] | None
    output: str
    count: int | None
    shards: int | None
    sink: SinkOptions | None


def _positive(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise SubscribeError(f"{flag} must be an integer >= 1, got {text!r}")
    return value


def _options(args: argparse.Namespace) -> _Options:
    chosen = [
        flag
        for flag, given in (
            ("--from-beginning", args.from_beginning),
            ("--from-now", args.from_now),
            ("--from-id", args.from_id is not None),
        )
        if given
    ]
    if len(chosen) > 1:
        raise SubscribeError(f"{' and '.join(chosen)} exclude each other: give one")
    if chosen and args.group is not None:
        raise SubscribeError(
            f"{chosen[0]} and --group exclude each other: a group resumes where it stopped "
            "(a new one starts with the known state)"
        )
    start: str | None
    if args.from_beginning:
        start = FROM_BEGINNING
    elif args.from_id is not None:
        start = check_start(args.from_id)
    elif args.group is None:
        start = FROM_NOW
    else:
        start = None
    return _Options(
        start=start,
        types=None if args.types is None else parse_types(args.types),
        output=_output(args.output, sink=args.sink),
        count=_positive("--count", args.count),
        shards=_positive("--shards", args.shards),
        sink=_sink_options(args),
    )


def _output(given: list[str] | None, *, sink: str | None) -> str:
    for output in given or ():
        if output not in _OUTPUTS:
            raise SubscribeError(
                f"unknown output {output!r}; use {', '.join(_OUTPUTS[:-1])} or {_OUTPUTS[-1]}"
            )
    chosen = list(dict.fromkeys(given or ()))
    if len(chosen) > 1:
        raise SubscribeError(
            " and ".join(f"--output {output}" for output in chosen) + " exclude each other"
        )
    if chosen and sink is not None:
        raise SubscribeError(
            f"--output {chosen[0]} and --sink exclude each other: --sink sends the deltas as "
            "CloudEvents instead of printing them"
        )
    return chosen[0] if chosen else "json"


def _sink_options(args: argparse.Namespace) -> SinkOptions | None:
    tuning = {
        "--sink-mode": args.sink_mode,
        "--sink-timeout": args.sink_timeout,
        "--sink-backoff": args.sink_backoff,
        "--sink-backoff-max": args.sink_backoff_max,
    }
    if args.sink is None:
        given = [flag for flag, value in tuning.items() if value is not None]
        if given:
            raise SubscribeError(f"{given[0]} needs --sink URL")
        return None
    try:
        url = check_sink_url(args.sink)
    except ValueError as exc:
        raise SubscribeError(str(exc)) from None
    mode = args.sink_mode or SinkMode.BINARY.value
    if mode not in _SINK_MODES:
        raise SubscribeError(f"unknown --sink-mode {mode!r}; use {' or '.join(_SINK_MODES)}")
    defaults = SinkOptions(url)
    options = SinkOptions(
        url,
        SinkMode(mode),
        timeout=_seconds("--sink-timeout", args.sink_timeout, defaults.timeout),
        backoff=_seconds("--sink-backoff", args.sink_backoff, defaults.backoff),
        backoff_max=_seconds("--sink-backoff-max", args.sink_backoff_max, defaults.backoff_max),
    )
    if options.backoff_max < options.backoff:
        raise SubscribeError(
            f"--sink-backoff-max ({options.backoff_max:g}) is below --sink-backoff "
            f"({options.backoff:g})"
        )
    return options


def _seconds(flag: str, text: str | None, default: float) -> float:
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise SubscribeError(f"{flag} must be a number of seconds > 0, got {text!r}")
    return value


class _ReaderGone:
    """Set once nobody reads our stdout pipe any more (``| head`` exited).

    A write would tell us too (EPIPE), but a subscriber waiting for the next delta writes
    nothing: without this, ``informer-bus subscribe pods | head -1`` would hang until the
    next change. Linux reports a pipe without readers as POLLERR to its writer.
    """

    def __init__(self, stream: IO[Any]) -> None:
        self._poller: select.poll | None = None
        try:
            fd = stream.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                self._poller = select.poll()
                self._poller.register(fd, 0)  # errors and hang-ups are always reported
        except (OSError, ValueError):
            self._poller = None

    def is_set(self) -> bool:
        return self._poller is not None and bool(self._poller.poll(0))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail (what the Python
    docs recommend on SIGPIPE/EPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _warn_undecodable(entry: UndecodableEntry) -> None:
    print(
        f"{PROGRAM}: warning: skipping undecodable entry {entry.entry_id} on {entry.stream}: "
        f"{entry.error}",
        file=sys.stderr,
        flush=True,
    )


def _say_waiting(why: str) -> None:
    print(f"{PROGRAM}: waiting: {why}", file=sys.stderr, flush=True)


_TABLE_HEADER: Final = f"{'TIME':<24}  {'SHARD':>5}  {'TYPE':<8}  {'KEY':<48}  RESOURCEVERSION"


def _table_line(delta: SubscribedDelta) -> str:
    when = datetime.fromtimestamp(delta.observed_at, UTC).isoformat(timespec="milliseconds")
    when = when.replace("+00:00", "Z")
    line = (
        f"{when:<24}  {delta.shard:>5}  {delta.type.value:<8}  {delta.key:<48}  "
        f"{delta.resource_version or '-'}"
    )
    return (
        line
        + ("  (tombstone)" if delta.tombstone else "")
        + ("  (initial)" if delta.initial else "")
    )


def _print_deltas(
    deltas: Iterator[SubscribedDelta],
    output: str,
    mapper: EventMapper,
    progress: InitialListProgress,
    whole_line: AbstractContextManager[None],
) -> None:
    """Print each delta as one line, flushed; a stop signal never cuts a line in two
    (``whole_line``: it comes into effect once the line is written)."""
    out = sys.stdout.buffer
    table = output == "table"
    if table:
        with whole_line:
            out.write(_TABLE_HEADER.encode() + b"\n")
            out.flush()
    for delta in deltas:
        with whole_line:
            if table:
                out.write(_table_line(delta).encode() + b"\n")
            else:
                line = mapper.structured(delta) if output == "cloudevents" else delta.as_json_dict()
                out.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
            out.flush()
        if not progress.done:
            progress.tick()


class _Interrupted(BaseException):
    """The first stop signal, raised wherever a printing subscriber stands: nothing it does
    needs finishing. Leaving the subscription's ``with`` block by it acknowledges what was
    printed, not the delta being printed (a durable subscriber prints that one again)."""


def run(args: argparse.Namespace) -> int:
    sink_timeout = _sink_timeout(args)
    stop = SignalledStop(
        PROGRAM,
        bound=lambda: (
            _STOP_SECONDS if sink_timeout is None else 2 * sink_timeout + _SINK_STOP_MARGIN
        ),
        abandons=lambda: _abandoned(args),
        interrupt=None if args.sink is not None else _Interrupted,
    )
    with stop:
        try:
            return _subscribe_and_print(args, stop)
        except _Interrupted:
            return 0


def _sink_timeout(args: argparse.Namespace) -> float | None:
    """The sink's timeout for the stop bound (``None`` without a sink; a bad value is
    reported later, by the option checks)."""
    if args.sink is None:
        return None
    try:
        return _seconds("--sink-timeout", args.sink_timeout, SinkOptions("").timeout)
    except SubscribeError:
        return SinkOptions("").timeout


def _abandoned(args: argparse.Namespace) -> str:
    if args.sink is not None:
        return (
            "the event being sent (not acknowledged: --group sends it again on the next start)"
            if args.group is not None
            else "the event being sent"
        )
    if args.group is not None:
        return "acknowledging the deltas printed last (printed again on the next start)"
    return ""


def _subscribe_and_print(args: argparse.Namespace, signals: SignalledStop) -> int:
    reader_gone = _ReaderGone(sys.stdout)
    try:
        settings = settings_from_args(SubscribeSettings, ENV_PREFIX, args)
        connection = connection_kwargs(settings.redis)
        options = _options(args)
    except (SettingsError, SubscribeError) as exc:
        return fail(PROGRAM, str(exc))
    if options.sink is None:
        return _subscribe_and(
            args,
            settings=settings,
            connection=connection,
            options=options,
            stop=reader_gone,
            reader_gone=reader_gone,
            signals=signals,
        )
    if args.group is None:
        _say(
            "warning: --sink without --group is best effort: an event being retried when it "
            "stops is lost, and a restart starts from --from-now (or the --from-* given), "
            "missing what was published meanwhile; --group NAME delivers at least once"
        )
    return _subscribe_and(
        args,
        settings=settings,
        connection=connection,
        options=options,
        stop=signals.requested,
        reader_gone=reader_gone,
        signals=signals,
    )


def _subscribe_and(
    args: argparse.Namespace,
    *,
    settings: SubscribeSettings,
    connection: dict[str, Any],
    options: _Options,
    stop: StopSignal,
    reader_gone: _ReaderGone,
    signals: SignalledStop,
) -> int:
    """Subscribe, then print the deltas or send them to the sink; the exit status."""
    shared: dict[str, Any] = {
        "types": options.types,
        "namespace": args.namespace,
        "shard_count": options.shards,
        "prefix": settings.prefix,
        "stop": stop,
        "on_undecodable": _warn_undecodable,
        "connection": connection,
        "cluster": settings.redis.cluster,
        "wait": args.wait,
        "on_waiting": _say_waiting,
    }
    url, resource = settings.redis.url, args.resource
    subscription: Subscription | DurableSubscription
    try:
        if args.group is None:
            assert options.start is not None
            subscription = subscribe(url, resource, start=options.start, **shared)
        else:
            subscription = subscribe_durable(url, resource, args.group, **shared)
        subscription.open()  # the mistakes and an unreachable Redis surface here, one line
    except SubscribeError as exc:
        return fail(PROGRAM, str(exc))
    except (redis.RedisError, ValueError) as exc:  # unreachable, or a URL redis-py refuses
        reason = describe_redis_error(exc) or exc
        return fail(PROGRAM, f"cannot read {redis_location(settings.redis)}: {reason}")
    # The errors are caught outside the with block: leaving it by an exception is what keeps a
    # durable subscriber from acknowledging the delta it failed to write.
    if options.sink is not None:
        assert isinstance(stop, threading.Event)
        return _send(subscription, options.sink, options.count, stop)
    mapper = EventMapper(subscription.resource, subscription.layout)
    try:
        with subscription:
            deltas = itertools.islice(subscription, options.count)
            durable = subscription if isinstance(subscription, DurableSubscription) else None
            progress = InitialListProgress(durable, _say)
            _print_deltas(deltas, options.output, mapper, progress, signals.finishing)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except redis.RedisError as exc:
        print(f"{PROGRAM}: error: lost Redis: {exc}", file=sys.stderr)
        return _EXIT_REDIS_LOST
    if reader_gone.is_set():
        _silence_stdout()
    return 0


def _send(
    subscription: Subscription | DurableSubscription,
    options: SinkOptions,
    count: int | None,
    stop: threading.Event,
) -> int:
    """POST every delta to the sink; leaving the ``with`` block by :class:`SinkStopped` keeps
    the event in hand unacknowledged (a durable subscriber sends it again on its next start)."""
    mapper = EventMapper(subscription.resource, subscription.layout)
    sink = HttpSink(options, stop=stop, say=_say)
    _say(f"sink: sending {subscription.resource} deltas to {options.url} ({options.mode} mode)")
    try:
        with subscription:
            _deliver_all(itertools.islice(subscription, count), mapper, sink)
    except SinkStopped as exc:
        _say(f"sink: stopped before event {exc} was accepted: not acknowledged")
    except redis.RedisError as exc:
        print(f"{PROGRAM}: error: lost Redis: {exc}", file=sys.stderr)
        return _EXIT_REDIS_LOST
    finally:
        sink.close()
        _say(sink.stats.summary())
    return 0


def _deliver_all(deltas: Iterator[SubscribedDelta], mapper: EventMapper, sink: HttpSink) -> None:
    report_at = time.monotonic() + _PROGRESS_SECONDS
    reported = sink.stats.sent + sink.stats.refused
    for delta in deltas:
        sink.deliver(mapper.structured(delta))
        now = time.monotonic()
        if now >= report_at:
            report_at = now + _PROGRESS_SECONDS
            done = sink.stats.sent + sink.stats.refused
            if done != reported:
                reported = done
                _say(sink.stats.summary())


def _say(line: str) -> None:
    print(f"{PROGRAM}: {line}", file=sys.stderr, flush=True)


SUBSCRIBE: Final = Subcommand(name="subscribe", help=HELP, configure=configure_parser, run=run)
