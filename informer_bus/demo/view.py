"""The demo's live view: :mod:`informer_bus.status` read once a second, each processor's
``/readyz``, event rates from two consecutive reads; redrawn in place on a terminal (plain ANSI
codes), one line per refresh otherwise."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TextIO

import redis

from informer_bus.demo.children import Processor
from informer_bus.demo.settings import MEMBER_TTL
from informer_bus.status.collect import collect_status, status_client
from informer_bus.status.model import GroupStatus, ResourceStatus
from informer_bus.status.render import render_resource, shard_ranges

__all__ = ["Output", "View", "ViewState", "status_line"]

_KEPT_MESSAGES: Final = 12


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
    holders: int = 0
    """Running processors of the demo that hold shard leases. A ``kill -9``ed one's leases,
    and its membership, stay in Redis until they expire: its shards are not held by anyone
    who can apply them, and it is not counted."""
    held: int = 0
    """Shards whose lease a running processor of the demo holds."""
    holders_ready: bool = False
    """Every processor that holds a shard answers ``/readyz`` (its caches are synced)."""
    summaries: tuple[str, ...] = ()
    """One :meth:`Processor.summary` per processor."""

    @property
    def group(self) -> GroupStatus | None:
        """The demo's processors' group (the default one)."""
        return None if self.resource is None else self.resource.group()

    @property
    def synced(self) -> bool:
        """Listed into every shard, every shard held by a running processor, the caches of
        every processor that holds one synced: what "the pipeline is up" means. A processor
        that holds nothing (down, restarting, or one more than there are shards) has no cache
        to wait for, and a killed one's unexpired leases are not an owner."""
        resource, group = self.resource, self.group
        return (
            resource is not None
            and resource.synced
            and group is not None
            and group.synced
            and self.held == len(resource.shards)
            and self.holders_ready
        )


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}/s"


def status_line(state: ViewState) -> str:
    """One line per refresh when the output is not a terminal (and the view's summary)."""
    head = f"[{state.uptime:6.1f} s]"
    if state.resource is None:
        return f"{head} status unavailable: {state.error or 'no data yet'}"
    resource, group = state.resource, state.group
    lag = None if group is None else group.lag
    lag_s = None if group is None else group.max_lag_s
    line = (
        f"{head} events published {_rate(state.published_per_s)}, processed "
        f"{_rate(state.processed_per_s)} | lag {'?' if lag is None else lag} entries "
        f"({'-' if lag_s is None else f'{lag_s:.1f}'} s) | objects "
        f"{sum(s.objects for s in resource.shards)} | owners {state.holders} processors, "
        f"{state.held}/{len(resource.shards)} shards | ready "
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
                member_ttl=MEMBER_TTL,
                redis_url=self._redis_url,
            )
            resource = snapshot.resources[0]
        except redis.RedisError as exc:
            error = " ".join(str(exc).split())
        published = processed = None
        group = None if resource is None else resource.group()
        if resource is not None:
            totals = _Totals(
                now,
                sum(s.entries_added or 0 for s in resource.shards),
                sum(s.entries_read or 0 for s in group.shards) if group is not None else 0,
            )
            if self._previous is not None and now > self._previous.at:
                elapsed = now - self._previous.at
                published = max(0.0, (totals.added - self._previous.added) / elapsed)
                processed = max(0.0, (totals.read - self._previous.read) / elapsed)
            self._previous = totals
        for child in self._processors:
            child.ready = self._is_ready(child)
            if group is not None and child.running:  # a dead one keeps its last shards
                child.shards = tuple(s.shard for s in group.shards if child.holds(s.owner))
        holders = [c for c in self._processors if c.running and c.shards] if group else []
        return ViewState(
            uptime=now - self._started,
            resource=resource,
            error=error,
            published_per_s=published,
            processed_per_s=processed,
            ready=sum(1 for child in self._processors if child.ready),
            processors=sum(1 for child in self._processors if not child.given_up),
            holders=len(holders),
            held=sum(len(child.shards) for child in holders),
            holders_ready=bool(holders) and all(child.ready for child in holders),
        )

    def show(self, state: ViewState) -> None:
        state.summaries = tuple(child.summary() for child in self._processors)
        if not self._live:
            self._out.write(status_line(state) + "\n")
            return
        lines = [*self._header, *self._messages, "", status_line(state), ""]
        for child in self._processors:
            pid = child.pid if child.process is not None else "-"
            shards = shard_ranges(child.shards) if child.shards else "-"
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
