"""One run of the demo: start the children in order, supervise them (report deaths, let the
survivors take a dead processor's shards over, restart it), stop them in order.

See the package docstring for why each child has a process group of its own, why it is tied
to the demo, and why the shutdown goes processors, reflector, simulator, Redis.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Final, TextIO

import redis

from common.redis_config import redacted_url
from common.service_runner import fail
from informer_bus.demo.children import (
    Child,
    DemoError,
    Processor,
    StopRequestedError,
    child_env,
    death_report,
    describe_exit,
)
from informer_bus.demo.settings import (
    HANDLER,
    MAX_FAILED_STARTS,
    MEMBER_TTL,
    PRIVATE_PREFIX,
    PROGRAM,
    DemoSettings,
)
from informer_bus.demo.view import Output, View, ViewState
from informer_bus.local_redis import REDIS_STOP_TIMEOUT, RedisServer, RedisServerMissingError
from informer_bus.status.collect import status_client
from informer_bus.status.render import shard_ranges

__all__ = ["SIMULATOR_MISSING", "Demo", "informer_bus_command", "run_demo"]

_PROBES = re.compile(r"metrics and probes on (http://\S+)")
_STARTUP_TIMEOUT: Final = 60.0
_PROCESSOR_STOP_TIMEOUT: Final = 25.0  # the processor's default shutdown grace is 10 s
_STOP_TIMEOUT: Final = 15.0
_SHUTDOWN_BOUND: Final = _PROCESSOR_STOP_TIMEOUT + 2 * _STOP_TIMEOUT + REDIS_STOP_TIMEOUT
"""The most the ordered shutdown waits: the processors, the reflector, the simulator, Redis."""
_STOPPING: Final = f"stopping (up to {_SHUTDOWN_BOUND:g} s; a second signal kills what is left)"
_RESTART_BACKOFF: Final = 1.0  # doubled for each failed start in a row
_SHOW_TAKEOVER: Final = 2.0  # seconds the view shows a takeover before the restart
_TAKEOVER_SLACK: Final = 10.0  # beyond lease + member TTL, before restarting without a takeover
_LAST_LINES: Final = 5
_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SIMULATOR_MISSING: Final = (
    "the API simulator is not installed (it is not part of informer-bus): run `make demo` or "
    "`pip install -e ./apiserver_sim` in a clone of the repository, or watch a real cluster "
    "with --kubeconfig"
)
_SignalHandler = Callable[[int, FrameType | None], object] | int | None


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


def informer_bus_command() -> str:
    """How to run ``informer-bus`` from any terminal: the script next to this interpreter (a
    venv's ``bin``, which need not be on the PATH), else this interpreter with ``-m``."""
    script = Path(sys.executable).with_name("informer-bus")
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m informer_bus.cli"


def _simulator_ready_line() -> str:
    """The start of the line the API simulator prints once it serves; a ``DemoError`` saying
    how to install it where it is missing (it is not part of the informer-bus wheel)."""
    try:
        from apiserver_sim.command import READY_PREFIX  # noqa: PLC0415 - optional, see above
    except ImportError:
        raise DemoError(SIMULATOR_MISSING, 2) from None
    return READY_PREFIX


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
            except StopRequestedError:
                self.say(f"{self.stop.signal_name} while starting: {_STOPPING}")
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
        simulator_ready = "" if settings.kubeconfig is not None else _simulator_ready_line()
        self.redis = self._start_redis()
        kube_args = self._start_kube_source(simulator_ready)
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
            child.url = child.wait_for(_PROBES, self.stop.requested, _STARTUP_TIMEOUT)
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
        url = self.settings.redis_url or None  # the flag, else the env (common.settings' rule)
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

    def _start_kube_source(self, simulator_ready: str) -> list[str]:
        """Start the simulator (or point at the kubeconfig); the reflector's source flags.
        ``simulator_ready``: the start of the line the simulator prints once it serves."""
        settings = self.settings
        if settings.kubeconfig is not None:
            args = ["--kubeconfig", settings.kubeconfig]
            if settings.context is not None:
                args += ["--context", settings.context]
            self.out.write(f"kubernetes: {settings.kubeconfig}, watching {settings.resource}\n")
            return args
        sim = self._spawn(
            Child("apiserver-sim",
                  ["--port", "0", "--populate", str(settings.pods),
                   "--churn", str(settings.churn), "--seed", "1"],
                  self.log_dir / "apiserver-sim.log", module="apiserver_sim"),
        )  # fmt: skip
        sim.url = sim.wait_for(
            re.compile(re.escape(simulator_ready) + r"(\S+)"), self.stop.requested,
            _STARTUP_TIMEOUT,
        )  # fmt: skip
        self.out.write(
            f"kubernetes: apiserver-sim on {sim.url} with {settings.pods} pods, "
            f"{settings.churn:g} events/s\n"
        )
        return ["--kube-url", sim.url]

    def _spawn(self, child: Child) -> Child:
        if self.stop.requested.is_set():
            raise StopRequestedError
        child.start(child_env())
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
                    self.say(f"{self.stop.signal_name}: {_STOPPING}")
                    return 0
        finally:
            view.close()

    def _synced_message(self, state: ViewState, after: float) -> str:
        resource = state.resource
        assert resource is not None
        objects = sum(shard.objects for shard in resource.shards)
        return (
            f"pipeline synced after {after:.1f} s: {objects} {self.settings.resource} listed "
            f"into {len(resource.shards)} shards, owned by {state.holders} processors whose "
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
        self._report_rebalance(state, view)
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
                log = server.log_path
                text = log.read_text(errors="replace") if log.exists() else ""
                tail = [line.rstrip() for line in text.splitlines() if line.strip()][-_LAST_LINES:]
                return death_report("redis-server", server.process.pid, status, log, tail)
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
                             "are synced; the shards rebalance")  # fmt: skip
                child.back_pending = True

    def _report_rebalance(self, state: ViewState, view: View) -> None:
        """Once the shards settled after processors came back, who owns which, as Redis says.

        Settled is what every processor's assignment aims at (``processor_svc.assignment``):
        every shard held by a running processor and the counts differ by one at most. The
        assignment is sticky, not a return to what each held before: the survivor keeps the
        shards it holds within its quota, so the one back usually gets others than it had.
        """
        back = [p for p in self.processors if p.back_pending and p.running]
        running = [p for p in self.processors if p.running]
        resource = state.resource
        if not back or resource is None:
            return
        counts = [len(p.shards) for p in running]
        if sum(counts) != len(resource.shards) or max(counts) - min(counts) > 1:
            return
        owners = ", ".join(
            f"{p.name} owns {'shards ' + shard_ranges(p.shards) if p.shards else 'no shard'}"
            for p in running
        )
        before = []
        for child in back:
            child.back_pending = False
            if child.held_before_death:
                held = shard_ranges(child.held_before_death)
                same = child.shards == child.held_before_death
                before.append(f"{child.name} {'owned the same' if same else 'owned ' + held} "
                              "before it died")  # fmt: skip
        view.message(f"{PROGRAM}: shards rebalanced: {owners}"
                     + (f" ({'; '.join(before)})" if before else ""))  # fmt: skip

    def _processor_died(self, child: Processor, view: View, now: float) -> bool:
        """Report a processor's death, once; ``False`` when it is not to be restarted."""
        status = child.exit_status()
        assert status is not None
        child.close_log()
        child.reported = True
        child.died_at = now
        child.orphaned = child.held_before_death = child.shards
        child.shards = ()
        child.back_pending = False
        if not child.synced_since_start:
            child.failed_starts += 1
        line = (f"{child.name} (pid {child.pid}) died: {describe_exit(status)}; its log: "
                f"{child.log_path}")  # fmt: skip
        survivors = any(p is not child and p.running for p in self.processors)
        if child.orphaned and survivors:
            expected = max(self.settings.lease_duration, MEMBER_TTL)
            line += (
                f"; its shards {shard_ranges(child.orphaned)} move to the other processors once "
                f"its leases and membership expire (about {expected:.0f} s)"
            )
        elif child.orphaned:
            line += f"; its shards {shard_ranges(child.orphaned)} wait for it (no other processor)"
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
        if child.orphaned and state.group is not None:
            holders = {
                shard.shard: next((p for p in survivors if p.holds(shard.owner)), None)
                for shard in state.group.shards
            }
            takers = [holders.get(shard) for shard in child.orphaned]
            if all(taker is not None for taker in takers):
                names = sorted({taker.name for taker in takers if taker is not None})
                view.message(
                    f"{PROGRAM}: shards {shard_ranges(child.orphaned)} of {child.name} taken over "
                    f"by {', '.join(names)} {waited:.1f} s after it died"
                )
                child.orphaned = ()
                child.taken_over_at = now
        if child.taken_over_at is not None and now - child.taken_over_at < _SHOW_TAKEOVER:
            return
        takeover_deadline = self.settings.lease_duration + MEMBER_TTL + _TAKEOVER_SLACK
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
        child.start(child_env())
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
