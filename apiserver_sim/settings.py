"""Simulator settings: one frozen dataclass filled from defaults, ``INFORMER_BUS_SIM_*`` env vars
and command-line flags (in rising priority), so tests, benches and the CLI share one vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.settings import SettingsError, env_name, load_settings

__all__ = ["ENV_PREFIX", "SettingsError", "SimulatorSettings"]

ENV_PREFIX = "INFORMER_BUS_SIM_"


@dataclass(frozen=True)
class SimulatorSettings:
    """Everything that shapes one simulated API server.

    Defaults follow a real apiserver where that matters to clients (bookmarks about once a
    minute, a 5 minute etcd history, a 3 s wait for a "too large" resourceVersion); tests
    shrink them.
    """

    host: str = field(default="127.0.0.1", metadata={"help": "address to listen on"})
    port: int = field(default=0, metadata={"help": "TCP port; 0 picks a free port"})
    bookmark_interval: float = field(
        default=60.0, metadata={"help": "seconds between BOOKMARK events on watches that ask"}
    )
    history_max_events: int = field(
        default=100_000,
        metadata={"help": "keep at most this many watch events (older ones are compacted)"},
    )
    history_max_age: float = field(
        default=300.0, metadata={"help": "compact watch events older than this many seconds"}
    )
    watch_list: bool = field(
        default=True,
        metadata={
            "help": "support sendInitialEvents (watch-list); off answers 422 like old servers"
        },
    )
    too_large_wait: float = field(
        default=3.0,
        metadata={"help": "seconds to wait for a future resourceVersion before 'Too large'"},
    )
    watch_default_timeout: float = field(
        default=1800.0, metadata={"help": "watch duration when the client sends no timeoutSeconds"}
    )
    populate: int = field(default=0, metadata={"help": "create this many pods at start"})
    namespaces: int = field(
        default=10, metadata={"help": "spread populated pods over N namespaces"}
    )
    churn: float = field(
        default=0.0, metadata={"help": "pod events per second after start (0: off)"}
    )
    churn_seconds: float = field(
        default=math.inf, metadata={"help": "stop churning after this many seconds"}
    )
    seed: int = field(default=0, metadata={"help": "seed for populate and churn"})
    max_write_bytes: int = field(
        default=1 << 20, metadata={"help": "largest coalesced write to one watch stream"}
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port must be within 0..65535, got {self.port}")
        for name in ("bookmark_interval", "history_max_age", "watch_default_timeout"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("too_large_wait", "churn", "churn_seconds", "populate"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.history_max_events < 1:
            raise SettingsError(f"history_max_events must be >= 1, got {self.history_max_events}")
        if self.namespaces < 1:
            raise SettingsError(f"namespaces must be >= 1, got {self.namespaces}")
        if self.max_write_bytes < 4096:
            raise SettingsError(f"max_write_bytes must be >= 4096, got {self.max_write_bytes}")

    @classmethod
    def env_name(cls, name: str) -> str:
        """``bookmark_interval`` -> ``INFORMER_BUS_SIM_BOOKMARK_INTERVAL``."""
        return env_name(ENV_PREFIX, name)

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> SimulatorSettings:
        """Defaults, then env vars, then ``overrides`` (flags given on the command line)."""
        return load_settings(cls, ENV_PREFIX, environ, **overrides)

    def replace(self, **changes: Any) -> SimulatorSettings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)
