"""What the demo runs (``DemoSettings``: its flags) and the names and defaults it shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from common.redis_layout import DEFAULT_PREFIX
from common.settings import REDIS_URL_ENV, LeaseTiming, MembershipTiming, SettingsError
from reflector_svc.resources import ResourceSpec

__all__ = ["ENV_PREFIX", "HANDLER", "MAX_FAILED_STARTS", "MEMBER_TTL", "PROGRAM", "DemoSettings"]

PROGRAM: Final = "informer-bus demo"
ENV_PREFIX: Final = "INFORMER_BUS_DEMO_"
HANDLER: Final = "informer_bus.examples.pod_phase_counter:PodPhaseCounter"
PRIVATE_PREFIX: Final = DEFAULT_PREFIX

MAX_FAILED_STARTS: Final = 3
"""Deaths in a row before its caches synced after which a processor is not restarted."""
MEMBER_TTL: Final = MembershipTiming().member_ttl  # what the processors use (no flag given)


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
        metadata={"help": "Redis 7 to use (default: a private redis-server on a free port)",
                  "metavar": "URL", "fallback_env": REDIS_URL_ENV},
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
