"""The reflector's settings: every knob, from flags or ``INFORMER_BUS_*`` env vars.

Defaults are client-go's where client-go has one (page size, watch timeouts, backoff, leader
election), so operators who know Go controllers meet no surprises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from common.settings import (
    KubeConnection,
    LeaseTiming,
    ServiceSettings,
    SettingsError,
    grouped,
    hostname_identity,
    require_positive,
)

__all__ = ["ReflectorSettings"]


@dataclass(frozen=True)
class ReflectorSettings(ServiceSettings):
    """Everything one reflector process needs."""

    resource: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "resource to reflect: PLURAL[.VERSION[.GROUP]][@NAMESPACE][?labelSelector="
            "..&fieldSelector=..&shardKey=..], e.g. pods, deployments.v1.apps, "
            "widgets.v1.example.com@shop, configmaps?shardKey=owner; shardKey is what objects "
            "are sharded by: key (default), namespace, owner (the controlling owner's key, to "
            "share its shard) or label:NAME (objects without the label: their own key)",
            "metavar": "SPEC",
        },
    )
    kube: KubeConnection = field(default_factory=KubeConnection, metadata=grouped("Kubernetes API"))
    page_size: int = field(default=500, metadata={"help": "LIST page size", "metavar": "N"})
    watch_list: bool = field(
        default=False,
        metadata={"help": "try streaming lists (sendInitialEvents) before paginated LIST"},
    )
    watch_timeout_min: int = field(
        default=300, metadata={"help": "shortest server-side watch timeout, seconds"}
    )
    watch_timeout_max: int = field(
        default=600, metadata={"help": "longest server-side watch timeout, seconds"}
    )
    inactivity_timeout: float = field(
        default=90.0,
        metadata={"help": "reconnect a watch that sent no bytes (bookmarks included) this long"},
    )
    request_timeout: float = field(
        default=60.0, metadata={"help": "timeout of one LIST page request, seconds"}
    )
    backoff_initial: float = field(default=0.8, metadata={"help": "first retry delay, seconds"})
    backoff_max: float = field(default=30.0, metadata={"help": "longest retry delay, seconds"})
    backoff_reset: float = field(
        default=120.0, metadata={"help": "forget past failures after this many quiet seconds"}
    )
    batch_max: int = field(
        default=500, metadata={"help": "most deltas published per Redis round trip"}
    )
    checkpoint_interval: float = field(
        default=5.0,
        metadata={"help": "advance every shard's checkpoint at least this often while watching"},
    )
    lease: LeaseTiming = field(
        default_factory=LeaseTiming,
        metadata=grouped(
            "leader election (one replica of each resource leads)",
            helps={
                "lease_duration": "leader lease, seconds",
                "renew_deadline": "give up leadership after failing to renew this long",
                "retry_period": "leader election retry, seconds",
            },
        ),
    )
    identity: str = field(
        default_factory=functools.partial(hostname_identity, "reflector"),
        metadata={"help": "this replica's name in leases"},
    )
    strip_managed_fields: bool = field(
        default=True, metadata={"help": "drop metadata.managedFields before publishing"}
    )
    transform: str | None = field(
        default=None,
        metadata={"help": "extra transform MODULE:FUNCTION applied to every object"},
    )
    allow_secret_data: bool = field(
        default=False,
        metadata={"help": "publish Secret data/stringData instead of redacting it"},
    )
    max_object_bytes: int = field(
        default=1_500_000, metadata={"help": "skip (and count) objects larger than this"}
    )
    retention_min_entries: int = field(
        default=10_000, metadata={"help": "keep at least this many entries per shard stream"}
    )
    retention_max_entries: int = field(
        default=1_000_000,
        metadata={"help": "hard cap per shard stream, even if a consumer group lags"},
    )
    retention_interval: float = field(
        default=30.0, metadata={"help": "seconds between stream trims"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(
            self,
            "page_size", "watch_timeout_min", "inactivity_timeout",
            "request_timeout", "backoff_initial", "batch_max", "checkpoint_interval",
            "max_object_bytes", "retention_max_entries", "retention_interval",
        )  # fmt: skip
        if self.watch_timeout_max < self.watch_timeout_min:
            raise SettingsError("watch_timeout_max must be >= watch_timeout_min")
        if self.backoff_max < self.backoff_initial:
            raise SettingsError("backoff_max must be >= backoff_initial")
        if self.retention_min_entries < 0:
            raise SettingsError("retention_min_entries must be >= 0")
