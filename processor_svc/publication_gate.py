"""A processor takes no shard before the reflector of every one of its resources has published.

Deploy order is free: a processor may start before the reflectors of its resources, or name a
resource no reflector publishes (``pod`` for ``pods``, or an ``Owns`` of a resource nobody
reflects). Empty shard streams would then look like resources without objects, so the
processor waits, takes no shard, writes no shard key and is not ready until a reflector has
completed a list into every shard of **every** resource it serves (:mod:`common.publication`).
Meanwhile it heartbeats, so ``status`` shows it waiting; one warning names the resource, the
key prefix and Redis (and a published neighbour it may be a typo of); ``/readyz`` gives the
reason (:attr:`PublicationGate.waiting_for`).

Two more checks happen here, once everything is published: a reflector with a larger
``--shard-count`` (its extra shards would never be processed: logged as an error), and a group
that is a durable subscriber's (``subscribe --group``) on some shard, whose entries a processor
would steal (the processor keeps waiting, and says why). What the reflectors recorded of their
resources (:class:`~common.publication.ResourceLayout`) is handed on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

import redis

from common.publication import (
    Publication,
    ResourceLayout,
    hint_published,
    published_alternatives,
    read_publication,
)
from common.redis_config import redacted_url
from common.redis_layout import GroupShardKeys, ShardKeys
from common.redis_replies import as_text
from common.sharding import shard_ranges

__all__ = ["PublicationGate"]

log = logging.getLogger(__name__)

_POLL: Final = 0.5
"""Seconds between two looks for the reflectors' first lists (shorter when the heartbeat
interval is: each look also heartbeats)."""
_REDIS_LOG_INTERVAL: Final = 30.0
"""While Redis is unreachable, one warning per this many seconds."""


class PublicationGate:
    """Waits, on the caller's thread, until every resource is published (module docstring).

    ``resources``: the processor's resources; ``subscriber_checked``: those read through the
    group's consumer group (co-sharded, not replicated) and so checked for a durable
    subscriber's group. ``heartbeat`` is called at every look. ``redis_url`` only names Redis
    in messages (its password masked).
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str,
        resources: Sequence[str],
        subscriber_checked: Sequence[str],
        group: str,
        shard_count: int,
        redis_url: str,
        heartbeat: Callable[[], object],
        poll: float = _POLL,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._resources = tuple(resources)
        self._checked = tuple(subscriber_checked)
        self._group = group
        self._shard_count = shard_count
        self._redis_url = redacted_url(redis_url)
        self._heartbeat = heartbeat
        self._poll = poll
        noun = "reflector" if len(self._resources) == 1 else "reflectors"
        self.waiting_for = f"looking for the {noun} of {self._where(*self._resources)}"
        """Why the processor is not taking shards yet (for ``/readyz``)."""

    def _where(self, *resources: str) -> str:
        names = ", ".join(repr(resource) for resource in resources)
        noun = "resource" if len(resources) == 1 else "resources"
        return f"{noun} {names} under key prefix {self._prefix!r} in {self._redis_url}"

    def wait(self, stop: threading.Event) -> dict[str, ResourceLayout | None] | None:
        """Block until every resource is published and none is a subscriber's group; returns
        each resource's recorded layout, or ``None`` when ``stop`` was set first."""
        warned = False
        failures = 0
        last_failure_log: float | None = None
        while not stop.is_set():
            try:
                publications = {resource: self._read(resource) for resource in self._resources}
                waiting = self._why_waiting(publications)
                if waiting is None:
                    if warned:
                        who = "a reflector has" if len(self._resources) == 1 else "reflectors have"
                        log.info("%s published %s; taking shards over", who,
                                 self._where(*self._resources))  # fmt: skip
                    return {resource: p.layout for resource, p in publications.items()}
                self._heartbeat()  # so that status lists us as waiting
            except redis.RedisError as exc:
                failures += 1
                self.waiting_for = f"cannot read Redis at {self._redis_url}"
                now = time.monotonic()
                if last_failure_log is None or now - last_failure_log >= _REDIS_LOG_INTERVAL:
                    last_failure_log = now
                    log.warning("looking for the reflectors failed, retrying: %s",
                                self._redis_failure(exc))  # fmt: skip
                stop.wait(self._poll)
                continue
            except ValueError as exc:  # an unusable recorded layout
                self.waiting_for = f"{self._where(*self._resources)}: {exc}"
                waiting = (self.waiting_for, True)
            if failures:
                log.info("Redis reachable again after %d failed calls", failures)
                failures, last_failure_log = 0, None
            reason, is_mistake = waiting
            self.waiting_for = reason
            if not warned:
                warned = True
                if is_mistake:
                    log.error("%s", reason)
                else:
                    log.warning("%s; not ready until a reflector completes a list into every "
                                "shard of every resource%s", reason,
                                self._did_you_mean(reason))  # fmt: skip
            stop.wait(self._poll)
        return None

    def _read(self, resource: str) -> Publication:
        return read_publication(
            self._client, prefix=self._prefix, resource=resource, shard_count=self._shard_count
        )

    def _why_waiting(self, publications: dict[str, Publication]) -> tuple[str, bool] | None:
        """``(reason, is_a_mistake)`` when something is missing, ``None`` when all is there."""
        for resource, publication in publications.items():
            if not publication.complete:
                return self._waiting_reason(resource, publication), False
        for resource, publication in publications.items():
            self._check_shard_count(resource, publication)
        for resource in self._checked:
            shards = self._durable_subscriber_shards(resource)
            if shards:
                return self._subscriber_reason(resource, shards), True
        return None

    def _check_shard_count(self, resource: str, publication: Publication) -> None:
        """A reflector with a larger ``--shard-count`` publishes shards no processor of ours
        reads: those objects would silently never reach a handler."""
        layout = publication.layout
        if publication.listed_beyond or (
            layout is not None and layout.shard_count != self._shard_count
        ):
            log.error(
                "a reflector has listed more than %d shards of %s: shards from %d on will never "
                "be processed; give every processor the reflector's --shard-count",
                self._shard_count,
                self._where(resource),
                self._shard_count,
            )

    def _waiting_reason(self, resource: str, publication: Publication) -> str:
        where = self._where(resource)
        if not publication.listed_shards:
            if publication.leader:
                return f"waiting for the first list of {where}: a reflector leads it"
            return f"no reflector has published {where}"
        missing = publication.unlisted_shards
        return (
            f"waiting for a reflector to list every shard of {where}: shards "
            f"{shard_ranges(missing)} of {publication.shard_count} have no completed list (is the "
            f"reflector's --shard-count {publication.shard_count}, like this processor's?)"
        )

    def _durable_subscriber_shards(self, resource: str) -> list[int]:
        """The shards where our group is someone else's consumer group: a durable subscriber's
        (``subscribe --group``), whose entries a processor taking the shard over would steal.
        A processor group's consumer group exists on a shard only after one of its members
        held the shard's lease, whose epoch counter never goes away; a group on the stream
        without that counter (or with a subscriber's initial-list marker) is not ours. One
        pipelined round trip per resource, once, before the first takeover."""
        pipe = self._client.pipeline(transaction=False)
        shards = [
            GroupShardKeys(ShardKeys(self._prefix, resource, shard), self._group)
            for shard in range(self._shard_count)
        ]
        for keys in shards:
            pipe.xinfo_groups(keys.stream)
            # GET rather than EXISTS: both are strings, and GET is in the processor's ACL.
            pipe.get(keys.lease_epoch)
            pipe.get(keys.initial_list)
        replies = pipe.execute(raise_on_error=False)
        found = []
        for keys, groups, ours, marker in zip(
            shards, replies[0::3], replies[1::3], replies[2::3], strict=True
        ):
            for reply in (groups, ours, marker):
                if isinstance(reply, Exception) and not isinstance(reply, redis.ResponseError):
                    raise reply
            names = () if isinstance(groups, Exception) else (as_text(g["name"]) for g in groups)
            if self._group in names and (marker is not None or ours is None):
                found.append(keys.shard)
        return found

    def _subscriber_reason(self, resource: str, shards: Sequence[int]) -> str:
        return (
            f"group {self._group!r} of {self._where(resource)} is a durable subscriber's "
            f"(subscribe --group {self._group}) on shards {shard_ranges(shards)}: not taking them "
            "over, which would steal its entries; give this processor another --group (or "
            f"remove the subscriber's group: informer-bus groups delete {resource} "
            f"{self._group})"
        )

    def _did_you_mean(self, reason: str) -> str:
        """A published resource the missing one is likely a slip of (``widgets`` for
        ``widgets.example.com``, ``pod`` for ``pods``): the rule the reflector's hint follows,
        on what the reflectors published (``common.publication.published_alternatives``)."""
        found: list[str] = []
        for resource in self._resources:
            if repr(resource) in reason:
                found += published_alternatives(
                    self._client, prefix=self._prefix, resource=resource
                )
        return hint_published(found)

    def _redis_failure(self, exc: redis.RedisError) -> str:
        """``Type: message [Redis URL]`` on one line, password masked, for a retry's log."""
        message = " ".join(str(exc).split())
        return f"{type(exc).__name__}: {message} [Redis {self._redis_url}]"
