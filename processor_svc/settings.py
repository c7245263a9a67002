"""The processor's settings: every knob, from flags or ``INFORMER_BUS_*`` env vars.

Leases use client-go's leader-election defaults (15 s lease, 10 s renew deadline, 2 s retry):
a crashed processor's shards move after at most one lease duration; a processor that stops
gracefully hands them over at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Final

from common.redis_layout import GROUP_NAME_SYNTAX, PROCESSOR_GROUP, check_group_name
from common.resource_ids import check_resource_id
from common.settings import (
    KubeConnection,
    LeaseTiming,
    MembershipTiming,
    ServiceSettings,
    SettingsError,
    grouped,
    hostname_identity,
    require_positive,
)
from common.wire import DEFAULT_MAX_BYTES
from processor_svc.async_dispatch import DEFAULT_MAX_CONCURRENT
from processor_svc.view import GroupView

__all__ = ["CACHE_KINDS", "COMPACT", "PLAIN", "ProcessorSettings"]

COMPACT: Final = "compact"
"""Cached objects kept as bytes, decoded on every read (:mod:`common.compact_store`)."""
PLAIN: Final = "plain"
"""Cached objects kept as the decoded dicts handlers share (:class:`common.store.Indexer`)."""
CACHE_KINDS: Final = (COMPACT, PLAIN)


DEFAULT_READ_LINGER_MS: Final = 2
"""Two milliseconds: at a steady 1,000 events/s a wake then reads about three entries instead of
one, well inside a 10 ms p99 (docs/performance.md, the steady rows)."""

_MAX_READ_LINGER_MS: Final = 1000


@dataclass(frozen=True)
class ProcessorSettings(ServiceSettings):
    """Everything one processor process needs."""

    resource: tuple[str, ...] = field(
        default=(),
        metadata={"help": "resource id to process, as the reflector names it (pods, "
                  "deployments.apps, widgets.example.com@shop); repeat it for several: they "
                  "are co-sharded (this processor owns shard N of every one of them together, "
                  "so a primary and what it owns are in one process when the reflector shards "
                  "them alike, e.g. configmaps?shardKey=owner); the first is the primary. A "
                  "controller may declare its resources instead", "metavar": "ID"},
    )  # fmt: skip
    replicate: tuple[str, ...] = field(
        default=(),
        metadata={"help": "resource id every member of the group reads whole (every shard, "
                  "no leases): a small lookup set such as namespaces, nodes or a ConfigMap of "
                  "settings", "metavar": "ID"},
    )  # fmt: skip
    group: str = field(
        default=PROCESSOR_GROUP,
        metadata={
            "help": "consumer group: one application on the watch, with its own members, "
            "shards, caches, handlers and position; processors of one group share its shards, "
            f"each group sees every delta ({GROUP_NAME_SYNTAX})",
            "metavar": "NAME",
        },
    )
    handler: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "handler [RESOURCE=]MODULE:ATTR[@RESYNC] (an object with on_add/on_update/"
            "on_delete, or a factory taking a HandlerContext; RESOURCE= gives it that "
            "resource's events instead of the primary's; @30s adds a resync period); MODULE "
            "is found as python -m finds one: in the current directory first, then on "
            "PYTHONPATH and among installed packages",
            "metavar": "REF",
        },
    )
    member_id: str = field(
        default_factory=functools.partial(hostname_identity, "processor"),
        metadata={"help": "this processor's name (unique per process; a suffix is added)"},
    )
    membership: MembershipTiming = field(
        default_factory=MembershipTiming, metadata=grouped("membership")
    )
    lease: LeaseTiming = field(
        default_factory=LeaseTiming,
        metadata=grouped(
            "shard leases (each shard is processed by the one member holding its lease)",
            helps={
                "lease_duration": "shard lease, seconds",
                "renew_deadline": "stop applying a shard after failing to renew this long",
                "retry_period": "ownership tick, seconds",
            },
        ),
    )
    namespace: str = field(
        default="",
        metadata={
            "help": "view (of every resource served): keep only objects of this namespace "
            "(the group's caches, listers and handlers see nothing else)",
            "metavar": "NS",
        },
    )
    label_selector: str = field(
        default="",
        metadata={
            "help": "view: keep only objects whose labels match, Kubernetes syntax "
            "(app=web,tier in (a,b),!canary); an object that stops matching reaches the "
            "handlers as a deletion of its last matching state",
            "metavar": "SELECTOR",
        },
    )
    field_selector: str = field(
        default="",
        metadata={
            "help": "view: keep only objects whose fields match, Kubernetes syntax and fields "
            "(metadata.name, metadata.namespace, and e.g. spec.nodeName, status.phase for pods)",
            "metavar": "SELECTOR",
        },
    )
    project: str = field(
        default="full",
        metadata={
            "help": "what the caches keep of each object: full; metadata (apiVersion, kind and "
            "metadata without managedFields); or comma-separated paths such as "
            "spec.nodeName,status.phase (name, namespace, uid, resourceVersion always kept)",
            "metavar": "WHAT",
        },
    )
    buffer_size: int = field(
        default=1000, metadata={"help": "per-handler buffer; full buffers pause stream reads"}
    )
    max_concurrent_reconciles: int = field(
        default=DEFAULT_MAX_CONCURRENT,
        metadata={
            "help": "async handlers and controllers (async def on_update, async def "
            "reconcile): coroutines of one handler in flight at once, on the processor's event "
            "loop (never two of one key; controller-runtime's MaxConcurrentReconciles); sync "
            "handlers are called one at a time, sync controllers use their workers",
            "metavar": "N",
        },
    )
    read_count: int = field(default=500, metadata={"help": "entries per stream read"})
    block_ms: int = field(
        default=5000,
        metadata={
            "help": "longest blocking wait for a shard's new entries, milliseconds (a stop "
            "interrupts it; each expiry costs an idle shard a few Redis calls)"
        },
    )
    read_linger_ms: int = field(
        default=DEFAULT_READ_LINGER_MS,
        metadata={
            "help": "after an idle wait ends, wait this many milliseconds more before reading, "
            "so a steady trickle of events is read in batches (0: read at once; adds at most "
            "this much latency)"
        },
    )
    shutdown_grace: float = field(
        default=10.0, metadata={"help": "seconds to drain handlers on SIGTERM before giving up"}
    )
    cache: str = field(
        default=COMPACT,
        metadata={
            "help": "how the caches keep objects: compact, as the stream entries they came in "
            "(~1.4x their JSON in RSS; every read decodes a private copy, one orjson.loads, "
            "and an update decodes the object it replaces for on_update's old) or plain, as "
            "decoded dicts (~4.8x their JSON; a read is a dict lookup returning the shared, "
            "read-only dict): plain for small caches read whole in hot paths "
            "(docs/handlers.md)",
            "metavar": "compact|plain",
        },
    )
    compact_cache: bool | None = field(
        default=None,
        metadata={
            "help": "deprecated: --compact-cache is --cache compact, --no-compact-cache is "
            "--cache plain (given, it decides over --cache's default; against --cache, an error)"
        },
    )
    max_entry_bytes: int = field(
        default=DEFAULT_MAX_BYTES, metadata={"help": "stream entries larger than this are dead"}
    )
    http_port: int = field(
        default=8081, metadata={"help": "metrics/health port (/metrics, /healthz, /readyz)"}
    )
    kube: KubeConnection = field(
        default_factory=KubeConnection,
        metadata=grouped(
            "Kubernetes API, for controllers that write to it (an operator; processors "
            "themselves never call it)"
        ),
    )

    def __post_init__(self) -> None:
        for name in ("resource", "replicate", "handler"):
            value = getattr(self, name)
            if isinstance(value, str):  # settings_of(..., resource="pods"): one value
                object.__setattr__(self, name, (value,))
        super().__post_init__()
        require_positive(
            self,
            "buffer_size", "max_concurrent_reconciles", "read_count", "block_ms", "shutdown_grace",
            "max_entry_bytes",
        )  # fmt: skip
        if not 0 <= self.read_linger_ms <= _MAX_READ_LINGER_MS:
            raise SettingsError(
                f"read_linger_ms must be between 0 and {_MAX_READ_LINGER_MS}, "
                f"got {self.read_linger_ms}"
            )
        self._resolve_cache()
        try:
            for resource in (*self.resource, *self.replicate):
                check_resource_id(resource)  # the rule the reflector names its keys by
                self.view(resource)  # the selectors' and the projection's own rules
            check_group_name(self.group)  # the rule group keys are named by
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        named = [*self.resource, *self.replicate]
        twice = sorted({resource for resource in named if named.count(resource) > 1})
        if twice:
            raise SettingsError(
                f"resource {', '.join(twice)} is given more than once (a resource is either "
                "co-sharded, --resource, or replicated, --replicate, once)"
            )

    @property
    def compact(self) -> bool:
        """Whether the caches keep bytes (``--cache compact``, the default)."""
        return self.cache == COMPACT

    def _resolve_cache(self) -> None:
        """``--cache``, with the deprecated ``--[no-]compact-cache`` translated into it: an
        operator's old flag or ``INFORMER_BUS_COMPACT_CACHE`` keeps meaning what it meant."""
        if self.cache not in CACHE_KINDS:
            raise SettingsError(
                f"cache must be one of {', '.join(CACHE_KINDS)}, got {self.cache!r}"
            )
        if self.compact_cache is None:
            return
        implied = COMPACT if self.compact_cache else PLAIN
        if self.cache not in (COMPACT, implied):
            raise SettingsError(
                f"--cache {self.cache} contradicts the deprecated --compact-cache (--cache "
                "alone says it)"
            )
        object.__setattr__(self, "cache", implied)

    def view(self, resource: str) -> GroupView:
        """The group's view of ``resource``, from the view flags, which apply to every resource
        the processor serves (``ValueError`` if they are invalid for it)."""
        return GroupView(
            resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            project=self.project,
        )
