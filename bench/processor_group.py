"""The processors under test: ``count`` ``python -m processor_svc`` children with a bench
handler, started together on a filled Redis, and what their handlers reported.

Each child's handler writes every update it saw (and its counters) to files in the group's data
directory (``bench_handlers``); the group reads them back, so a burst is timed by the handlers'
own clock, and asks each child's ``/readyz`` which shards it owns (synced = every child ready
and the shards spread evenly). A handler that only counts (``KeyOnly``) is read from its counts
and the clock of its last update: no latency, the same progress and burst end.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
from bench_handlers import DIR_ENV, RECORD, Update, records_updates
from harness import ROOT, ServiceChild
from proc_stats import process_cpu_seconds
from reflector_child import PREFIX, SHARDS
from run_control import timeout_for, wait_for
from sim_control import RESOURCE

TRIVIAL = "bench_handlers:Trivial"
IO_BOUND = "bench_handlers:IoBound"
KEY_ONLY = "bench_handlers:KeyOnly"
NOT_COUNTS = frozenset({"pid", "last_update_ns"})
"""Fields of a handler's stats file that are not counts to add up over the children."""


class ProcessorChild(ServiceChild):
    """``python -m processor_svc`` with a bench handler; its "started ... probes on URL" line
    gives the URL of /readyz and the moment imports were done. ``flags`` are more processor
    flags (``group``, a view's), added to the bench's own or replacing them."""

    label = "processor"

    def __init__(
        self,
        redis_url: str,
        handler: str,
        member: str,
        data_dir: Path,
        log_path: Path,
        *,
        cache: str = "compact",
        flags: Mapping[str, object] | None = None,
    ) -> None:
        all_flags = {
            "resource": RESOURCE,
            "redis-url": redis_url,
            "prefix": PREFIX,
            "shard-count": SHARDS,
            "handler": handler,
            "http-host": "127.0.0.1",
            "http-port": 0,
            "member-id": member,
            "log-level": "info",
            "cache": cache,
            **(flags or {}),
        }
        python_path = [
            str(ROOT / "bench"),
            str(ROOT),
            *filter(None, [os.environ.get("PYTHONPATH")]),
        ]
        super().__init__(
            "processor_svc",
            all_flags,
            log_path,
            extra_env={
                DIR_ENV: str(data_dir),
                "PYTHONPATH": os.pathsep.join(python_path),
            },
            # One clock with the handlers' stamps (time.monotonic is system-wide on Linux).
            clock=time.monotonic,
            stop_timeout=30.0,  # SIGTERM drains, acknowledges and hands the shards over
        )
        self.data_dir = data_dir
        self.url = ""
        self.started = 0.0
        self.cpu_at_started = 0.0
        """Its CPU seconds when it said it started: a sync's CPU without interpreter start-up
        and imports, as the in-process readers it is compared with are measured."""

    def on_message(self, message: str, arrived: float) -> None:
        if " started for " in message and "probes on " in message and not self.url:
            self.started = arrived
            self.cpu_at_started = process_cpu_seconds(self.pid)
            self.url = message.rsplit("probes on ", 1)[1].strip()

    def owned(self) -> list[int] | None:
        """The shards it owns when /readyz says ready, else None."""
        if not self.url:
            return None
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as resp:
                detail = str(orjson.loads(resp.read())["detail"])
        except (urllib.error.URLError, OSError):  # 503 (not ready) is an HTTPError
            return None
        found = re.search(r"owns shards \[([\d, ]*)\]", detail)
        return [int(s) for s in found.group(1).split(",") if s.strip()] if found else None


class Group:
    """``count`` processor children started together, and what their handlers reported."""

    def __init__(
        self,
        count: int,
        handler: str,
        redis_url: str,
        *,
        data_dir: Path,
        workdir: Path,
        tag: str,
        cache: str = "compact",
        flags: Mapping[str, object] | None = None,
    ) -> None:
        self.children = [
            ProcessorChild(
                redis_url,
                handler,
                f"{tag}-p{i}",
                data_dir,
                workdir / f"processor-{tag}-p{i}.log",
                cache=cache,
                flags=flags,
            )
            for i in range(count)
        ]
        self.data_dir = data_dir
        self.spawned = 0.0
        self.offsets: dict[int, int] = {}
        self.records_updates = records_updates(handler)
        """Whether the handler writes a record per update (else :meth:`updates` is empty and
        progress comes from its counts)."""
        self.updates_at_mark = 0

    def start(self) -> None:
        self.spawned = time.monotonic()
        for child in self.children:
            child.start()

    def stop(self) -> None:
        for child in self.children:  # all at once, then reap
            child.terminate()
        for child in self.children:
            child.stop()

    def check_alive(self) -> None:
        for child in self.children:
            child.check_alive()

    def balanced(self) -> bool:
        """Every child ready, the shards split evenly among them, none twice."""
        quota = SHARDS // len(self.children)
        owned: list[int] = []
        for child in self.children:
            shards = child.owned()
            if shards is None or not quota <= len(shards) <= quota + 1:
                return False
            owned += shards
        return sorted(owned) == list(range(SHARDS))

    def _file(self, child: ProcessorChild, kind: str) -> Path:
        return self.data_dir / f"{kind}-{child.pid}.{'bin' if kind == 'updates' else 'json'}"

    def mark(self) -> None:
        """From now on, :meth:`updates` counts and reads only what handlers record next (a
        counting handler's stats are flushed every 20 ms: mark a quiet group)."""
        for child in self.children:
            path = self._file(child, "updates")
            self.offsets[child.pid] = path.stat().st_size if path.exists() else 0
        self.updates_at_mark = self.counts().get("updates", 0)

    def updates_seen(self) -> int:
        """Updates the handlers were called with since :meth:`mark`."""
        if not self.records_updates:
            return self.counts().get("updates", 0) - self.updates_at_mark
        total = 0
        for child in self.children:
            path = self._file(child, "updates")
            if path.exists():
                total += (path.stat().st_size - self.offsets.get(child.pid, 0)) // RECORD.size
        return total

    def updates(self) -> list[Update]:
        """Every update the handlers recorded since :meth:`mark`."""
        return [record for records in self.updates_by_child() for record in records]

    def updates_by_child(self) -> list[list[Update]]:
        """:meth:`updates`, one list per child."""
        out: list[list[tuple[int, float]]] = []
        for child in self.children:
            path = self._file(child, "updates")
            raw = b""
            if path.exists():
                with path.open("rb") as data:
                    data.seek(self.offsets.get(child.pid, 0))
                    raw = data.read()
            raw = raw[: len(raw) - len(raw) % RECORD.size]
            out.append([Update._make(record) for record in RECORD.iter_unpack(raw)])
        return out

    def _stats(self) -> list[dict[str, int]]:
        out = []
        for child in self.children:
            with contextlib.suppress(OSError, orjson.JSONDecodeError):
                out.append(orjson.loads(self._file(child, "stats").read_bytes()))
        return out

    def counts(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for stats in self._stats():
            for name, value in stats.items():
                if name not in NOT_COUNTS:
                    total[name] = total.get(name, 0) + int(value)
        return total

    def last_update(self) -> float:
        """When a counting handler was last called with an update (``time.monotonic()``'s
        scale; 0 before any)."""
        return max((stats.get("last_update_ns", 0) for stats in self._stats()), default=0) / 1e9


@contextlib.contextmanager
def group_running(
    count: int,
    handler: str,
    redis_url: str,
    workdir: Path,
    tag: str,
    *,
    cache: str = "compact",
    flags: Mapping[str, object] | None = None,
) -> Iterator[Group]:
    data_dir = workdir / f"data-{tag}"
    data_dir.mkdir()
    group = Group(
        count,
        handler,
        redis_url,
        data_dir=data_dir,
        workdir=workdir,
        tag=tag,
        cache=cache,
        flags=flags,
    )
    try:
        group.start()
        yield group
    finally:
        group.stop()


def per_processor(group: Group) -> list[tuple[int, float]]:
    """(events, seconds from its first to its last) of each processor: how evenly the shards
    spread the burst, and how fast each processor's handler thread went."""
    shares = []
    for records in group.updates_by_child():
        times = [update.handled for update in records]
        shares.append((len(times), round(max(times) - min(times), 3) if times else 0.0))
    return shares


def wait_synced(group: Group, pods: int) -> tuple[float, float]:
    """Seconds from the first child's "started" line, and from spawn, until balanced+ready."""
    wait_for(
        group.balanced,
        "the processors' initial sync",
        timeout_for(pods) + 60,
        alive=group.check_alive,
    )
    ready = time.monotonic()
    started = min(child.started for child in group.children)
    return ready - started, ready - group.spawned
