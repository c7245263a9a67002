"""``informer-bus demo`` (``make demo``): the whole pipeline on one machine, with a live view.

It starts real processes, the same commands a deployment runs: a private ``redis-server`` (or
the Redis at ``--redis-url`` / ``$REDIS_URL``), the API server simulator populated with a few
thousand pods and steady churn (or, with ``--kubeconfig``, a real cluster instead), one
reflector, and processors running the example handler
``processor_svc.examples.pod_phase_counter:PodPhaseCounter``. Their logs go to files in a
directory printed at start, so the terminal shows only the view.

The view is :mod:`informer_bus.status` read once a second (the facts all live in Redis), plus
each processor's ``/readyz`` (whether its caches finished their initial list, which only the
processor knows) and event rates from two consecutive reads. On a terminal it is redrawn in
place with plain ANSI codes; otherwise (CI, a pipe) it is one line per second.

A dead processor is what the demo exists to show, so once the pipeline is up it does not end
the demo (at startup a child that cannot start ends it, with that child's own error). The demo
says once which processor died, how and where its log is, shows its shards waiting for their
leases to expire and being taken over by the survivors, then restarts it (after a short
backoff) and shows the shards being rebalanced back. A processor that dies again and again
before its caches sync is not restarted forever: after :data:`MAX_FAILED_STARTS` such deaths
in a row the demo says so and goes on with the others (or stops, exit 1, when none is left).
The death of Redis, the simulator or the reflector ends the demo: nothing could be shown
without them.

Why every child runs in a process group of its own: a Ctrl-C in the terminal would otherwise
reach all of them at once, and Redis would vanish under processors that are still
acknowledging. The demo gets the signal alone (Ctrl-C, SIGTERM, or SIGHUP when its terminal
closes) and stops the processors and the reflector first (SIGTERM: they drain and hand their
leases back), then the simulator, then Redis. A terminal that closed makes every later write
fail, so output errors are swallowed rather than allowed to cut that shutdown short. Under
``nohup`` (SIGHUP ignored when the demo starts) a hangup stays ignored.

Why the children also die with a demo that had no chance to stop them (``kill -9``, a crash of
the interpreter): each is started with Linux's parent-death signal (SIGKILL), see
:mod:`informer_bus.child_process`. The kernel ties it to the thread that started the child, so
every child, restarted processors included, is started from the main thread.

Why a key prefix of its own on a Redis it did not start (``ib-demo-<random>``): that Redis may
hold a real pipeline's keys under ``ib``, and a demo reflector must never compete with a real
one. Those keys are deleted when the demo stops.

Exit status: 0 after ``--duration`` or on Ctrl-C / SIGTERM / SIGHUP once every child stopped
cleanly (processors that died and were restarted do not count against it); 1 when Redis, the
simulator or the reflector died, a processor was given up, or a child failed to stop or had to
be killed; 2 for a mistake (bad flag, no ``redis-server`` binary, unreachable Redis,
unreadable kubeconfig, a child refusing its settings).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Final, TextIO

import redis

from common.service_runner import fail
from common.settings import (
    LeaseTiming,
    MembershipTiming,
    SettingsError,
    add_flags,
    settings_from_args,
)
from informer_bus.apiserver_sim.command import READY_PREFIX
from informer_bus.child_process import start_tied
from informer_bus.local_redis import RedisServer, RedisServerMissingError
from informer_bus.status import (
    ResourceStatus,
    collect_status,
    redacted_url,
    render_resource,
    status_client,
)
from informer_bus.subcommand import Subcommand
from reflector_svc.resources import ResourceSpec

__all__ = ["DEMO", "MAX_FAILED_STARTS", "DemoSettings", "describe_exit", "run_demo"]

PROGRAM: Final = "informer-bus demo"
ENV_PREFIX: Final = "INFORMER_BUS_DEMO_"
HANDLER: Final = "processor_svc.examples.pod_phase_counter:PodPhaseCounter"
PRIVATE_PREFIX: Final = "ib"

HELP = (
    "Run the whole pipeline locally with a live view: Redis, the API server simulator with "
    "churning pods (or a real cluster with --kubeconfig), a reflector and processors."
)

MAX_FAILED_STARTS: Final = 3
"""Deaths in a row before its caches synced after which a processor is not restarted."""

_PROBES = re.compile(r"metrics and probes on (http://\S+)")
_STARTUP_TIMEOUT: Final = 60.0
_PROCESSOR_STOP_TIMEOUT: Final = 25.0  # the processor's default shutdown grace is 10 s
_STOP_TIMEOUT: Final = 15.0
_RESTART_BACKOFF: Final = 1.0  # doubled for each failed start in a row
_MEMBER_TTL: Final = MembershipTiming().member_ttl  # what the processors use (no flag given)
_SHOW_TAKEOVER: Final = 2.0  # seconds the view shows a takeover before the restart
_TAKEOVER_SLACK: Final = 10.0  # beyond lease + member TTL, before restarting without a takeover
_LAST_LINES: Final = 5
_KEPT_MESSAGES: Final = 12
_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SignalHandler = Callable[[int, FrameType | None], object] | int | None


@dataclass(frozen=True)
class DemoSettings:
    """What the demo runs; flags or ``INFORMER_BUS_DEMO_*`` env vars."""

    pods: int = field(default=3000, metadata={"help": "pods the simulator starts with"})
    churn: float = field(
        default=100.0,
        metadata={"help": "simulated pod events per second (creates, updates, deletes)"},
    )
    processors: int = field(default=2, metadata={"help": "processor processes to run"})
    duration: float | None = field(
        default=None,
        metadata={"help": "stop this many seconds after everything started (default: run "
                  "until Ctrl-C)", "metavar": "SECONDS"},
    )  # fmt: skip
    kubeconfig: str | None = field(
        default=None,
        metadata={"help": "watch the cluster of this kubeconfig instead of the simulator",
                  "metavar": "PATH"},
    )  # fmt: skip
    context: str | None = field(
        default=None, metadata={"help": "kubeconfig context (with --kubeconfig)"}
    )
    resource: str = field(
        default="pods",
        metadata={"help": "resource to watch with --kubeconfig (PLURAL[.VERSION[.GROUP]]"
                  "[@NAMESPACE]); the simulator serves pods", "metavar": "SPEC"},
    )  # fmt: skip
    redis_url: str | None = field(
        default=None,
        metadata={"help": "Redis 7 to use (default: $REDIS_URL, else a private redis-server "
                  "on a free port)", "metavar": "URL"},
    )  # fmt: skip
    shard_count: int = field(default=16, metadata={"help": "shards of the resource"})
    lease_duration: float = field(
        default=15.0,
        metadata={"help": "the processors' shard lease: a killed processor's shards move to "
                  "the others once it expires (their renew deadline and retry period "
                  "follow it)", "metavar": "SECONDS"},
    )  # fmt: skip
    log_dir: str | None = field(
        default=None,
        metadata={"help": "where the children's logs go (default: a new temporary directory)",
                  "metavar": "DIR"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.pods < 0 or self.churn < 0:
            raise SettingsError("--pods and --churn must be >= 0")
        if not 1 <= self.processors <= 64:
            raise SettingsError(f"--processors must be within 1..64, got {self.processors}")
        if self.duration is not None and not self.duration > 0:
            raise SettingsError(f"--duration must be > 0, got {self.duration}")
        if self.shard_count < 1:
            raise SettingsError(f"--shard-count must be >= 1, got {self.shard_count}")
        if not 2 <= self.lease_duration <= 300:
            raise SettingsError(
                f"--lease-duration must be within 2..300 s, got {self.lease_duration}"
            )
        if self.kubeconfig is None and (self.resource != "pods" or self.context is not None):
            raise SettingsError("--resource and --context need --kubeconfig (the simulator "
                                "demo watches pods)")  # fmt: skip

    @property
    def resource_id(self) -> str:
        """The resource's name in Redis keys (``ValueError`` for a malformed ``--resource``)."""
        return ResourceSpec.parse(self.resource).resource_id

    def lease_flags(self) -> list[str]:
        """The processor flags of :attr:`lease_duration`, in client-go's default proportions
        (15 s lease, 10 s renew deadline, 2 s retry period)."""
        return LeaseTiming.scaled(self.lease_duration).flags()


class DemoError(Exception):
    """The demo cannot go on; ``status`` is the exit status (2: the user's to fix)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class _Stop:
    """SIGINT/SIGTERM/SIGHUP as events: the first asks to stop, the next ones to hurry (kill)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.hurry = threading.Event()
        self.signal_name: str | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            self.hurry.set()
        self.signal_name = signal.Signals(signum).name
        self.requested.set()


class Output:
    """The demo's terminal, whose loss must not stop the shutdown: after a hangup every write
    fails with EIO, and a closed pipe with EPIPE. The first failure silences it for good."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.lost = False

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False

    def write(self, text: str) -> None:
        if self.lost:
            return
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # EIO, EPIPE, or a closed stream
            self.lost = True


def describe_exit(returncode: int) -> str:
    """How a child ended, as a person would say it (``killed by SIGKILL``)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


def _ranges(shards: Iterable[int]) -> str:
    """``0-3,7``: a shard list short enough for one line."""
    runs: list[list[int]] = []
    for shard in sorted(shards):
        if runs and runs[-1][1] == shard - 1:
            runs[-1][1] = shard
        else:
            runs.append([shard, shard])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "-"


# --- child processes ---------------------------------------------------------------------------


class Child:
    """One ``informer-bus`` subcommand as a child process, its output in ``log_path`` (which a
    restart appends to)."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.args = [sys.executable, "-m", "informer_bus.cli", *args]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.starts = 0
        self.reported = False
        """Its end was already told to the user: nothing more to say about it."""
        self._log: IO[bytes] | None = None
        self._log_start = 0

    def start(self, env: dict[str, str]) -> None:
        """Start (or start again); from the main thread only (the parent-death signal fires
        when the starting thread ends)."""
        self.close_log()
        self._log = self.log_path.open("ab")
        if self.starts:
            self._log.write(f"--- {PROGRAM}: restart {self.starts} ---\n".encode())
            self._log.flush()
        self._log_start = self._log.tell()
        self.url = ""
        self.reported = False
        self.process = start_tied(
            self.args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=env, process_group=0,
        )  # fmt: skip
        self.starts += 1

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def exit_status(self) -> int | None:
        return None if self.process is None else self.process.poll()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """What the current run (since the last start) wrote."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def last_lines(self, count: int = _LAST_LINES) -> list[str]:
        return [line.rstrip() for line in self.log_text().splitlines() if line.strip()][-count:]

    def find(self, pattern: re.Pattern[str]) -> str | None:
        match = pattern.search(self.log_text())
        return match.group(1) if match else None

    def death(self, verb: str = "died") -> list[str]:
        """The one report of its end: who, how, where the log is, and the log's last lines,
        labelled as such (they may or may not say why)."""
        status = self.exit_status()
        assert status is not None
        self.reported = True
        lines = [f"{self.name} (pid {self.pid}) {verb}: {describe_exit(status)}; its log: "
                 f"{self.log_path}"]  # fmt: skip
        tail = self.last_lines()
        if tail:
            lines.append(f"last lines of {self.log_path.name}:")
            lines += [f"    {line}" for line in tail]
        return lines

    def wait_for(self, pattern: re.Pattern[str], stop: _Stop, timeout: float) -> str:
        """The first group of ``pattern`` once it shows up in the log."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.find(pattern)
            if found is not None:
                return found
            status = self.exit_status()
            if status == 2 and (mistake := self._usage_error()) is not None:
                self.reported = True  # a mistake it explained itself, in one line: pass it on
                raise DemoError(f"{self.name} refused to start ({mistake}; its log: "
                                f"{self.log_path})", 2)  # fmt: skip
            if status is not None:
                raise DemoError("\n".join(self.death("died while starting")))
            if stop.requested.is_set():
                raise _StopRequestedError
            if time.monotonic() > deadline:
                raise DemoError(f"{self.name} did not start within {timeout:.0f} s "
                                f"(see {self.log_path})")  # fmt: skip
            time.sleep(0.05)

    def _usage_error(self) -> str | None:
        """The one ``<program>: error: ...`` line a command prints before exiting 2."""
        tail = self.last_lines(1)
        return tail[0] if tail and ": error: " in tail[0] else None

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float, hurry: threading.Event) -> str | None:
        """Wait for it to exit after :meth:`terminate`; kill it after ``timeout`` s (or when
        ``hurry`` is set). Returns a problem to report, ``None`` after a clean exit or when
        its end was already reported."""
        if self.process is None:
            return None
        deadline = time.monotonic() + timeout
        problem = None
        while self.process.poll() is None:
            if hurry.is_set() or time.monotonic() > deadline:
                self.process.kill()
                self.process.wait()
                problem = f"{self.name} had to be killed (pid {self.pid})"
                break
            time.sleep(0.05)
        self.close_log()
        if self.reported:
            return None
        self.reported = True
        status = self.process.returncode
        if problem is None and status != 0:
            problem = (f"{self.name} (pid {self.pid}) {describe_exit(status)} while stopping; "
                       f"its log: {self.log_path}")  # fmt: skip
        return problem

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class Processor(Child):
    """A processor child and what the demo's supervision knows about it."""

    def __init__(self, number: int, args: Sequence[str], log_path: Path) -> None:
        super().__init__(f"processor-{number}", args, log_path)
        self.member_id = f"demo-processor-{number}"
        self.ready = False
        self.synced_since_start = False
        self.failed_starts = 0
        """Deaths in a row before its caches synced."""
        self.given_up = False
        self.died_at: float | None = None
        self.shards: tuple[int, ...] = ()
        """Shards its current process holds (last refresh)."""
        self.orphaned: tuple[int, ...] = ()
        """Shards it held when it died, until the others took them over."""
        self.taken_over_at: float | None = None
        """When the others took its shards over (the restart waits a little, to show it)."""
        self.back_pending = False
        """Restarted, not yet told that it owns shards again."""

    def holds(self, owner: str | None) -> bool:
        """Whether the shard lease holder ``owner`` (``member/pid/random``) is its current
        process (a dead one's lease keeps the old pid until it expires)."""
        return (
            owner is not None and self.running and owner.startswith(f"{self.member_id}/{self.pid}/")
        )

    def summary(self) -> str:
        """Its state in a few words, for the view."""
        if self.given_up:
            state = "given up"
        elif not self.running:
            state = "down"
        elif not self.ready:
            state = f"starting, {len(self.shards)} shards" if self.shards else "starting"
        else:
            state = f"{len(self.shards)} shards"
        return f"{self.name}: {state}" + (f" (restarts {self.restarts})" if self.restarts else "")


class _StopRequestedError(Exception):
    """Ctrl-C/SIGTERM/SIGHUP arrived while starting up."""


def _child_env() -> dict[str, str]:
    """The demo's environment without ``INFORMER_BUS_*``: the demo's flags say everything,
    and a variable meant for a real deployment (a Redis URL, a prefix) must not leak in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}


def informer_bus_command() -> str:
    """How to run ``informer-bus`` from any terminal: the script next to this interpreter (a
    venv's ``bin``, which need not be on the PATH), else this interpreter with ``-m``."""
    script = Path(sys.executable).with_name("informer-bus")
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m informer_bus.cli"


# --- the view ----------------------------------------------------------------------------------


@dataclass
class _Totals:
    at: float
    added: int
    read: int


@dataclass
class ViewState:
    """What one refresh of the view knows."""

    uptime: float
    resource: ResourceStatus | None
    error: str | None
    published_per_s: float | None
    processed_per_s: float | None
    ready: int
    processors: int
    """Processors the demo runs (given-up ones excluded)."""
    summaries: tuple[str, ...] = ()
    """One :meth:`Processor.summary` per processor."""

    @property
    def synced(self) -> bool:
        """Listed into every shard, every shard owned by a live processor, every processor's
        caches synced: what "the pipeline is up" means."""
        resource = self.resource
        return (
            resource is not None
            and resource.synced
            and resource.owned_shards == len(resource.shards)
            and self.processors > 0
            and self.ready == self.processors
        )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}/s"


def status_line(state: ViewState) -> str:
    """One line per refresh when the output is not a terminal (and the view's summary)."""
    head = f"[{state.uptime:6.1f} s]"
    if state.resource is None:
        return f"{head} status unavailable: {state.error or 'no data yet'}"
    resource = state.resource
    lag = resource.lag
    lag_s = resource.max_lag_s
    live = sum(1 for p in resource.processors if p.live)
    line = (
        f"{head} events published {_rate(state.published_per_s)}, processed "
        f"{_rate(state.processed_per_s)} | lag {'?' if lag is None else lag} entries "
        f"({'-' if lag_s is None else f'{lag_s:.1f}'} s) | objects "
        f"{sum(s.objects for s in resource.shards)} | owners {live} processors, "
        f"{resource.owned_shards}/{len(resource.shards)} shards | ready "
        f"{state.ready}/{state.processors} | synced {'yes' if state.synced else 'no'}"
    )
    if state.summaries:
        line += " | " + ", ".join(state.summaries)
    return line


class View:
    """Reads the pipeline's state once per refresh and shows it (ANSI redraw or log lines)."""

    def __init__(
        self,
        *,
        redis_url: str,
        prefix: str,
        resource: str,
        shard_count: int,
        processors: Sequence[Processor],
        header: Sequence[str],
        out: Output,
        live: bool,
    ) -> None:
        self._client = status_client(redis_url, timeout=2.0)
        self._redis_url = redis_url
        self._prefix = prefix
        self._resource = resource
        self._shard_count = shard_count
        self._processors = processors
        self._header = list(header)
        self._messages: deque[str] = deque(maxlen=_KEPT_MESSAGES)
        self._out = out
        self._live = live
        self._previous: _Totals | None = None
        self._started = time.monotonic()

    def close(self) -> None:
        self._client.close()

    @staticmethod
    def _is_ready(child: Processor) -> bool:
        if not child.url or not child.running:
            return False
        try:
            with urllib.request.urlopen(child.url + "/readyz", timeout=1) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError as error:  # 503: not synced yet
            error.close()
        except OSError:
            pass  # not listening (any more): not ready
        return False

    def read(self) -> ViewState:
        """Read Redis and the processors' probes; rates against the previous read. Updates
        each processor's ``ready`` and ``shards``."""
        now = time.monotonic()
        resource: ResourceStatus | None = None
        error = None
        try:
            snapshot = collect_status(
                self._client,
                prefix=self._prefix,
                resources={self._resource: self._shard_count},
                member_ttl=_MEMBER_TTL,
                redis_url=self._redis_url,
            )
            resource = snapshot.resources[0]
        except redis.RedisError as exc:
            error = " ".join(str(exc).split())
        published = processed = None
        if resource is not None:
            totals = _Totals(
                now,
                sum(s.entries_added or 0 for s in resource.shards),
                sum(s.entries_read or 0 for s in resource.shards),
            )
            if self._previous is not None and now > self._previous.at:
                elapsed = now - self._previous.at
                published = max(0.0, (totals.added - self._previous.added) / elapsed)
                processed = max(0.0, (totals.read - self._previous.read) / elapsed)
            self._previous = totals
        for child in self._processors:
            child.ready = self._is_ready(child)
            if resource is not None and child.running:  # a dead one keeps its last shards
                child.shards = tuple(s.shard for s in resource.shards if child.holds(s.owner))
        return ViewState(
            uptime=now - self._started,
            resource=resource,
            error=error,
            published_per_s=published,
            processed_per_s=processed,
            ready=sum(1 for child in self._processors if child.ready),
            processors=sum(1 for child in self._processors if not child.given_up),
        )

    def show(self, state: ViewState) -> None:
        state.summaries = tuple(child.summary() for child in self._processors)
        if not self._live:
            self._out.write(status_line(state) + "\n")
            return
        lines = [*self._header, *self._messages, "", status_line(state), ""]
        for child in self._processors:
            pid = child.pid if child.process is not None else "-"
            shards = _ranges(child.shards) if child.shards else "-"
            lines.append(f"  {child.summary():<40} pid {pid}  shards {shards}")
        if state.resource is not None:
            lines += ["", *render_resource(state.resource)]
        lines += ["", "Ctrl-C to stop"]
        # Home, then each line followed by clear-to-end-of-line, then clear the rest: a redraw
        # in place without the flicker of clearing the whole screen first.
        text = "\x1b[H" + "".join(line + "\x1b[K\n" for line in lines) + "\x1b[J"
        self._out.write(text)

    def message(self, text: str) -> None:
        """Lines that stay (milestones, deaths): above the view on a terminal (the latest
        :data:`_KEPT_MESSAGES`, so a long session does not push the table off the screen)."""
        if self._live:
            self._messages.extend(text.splitlines())
        else:
            self._out.write(text + "\n")


# --- orchestration -----------------------------------------------------------------------------


@dataclass
class _Redis:
    url: str
    prefix: str
    server: RedisServer | None = None
    reported: bool = False


class Demo:
    """One run of the demo; :meth:`run` returns the exit status."""

    def __init__(self, settings: DemoSettings, *, out: Output, live: bool) -> None:
        self.settings = settings
        self.out = out
        self.live = live
        self.stop = _Stop()
        self.children: list[Child] = []
        self.processors: list[Processor] = []
        self.redis: _Redis | None = None
        self.log_dir = Path(
            settings.log_dir or tempfile.mkdtemp(prefix="informer-bus-demo-")
        ).resolve()

    def say(self, text: str) -> None:
        self.out.write("".join(f"{PROGRAM}: {line}\n" for line in text.splitlines()))

    def run(self) -> int:
        """Start everything, show the view until the duration or a signal, stop everything."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"children's logs in {self.log_dir}")
        previous_handlers = self._catch_signals()
        status = 0
        try:
            try:
                self._start()
                status = self._watch()
            except _StopRequestedError:
                self.say(f"{self.stop.signal_name} while starting, stopping")
            except DemoError as exc:
                if exc.status == 2:
                    self._shutdown()
                    return fail(PROGRAM, str(exc))
                status = exc.status
                self.say(str(exc))
            except BaseException:  # a bug: still leave nothing running
                self._shutdown()
                raise
            problems = self._shutdown()
        finally:
            for signum, previous in previous_handlers.items():
                signal.signal(signum, previous)
        return self._report_end(status, problems)

    def _catch_signals(self) -> dict[int, _SignalHandler]:
        """Turn the stop signals into :attr:`stop`; the previous handlers."""
        previous = {}
        for signum in _SIGNALS:
            if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # nohup: the user asked to outlive the terminal
            previous[int(signum)] = signal.signal(signum, self.stop)
        return previous

    def _report_end(self, status: int, problems: Sequence[str]) -> int:
        """Say what went wrong while stopping and how it ended; the exit status."""
        for problem in problems:
            self.say(problem)
        if problems or any(p.given_up for p in self.processors):
            status = status or 1
        self.say(f"stopped{' cleanly' if status == 0 else ''}; logs in {self.log_dir}")
        return status

    # startup

    def _start(self) -> None:
        settings = self.settings
        try:
            resource_id = settings.resource_id
        except ValueError as exc:
            raise DemoError(str(exc), 2) from None
        if settings.kubeconfig is not None and not Path(settings.kubeconfig).is_file():
            raise DemoError(f"no kubeconfig file at {settings.kubeconfig}", 2)
        self.redis = self._start_redis()
        kube_args = self._start_kube_source()
        common = [
            "--redis-url", self.redis.url, "--prefix", self.redis.prefix,
            "--shard-count", str(settings.shard_count), "--http-host", "127.0.0.1",
            "--http-port", "0",
        ]  # fmt: skip
        reflector = self._spawn(
            Child("reflector",
                  ["reflector", "--resource", settings.resource, *kube_args, *common,
                   "--identity", "demo-reflector", "--checkpoint-interval", "1"],
                  self.log_dir / "reflector.log"),
        )  # fmt: skip
        for number in range(1, settings.processors + 1):
            args = ["processor", "--resource", resource_id, "--handler", HANDLER, *common,
                    "--member-id", f"demo-processor-{number}", *settings.lease_flags()]  # fmt: skip
            processor = Processor(number, args, self.log_dir / f"processor-{number}.log")
            self.processors.append(processor)
            self._spawn(processor)
        for child in [reflector, *self.processors]:
            child.url = child.wait_for(_PROBES, self.stop, _STARTUP_TIMEOUT)
        self.out.write(
            "pids: " + " ".join(f"{name}={pid}" for name, pid in self._pids()) + " (all stop "
            "with the demo, even if it is killed)\n"
        )
        for hint in self._hints():
            self.out.write(hint + "\n")

    def _hints(self) -> list[str]:
        """Commands to paste into another terminal (the password of a Redis URL redacted)."""
        assert self.redis is not None
        target = (
            f"--redis-url {shlex.quote(redacted_url(self.redis.url))} "
            f"--prefix {shlex.quote(self.redis.prefix)}"
        )
        command = informer_bus_command()
        resource = shlex.quote(self.settings.resource_id)
        return [
            f"inspect it from another terminal: {command} status {target}",
            f"watch its events: {command} subscribe {resource} {target} --output table",
        ]

    def _pids(self) -> list[tuple[str, int]]:
        pids: list[tuple[str, int]] = []
        if self.redis is not None and self.redis.server is not None:
            assert self.redis.server.process is not None
            pids.append(("redis-server", self.redis.server.process.pid))
        pids += [(child.name, child.pid) for child in self.children]
        return pids

    def _start_redis(self) -> _Redis:
        url = self.settings.redis_url or os.environ.get("REDIS_URL") or None
        if url is None:
            server = RedisServer(self.log_dir / "redis", die_with_parent=True)
            try:
                server.start()
            except RedisServerMissingError as exc:
                raise DemoError(
                    f"{exc}, or point --redis-url / REDIS_URL at a Redis 7", 2
                ) from None
            except RuntimeError as exc:
                raise DemoError(" ".join(str(exc).split())) from None
            self.out.write(f"redis: private redis-server on {server.url}\n")
            return _Redis(server.url, PRIVATE_PREFIX, server)
        where = redacted_url(url)
        try:
            client = status_client(url)
        except ValueError as exc:
            raise DemoError(f"invalid Redis URL {where}: {exc}", 2) from None
        try:
            version = str(client.info("server").get("redis_version", "0"))
        except redis.RedisError as exc:
            reason = " ".join(str(exc).split())
            raise DemoError(f"cannot reach Redis at {where}: {reason}", 2) from None
        finally:
            client.close()
        if int(version.partition(".")[0] or 0) < 7:
            raise DemoError(f"Redis at {where} is {version}; informer-bus needs Redis 7+", 2)
        prefix = f"ib-demo-{uuid.uuid4().hex[:8]}"
        self.out.write(f"redis: {where} (keys under prefix {prefix}, deleted when the demo "
                       "stops)\n")  # fmt: skip
        return _Redis(url, prefix)

    def _start_kube_source(self) -> list[str]:
        """Start the simulator (or point at the kubeconfig); the reflector's source flags."""
        settings = self.settings
        if settings.kubeconfig is not None:
            args = ["--kubeconfig", settings.kubeconfig]
            if settings.context is not None:
                args += ["--context", settings.context]
            self.out.write(f"kubernetes: {settings.kubeconfig}, watching {settings.resource}\n")
            return args
        sim = self._spawn(
            Child("apiserver-sim",
                  ["apiserver-sim", "--port", "0", "--populate", str(settings.pods),
                   "--churn", str(settings.churn), "--seed", "1"],
                  self.log_dir / "apiserver-sim.log"),
        )  # fmt: skip
        sim.url = sim.wait_for(
            re.compile(re.escape(READY_PREFIX) + r"(\S+)"), self.stop, _STARTUP_TIMEOUT
        )
        self.out.write(
            f"kubernetes: apiserver-sim on {sim.url} with {settings.pods} pods, "
            f"{settings.churn:g} events/s\n"
        )
        return ["--kube-url", sim.url]

    def _spawn(self, child: Child) -> Child:
        if self.stop.requested.is_set():
            raise _StopRequestedError
        child.start(_child_env())
        self.children.append(child)
        return child

    # running

    def _watch(self) -> int:
        assert self.redis is not None
        settings = self.settings
        sim = next((c for c in self.children if c.name == "apiserver-sim"), None)
        source = f"apiserver-sim {sim.url}" if sim else f"kubeconfig {settings.kubeconfig}"
        view = View(
            redis_url=self.redis.url,
            prefix=self.redis.prefix,
            resource=settings.resource_id,
            shard_count=settings.shard_count,
            processors=self.processors,
            header=[
                f"informer-bus demo: {settings.resource} from {source}",
                f"redis {redacted_url(self.redis.url)}  prefix {self.redis.prefix}  "
                f"logs {self.log_dir}",
                *self._hints(),
            ],
            out=self.out,
            live=self.live,
        )
        started = time.monotonic()
        deadline = None if settings.duration is None else started + settings.duration
        synced_once = False
        try:
            while True:
                state = view.read()
                ended = self._supervise(state, view)
                view.show(state)
                if state.synced and not synced_once:
                    synced_once = True
                    view.message(self._synced_message(state, time.monotonic() - started))
                if ended is not None:
                    return ended
                timeout = 1.0
                if deadline is not None:
                    timeout = min(timeout, deadline - time.monotonic())
                    if timeout <= 0:
                        self.say(f"{settings.duration:g} s passed, stopping")
                        return 0
                if self.stop.requested.wait(timeout):
                    self.say(f"{self.stop.signal_name}, stopping")
                    return 0
        finally:
            view.close()

    def _synced_message(self, state: ViewState, after: float) -> str:
        resource = state.resource
        assert resource is not None
        objects = sum(shard.objects for shard in resource.shards)
        return (
            f"pipeline synced after {after:.1f} s: {objects} {self.settings.resource} listed "
            f"into {len(resource.shards)} shards, owned by {state.processors} processors whose "
            "caches are synced"
        )

    def _supervise(self, state: ViewState, view: View) -> int | None:
        """Notice deaths and act on them; the exit status when the demo cannot go on."""
        essential = self._dead_essential()
        if essential is not None:
            view.message("\n".join(f"{PROGRAM}: {line}" for line in essential))
            return 1
        now = time.monotonic()
        for child in self.processors:
            if child.given_up:
                continue
            if child.running:
                self._follow(child, view)
                continue
            if child.died_at is None and not self._processor_died(child, view, now):
                continue
            self._maybe_restart(child, state, view, now)
        if not any(not child.given_up for child in self.processors):
            view.message(f"{PROGRAM}: no processor left, stopping")
            return 1
        return None

    def _dead_essential(self) -> list[str] | None:
        """The report of a dead child the demo cannot go on without (Redis, the simulator,
        the reflector), once."""
        server = self.redis.server if self.redis is not None else None
        if server is not None and server.process is not None and self.redis is not None:
            status = server.process.poll()
            if status is not None and not self.redis.reported:
                self.redis.reported = True
                lines = [f"redis-server (pid {server.process.pid}) died: {describe_exit(status)}"
                         f"; its log: {server.log_path}"]  # fmt: skip
                tail = [
                    line.rstrip()
                    for line in (server.log_path.read_text(errors="replace")
                                 if server.log_path.exists() else "").splitlines()
                    if line.strip()
                ][-_LAST_LINES:]  # fmt: skip
                if tail:
                    lines += [f"last lines of {server.log_path.name}:",
                              *(f"    {line}" for line in tail)]  # fmt: skip
                return lines
        for child in self.children:
            if not isinstance(child, Processor) and not child.running and not child.reported:
                return child.death()
        return None

    def _follow(self, child: Processor, view: View) -> None:
        """A running processor: find its probes after a restart, note when it is back."""
        if not child.url:
            child.url = child.find(_PROBES) or ""
        if child.ready and not child.synced_since_start:
            child.synced_since_start = True
            child.failed_starts = 0
            if child.restarts:
                view.message(f"{PROGRAM}: {child.name} is back (pid {child.pid}): its caches "
                             "are synced; shards move back to it")  # fmt: skip
                child.back_pending = True
        if child.back_pending and child.shards:
            child.back_pending = False
            view.message(f"{PROGRAM}: {child.name} owns shards {_ranges(child.shards)} again")

    def _processor_died(self, child: Processor, view: View, now: float) -> bool:
        """Report a processor's death, once; ``False`` when it is not to be restarted."""
        status = child.exit_status()
        assert status is not None
        child.close_log()
        child.reported = True
        child.died_at = now
        child.orphaned = child.shards
        child.shards = ()
        child.back_pending = False
        if not child.synced_since_start:
            child.failed_starts += 1
        line = (f"{child.name} (pid {child.pid}) died: {describe_exit(status)}; its log: "
                f"{child.log_path}")  # fmt: skip
        survivors = any(p is not child and p.running for p in self.processors)
        if child.orphaned and survivors:
            expected = max(self.settings.lease_duration, _MEMBER_TTL)
            line += (
                f"; its shards {_ranges(child.orphaned)} move to the other processors once "
                f"its leases and membership expire (about {expected:.0f} s)"
            )
        elif child.orphaned:
            line += f"; its shards {_ranges(child.orphaned)} wait for it (no other processor)"
        view.message(f"{PROGRAM}: {line}")
        if child.failed_starts >= MAX_FAILED_STARTS:
            child.given_up = True
            others = [p.name for p in self.processors if not p.given_up]
            view.message(
                f"{PROGRAM}: {child.name} died {child.failed_starts} times in a row before "
                "its caches synced: not restarting it"
                + (f"; going on with {', '.join(others)}" if others else "")
            )
            return False
        return True

    def _maybe_restart(self, child: Processor, state: ViewState, view: View, now: float) -> None:
        """Restart a dead processor once the others took its shards over (so the view shows
        the failover) or when that takes too long, and not before its backoff."""
        assert child.died_at is not None
        waited = now - child.died_at
        survivors = [p for p in self.processors if p is not child and p.running]
        if child.orphaned and state.resource is not None:
            holders = {
                shard.shard: next((p for p in survivors if p.holds(shard.owner)), None)
                for shard in state.resource.shards
            }
            takers = [holders.get(shard) for shard in child.orphaned]
            if all(taker is not None for taker in takers):
                names = sorted({taker.name for taker in takers if taker is not None})
                view.message(
                    f"{PROGRAM}: shards {_ranges(child.orphaned)} of {child.name} taken over "
                    f"by {', '.join(names)} {waited:.1f} s after it died"
                )
                child.orphaned = ()
                child.taken_over_at = now
        if child.taken_over_at is not None and now - child.taken_over_at < _SHOW_TAKEOVER:
            return
        takeover_deadline = self.settings.lease_duration + _MEMBER_TTL + _TAKEOVER_SLACK
        if child.orphaned and survivors and waited < takeover_deadline:
            return
        if waited < _RESTART_BACKOFF * 2 ** max(0, child.failed_starts - 1):
            return
        if self.stop.requested.is_set():
            return
        child.orphaned = ()
        child.taken_over_at = None
        child.died_at = None
        child.synced_since_start = False
        child.shards = ()
        child.start(_child_env())
        view.message(f"{PROGRAM}: restarting {child.name} (restart {child.restarts}, pid "
                     f"{child.pid}); its log continues in {child.log_path}")  # fmt: skip

    # shutdown

    def _shutdown(self) -> list[str]:
        """Processors, then the reflector, then the simulator, then Redis (or the demo's
        keys in someone else's Redis). Returns the problems met."""
        problems: list[str] = []
        hurry = self.stop.hurry
        stages: list[tuple[Sequence[Child], float]] = [
            (self.processors, _PROCESSOR_STOP_TIMEOUT),
            ([c for c in self.children if c.name == "reflector"], _STOP_TIMEOUT),
            ([c for c in self.children if c.name == "apiserver-sim"], _STOP_TIMEOUT),
        ]
        for children, timeout in stages:
            for child in children:
                child.terminate()
            for child in children:
                problem = child.wait(timeout, hurry)
                if problem is not None:
                    problems.append(problem)
        if self.redis is not None:
            if self.redis.server is not None:
                self.redis.server.stop()
            else:
                problems += self._delete_keys(self.redis)
        return problems

    def _delete_keys(self, target: _Redis) -> list[str]:
        client = status_client(target.url)
        try:
            batch: list[str] = []
            for key in client.scan_iter(match=f"{target.prefix}:*", count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
        except redis.RedisError as exc:
            return [f"could not delete the demo's keys (prefix {target.prefix}): {exc}"]
        finally:
            client.close()
        return []


def run_demo(settings: DemoSettings, *, out: TextIO | None = None, live: bool | None = None) -> int:
    """Run the demo in the foreground; returns the exit status (see the module docstring)."""
    output = Output(sys.stdout if out is None else out)
    return Demo(settings, out=output, live=output.isatty() if live is None else live).run()


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
