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

Why every child runs in a process group of its own: a Ctrl-C in the terminal would otherwise
reach all of them at once, and Redis would vanish under processors that are still
acknowledging. The demo gets the signal alone and stops the processors and the reflector first
(SIGTERM: they drain and hand their leases back), then the simulator, then Redis.

Why a key prefix of its own on a Redis it did not start (``ib-demo-<random>``): that Redis may
hold a real pipeline's keys under ``ib``, and a demo reflector must never compete with a real
one. Those keys are deleted when the demo stops.

Exit status: 0 after ``--duration`` or on Ctrl-C / SIGTERM once every child stopped cleanly;
1 when a child failed or had to be killed; 2 for a mistake (bad flag, no ``redis-server``
binary, unreachable Redis, unreadable kubeconfig).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Final, TextIO

import redis

from common.service_runner import fail
from common.settings import SettingsError, add_flags, settings_from_args
from informer_bus.apiserver_sim.command import READY_PREFIX
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

__all__ = ["DEMO", "DemoSettings", "run_demo"]

PROGRAM: Final = "informer-bus demo"
ENV_PREFIX: Final = "INFORMER_BUS_DEMO_"
HANDLER: Final = "processor_svc.examples.pod_phase_counter:PodPhaseCounter"
PRIVATE_PREFIX: Final = "ib"

HELP = (
    "Run the whole pipeline locally with a live view: Redis, the API server simulator with "
    "churning pods (or a real cluster with --kubeconfig), a reflector and processors."
)

_PROBES = re.compile(r"metrics and probes on (http://\S+)")
_STARTUP_TIMEOUT: Final = 60.0
_PROCESSOR_STOP_TIMEOUT: Final = 25.0  # the processor's default shutdown grace is 10 s
_STOP_TIMEOUT: Final = 15.0


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
        if self.kubeconfig is None and (self.resource != "pods" or self.context is not None):
            raise SettingsError("--resource and --context need --kubeconfig (the simulator "
                                "demo watches pods)")  # fmt: skip

    @property
    def resource_id(self) -> str:
        """The resource's name in Redis keys (``ValueError`` for a malformed ``--resource``)."""
        return ResourceSpec.parse(self.resource).resource_id


class DemoError(Exception):
    """The demo cannot go on; ``status`` is the exit status (2: the user's to fix)."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


class _Stop:
    """SIGINT/SIGTERM as events: the first asks to stop, the next ones to hurry (kill)."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.hurry = threading.Event()
        self.signal_name: str | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            self.hurry.set()
        self.signal_name = signal.Signals(signum).name
        self.requested.set()


# --- child processes ---------------------------------------------------------------------------


class Child:
    """One ``informer-bus`` subcommand as a child process, its output in ``log_path``."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.args = [sys.executable, "-m", "informer_bus.cli", *args]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.url = ""

    def start(self, env: dict[str, str]) -> None:
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=env, process_group=0,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def exit_status(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def last_line(self) -> str:
        lines = [line for line in self.log_text().splitlines() if line.strip()]
        return lines[-1].strip() if lines else "(no output)"

    def wait_for(self, pattern: re.Pattern[str], stop: _Stop, timeout: float) -> str:
        """The first group of ``pattern`` once it shows up in the log."""
        deadline = time.monotonic() + timeout
        while True:
            match = pattern.search(self.log_text())
            if match:
                return match.group(1)
            status = self.exit_status()
            if status is not None:
                raise DemoError(
                    f"{self.name} exited with status {status} while starting: {self.last_line()}",
                    2 if status == 2 else 1,
                )
            if stop.requested.is_set():
                raise _StopRequestedError
            if time.monotonic() > deadline:
                raise DemoError(f"{self.name} did not start within {timeout:.0f} s "
                                f"(see {self.log_path})")  # fmt: skip
            time.sleep(0.05)

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, timeout: float, hurry: threading.Event) -> str | None:
        """Wait for it to exit after :meth:`terminate`; kill it after ``timeout`` s (or when
        ``hurry`` is set). Returns a problem to report, ``None`` after a clean exit."""
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
        if self._log is not None:
            self._log.close()
            self._log = None
        status = self.process.returncode
        if problem is None and status != 0:
            problem = f"{self.name} exited with status {status}: {self.last_line()}"
        return problem


class _StopRequestedError(Exception):
    """Ctrl-C/SIGTERM arrived while starting up."""


def _child_env() -> dict[str, str]:
    """The demo's environment without ``INFORMER_BUS_*``: the demo's flags say everything,
    and a variable meant for a real deployment (a Redis URL, a prefix) must not leak in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("INFORMER_BUS_")}


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

    @property
    def synced(self) -> bool:
        """Listed into every shard, every shard owned by a live processor, every processor's
        caches synced: what "the pipeline is up" means."""
        resource = self.resource
        return (
            resource is not None
            and resource.synced
            and resource.owned_shards == len(resource.shards)
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
    return (
        f"{head} events published {_rate(state.published_per_s)}, processed "
        f"{_rate(state.processed_per_s)} | lag {'?' if lag is None else lag} entries "
        f"({'-' if lag_s is None else f'{lag_s:.1f}'} s) | objects "
        f"{sum(s.objects for s in resource.shards)} | owners {live} processors, "
        f"{resource.owned_shards}/{len(resource.shards)} shards | ready "
        f"{state.ready}/{state.processors} | synced {'yes' if state.synced else 'no'}"
    )


class View:
    """Reads the pipeline's state once per refresh and shows it (ANSI redraw or log lines)."""

    def __init__(
        self,
        *,
        redis_url: str,
        prefix: str,
        resource: str,
        shard_count: int,
        processors: Sequence[Child],
        header: Sequence[str],
        out: TextIO,
        live: bool,
    ) -> None:
        self._client = status_client(redis_url, timeout=2.0)
        self._redis_url = redis_url
        self._prefix = prefix
        self._resource = resource
        self._shard_count = shard_count
        self._processors = processors
        self._header = list(header)
        self._out = out
        self._live = live
        self._previous: _Totals | None = None
        self._started = time.monotonic()

    def close(self) -> None:
        self._client.close()

    def _ready(self) -> int:
        ready = 0
        for child in self._processors:
            try:
                with urllib.request.urlopen(child.url + "/readyz", timeout=1) as response:
                    ready += response.status == 200
            except urllib.error.HTTPError as error:  # 503: not synced yet
                error.close()
            except OSError:
                pass  # not listening (any more): not ready
        return ready

    def refresh(self) -> ViewState:
        """Read, compute rates against the previous read, and show."""
        now = time.monotonic()
        resource: ResourceStatus | None = None
        error = None
        try:
            snapshot = collect_status(
                self._client,
                prefix=self._prefix,
                resources={self._resource: self._shard_count},
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
        state = ViewState(
            uptime=now - self._started,
            resource=resource,
            error=error,
            published_per_s=published,
            processed_per_s=processed,
            ready=self._ready(),
            processors=len(self._processors),
        )
        self._show(state)
        return state

    def _show(self, state: ViewState) -> None:
        if not self._live:
            self._out.write(status_line(state) + "\n")
            self._out.flush()
            return
        lines = [*self._header, "", status_line(state), ""]
        if state.resource is not None:
            lines += render_resource(state.resource)
        lines += ["", "Ctrl-C to stop"]
        # Home, then each line followed by clear-to-end-of-line, then clear the rest: a redraw
        # in place without the flicker of clearing the whole screen first.
        text = "\x1b[H" + "".join(line + "\x1b[K\n" for line in lines) + "\x1b[J"
        self._out.write(text)
        self._out.flush()

    def message(self, text: str) -> None:
        """A line that stays (milestones): below the view on a terminal."""
        if self._live:
            self._header.append(text)
        else:
            self._out.write(text + "\n")
            self._out.flush()


# --- orchestration -----------------------------------------------------------------------------


@dataclass
class _Redis:
    url: str
    prefix: str
    server: RedisServer | None = None


class Demo:
    """One run of the demo; :meth:`run` returns the exit status."""

    def __init__(self, settings: DemoSettings, *, out: TextIO, live: bool) -> None:
        self.settings = settings
        self.out = out
        self.live = live
        self.stop = _Stop()
        self.children: list[Child] = []
        self.processors: list[Child] = []
        self.redis: _Redis | None = None
        self.log_dir = Path(
            settings.log_dir or tempfile.mkdtemp(prefix="informer-bus-demo-")
        ).resolve()

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def run(self) -> int:
        """Start everything, show the view until the duration or a signal, stop everything."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.say(f"{PROGRAM}: children's logs in {self.log_dir}")
        handlers = {
            signum: signal.signal(signum, self.stop) for signum in (signal.SIGINT, signal.SIGTERM)
        }
        status = 0
        mistake: str | None = None
        try:
            try:
                self._start()
                status = self._watch()
            except _StopRequestedError:
                self.say(f"{PROGRAM}: {self.stop.signal_name} while starting, stopping")
            except DemoError as exc:
                status = exc.status
                if status == 2:
                    mistake = str(exc)
                else:
                    self.say(f"{PROGRAM}: {exc}")
            except BaseException:  # a bug, a broken pipe: still leave nothing running
                self._shutdown()
                raise
            problems = self._shutdown()
        finally:
            for signum, previous in handlers.items():
                signal.signal(signum, previous)
        if mistake is not None:
            return fail(PROGRAM, mistake)
        for problem in problems:
            self.say(f"{PROGRAM}: {problem}")
        if problems:
            status = status or 1
        self.say(f"{PROGRAM}: stopped{' cleanly' if not problems else ''}; logs in {self.log_dir}")
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
            "reflector",
            ["reflector", "--resource", settings.resource, *kube_args, *common,
             "--identity", "demo-reflector", "--checkpoint-interval", "1"],
        )  # fmt: skip
        for number in range(1, settings.processors + 1):
            args = ["processor", "--resource", resource_id, "--handler", HANDLER, *common,
                    "--member-id", f"demo-processor-{number}"]  # fmt: skip
            self.processors.append(self._spawn(f"processor-{number}", args))
        for child in [reflector, *self.processors]:
            child.url = child.wait_for(_PROBES, self.stop, _STARTUP_TIMEOUT)
        self.say(
            "pids: " + " ".join(f"{name}={pid}" for name, pid in self._pids()) + " (all stop "
            "with the demo)"
        )
        self.say(self._status_hint())

    def _status_hint(self) -> str:
        assert self.redis is not None
        return (
            f"inspect it from another terminal: informer-bus status --redis-url "
            f"{redacted_url(self.redis.url)} --prefix {self.redis.prefix}"
        )

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
            server = RedisServer(self.log_dir / "redis")
            try:
                server.start()
            except RedisServerMissingError as exc:
                raise DemoError(
                    f"{exc}, or point --redis-url / REDIS_URL at a Redis 7", 2
                ) from None
            except RuntimeError as exc:
                raise DemoError(" ".join(str(exc).split())) from None
            self.say(f"redis: private redis-server on {server.url}")
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
        self.say(f"redis: {where} (keys under prefix {prefix}, deleted when the demo stops)")
        return _Redis(url, prefix)

    def _start_kube_source(self) -> list[str]:
        """Start the simulator (or point at the kubeconfig); the reflector's source flags."""
        settings = self.settings
        if settings.kubeconfig is not None:
            args = ["--kubeconfig", settings.kubeconfig]
            if settings.context is not None:
                args += ["--context", settings.context]
            self.say(f"kubernetes: {settings.kubeconfig}, watching {settings.resource}")
            return args
        sim = self._spawn(
            "apiserver-sim",
            ["apiserver-sim", "--port", "0", "--populate", str(settings.pods),
             "--churn", str(settings.churn), "--seed", "1"],
        )  # fmt: skip
        sim.url = sim.wait_for(
            re.compile(re.escape(READY_PREFIX) + r"(\S+)"), self.stop, _STARTUP_TIMEOUT
        )
        self.say(
            f"kubernetes: apiserver-sim on {sim.url} with {settings.pods} pods, "
            f"{settings.churn:g} events/s"
        )
        return ["--kube-url", sim.url]

    def _spawn(self, name: str, args: Sequence[str]) -> Child:
        if self.stop.requested.is_set():
            raise _StopRequestedError
        child = Child(name, args, self.log_dir / f"{name}.log")
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
                self._status_hint(),
            ],
            out=self.out,
            live=self.live,
        )
        started = time.monotonic()
        deadline = None if settings.duration is None else started + settings.duration
        synced_once = False
        try:
            while True:
                state = view.refresh()
                if state.synced and not synced_once:
                    synced_once = True
                    view.message(self._synced_message(state, time.monotonic() - started))
                failed = self._failed_child()
                if failed is not None:
                    raise DemoError(failed)
                timeout = 1.0
                if deadline is not None:
                    timeout = min(timeout, deadline - time.monotonic())
                    if timeout <= 0:
                        self.say(f"{PROGRAM}: {settings.duration:g} s passed, stopping")
                        return 0
                if self.stop.requested.wait(timeout):
                    self.say(f"{PROGRAM}: {self.stop.signal_name}, stopping")
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

    def _failed_child(self) -> str | None:
        for child in self.children:
            status = child.exit_status()
            if status is not None:
                return f"{child.name} exited with status {status}: {child.last_line()}"
        return None

    # shutdown

    def _shutdown(self) -> list[str]:
        """Processors, then the reflector, then the simulator, then Redis (or the demo's
        keys in someone else's Redis). Returns the problems met."""
        problems: list[str] = []
        hurry = self.stop.hurry
        stages: list[tuple[list[Child], float]] = [
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
    stream = sys.stdout if out is None else out
    return Demo(settings, out=stream, live=stream.isatty() if live is None else live).run()


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        HELP + " Children's logs go to a directory printed at start. Ctrl-C or SIGTERM stops "
        "the processors and the reflector first, then the simulator and Redis (exit 0). "
        "Exit status: 0 after a clean stop, 1 when a child failed, 2 for a mistake. Every "
        "flag can also be set with the INFORMER_BUS_DEMO_<NAME> environment variable shown in "
        "its help; REDIS_URL is used when --redis-url is not given."
    )
    add_flags(parser, DemoSettings, ENV_PREFIX)


def _run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(DemoSettings, ENV_PREFIX, args)
    except SettingsError as exc:
        return fail(PROGRAM, str(exc))
    return run_demo(settings)


DEMO = Subcommand(name="demo", help=HELP, configure=_configure, run=_run)
