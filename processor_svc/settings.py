"""The processor's settings: every knob, from flags or ``INFORMER_BUS_*`` env vars.

Leases use client-go's leader-election defaults (15 s lease, 10 s renew deadline, 2 s retry):
a crashed processor's shards move after at most one lease duration; a processor that stops
gracefully hands them over at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from common.redis_layout import GROUP_NAME_SYNTAX, PROCESSOR_GROUP, check_group_name
from common.resource_ids import check_resource_id
from common.settings import (
    LeaseTiming,
    MembershipTiming,
    ServiceSettings,
    SettingsError,
    grouped,
    hostname_identity,
    require_positive,
)
from common.wire import DEFAULT_MAX_BYTES
from processor_svc.view import GroupView

__all__ = ["ProcessorSettings"]


@dataclass(frozen=True)
class ProcessorSettings(ServiceSettings):
    """Everything one processor process needs (one resource per process)."""

    resource: str = field(
        default="pods",
        metadata={"help": "resource id to process, as the reflector names it (pods, "
                  "deployments.apps, widgets.example.com@shop)", "metavar": "ID"},
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
            "help": "handler MODULE:ATTR[@RESYNC] (an object with on_add/on_update/on_delete, "
            "or a factory taking a HandlerContext; @30s adds a resync period)",
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
            "help": "view: keep only objects of this namespace (the group's caches, listers "
            "and handlers see nothing else)",
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
    read_count: int = field(default=500, metadata={"help": "entries per stream read"})
    block_ms: int = field(
        default=5000,
        metadata={
            "help": "longest blocking wait for a shard's new entries, milliseconds (a stop "
            "interrupts it; each expiry costs an idle shard a few Redis calls)"
        },
    )
    shutdown_grace: float = field(
        default=10.0, metadata={"help": "seconds to drain handlers on SIGTERM before giving up"}
    )
    compact_cache: bool = field(
        default=False,
        metadata={
            "help": "keep cached objects as the stream entries they came in: ~1.4x their "
            "JSON in RSS instead of ~5x, for one more decode per update and per read; reads "
            "return fresh copies (docs/handlers.md)"
        },
    )
    max_entry_bytes: int = field(
        default=DEFAULT_MAX_BYTES, metadata={"help": "stream entries larger than this are dead"}
    )
    http_port: int = field(
        default=8081, metadata={"help": "metrics/health port (/metrics, /healthz, /readyz)"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(
            self,
            "buffer_size", "read_count", "block_ms", "shutdown_grace", "max_entry_bytes",
        )  # fmt: skip
        try:
            check_resource_id(self.resource)  # the rule the reflector names its keys by
            check_group_name(self.group)  # the rule group keys are named by
            self.view()  # the selectors' and the projection's own rules
        except ValueError as exc:
            raise SettingsError(str(exc)) from None

    def view(self) -> GroupView:
        """The group's view of its resource, from the view flags (``ValueError`` if invalid)."""
        return GroupView(
            self.resource,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            project=self.project,
        )
