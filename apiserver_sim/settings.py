"""Simulator settings: one frozen dataclass filled from defaults, ``INFORMER_BUS_SIM_*`` env vars
and command-line flags (in rising priority), so tests, benches and the CLI share one vocabulary.

Each field is one flag (``--bookmark-interval``) and one env var
(``INFORMER_BUS_SIM_BOOKMARK_INTERVAL``), declared here alone: the simulator stands in for the
Kubernetes API and shares no code with the product it serves, its settings loader included.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_PREFIX", "SettingsError", "SimulatorSettings"]

ENV_PREFIX = "INFORMER_BUS_SIM_"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """A setting the simulator refuses; the message is one line naming it."""


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
        return ENV_PREFIX + name.upper()

    @staticmethod
    def flag_name(name: str) -> str:
        """``bookmark_interval`` -> ``--bookmark-interval``."""
        return "--" + name.replace("_", "-")

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> SimulatorSettings:
        """Defaults, then env vars, then ``overrides`` whose value is not ``None`` (the flags
        given on the command line); ``SettingsError`` for a value that does not parse or that
        ``__post_init__`` refuses."""
        env = os.environ if environ is None else environ
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"SimulatorSettings has no setting {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for name, kind in _kinds().items():
            raw = env.get(cls.env_name(name))
            if raw:
                values[name] = _parse(kind, raw, cls.env_name(name))
            if overrides.get(name) is not None:
                values[name] = overrides[name]
        try:
            return cls(**values)
        except SettingsError:
            raise
        except (TypeError, ValueError) as exc:
            raise SettingsError(str(exc)) from None

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field, its help showing the default and the env var."""
        for f in dataclasses.fields(cls):
            kind = _kinds()[f.name]
            default = "unlimited" if f.default == math.inf else f.default
            text = f"{f.metadata['help']} (default: {default}; env {cls.env_name(f.name)})"
            if kind is bool:
                parser.add_argument(cls.flag_name(f.name), dest=f.name, default=None,
                                    action=argparse.BooleanOptionalAction, help=text)  # fmt: skip
            else:
                metavar = f.name.rsplit("_", 1)[-1].upper()
                parser.add_argument(cls.flag_name(f.name), dest=f.name, type=kind, default=None,
                                    metavar=metavar, help=text)  # fmt: skip

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None
    ) -> SimulatorSettings:
        """The settings of a parsed command line: flags over env vars over defaults."""
        given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
        return cls.from_env(environ, **given)

    def command_line(self) -> list[str]:
        """The flags that give these settings to a new process (the port always, the other
        fields where they differ from the default)."""
        args: list[str] = []
        defaults = SimulatorSettings()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == getattr(defaults, f.name) and f.name != "port":
                continue
            flag = self.flag_name(f.name)
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + flag[2:])
            else:
                args += [flag, "inf" if value == math.inf else str(value)]
        return args

    def replace(self, **changes: Any) -> SimulatorSettings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@functools.cache
def _kinds() -> dict[str, type[Any]]:
    """Each field's type (``str``, ``int``, ``float`` or ``bool``), the annotations resolved."""
    hints = typing.get_type_hints(SimulatorSettings)
    return {f.name: hints[f.name] for f in dataclasses.fields(SimulatorSettings)}


def _parse(kind: type[Any], raw: str, source: str) -> Any:
    """An env var's text as a field's type; ``SettingsError`` naming the variable."""
    if kind is str:
        return raw
    word = raw.strip().lower()
    if kind is bool:
        if word in _TRUE + _FALSE:
            return word in _TRUE
    else:
        try:
            return kind(word)
        except ValueError:
            pass
    raise SettingsError(f"{source}: invalid {kind.__name__} value {raw!r}")
