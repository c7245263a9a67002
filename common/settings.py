"""Service settings: one frozen dataclass per service, filled from defaults, then
``INFORMER_BUS_*`` environment variables, then command-line flags (in rising priority).

Flags and env var names are derived from the dataclass fields, so the CLI, the environment, the
Python API and ``--help`` can never disagree: ``redis_url`` is ``--redis-url`` and
``INFORMER_BUS_REDIS_URL``. Each field documents itself through ``metadata={"help": ...}``.
Supported field types: ``bool``, ``int``, ``float``, ``str``, their ``X | None`` forms, and
``tuple[str, ...]`` (a repeatable flag; comma-separated in the environment).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "ServiceSettings",
    "SettingsError",
    "add_flags",
    "check_key_prefix",
    "env_name",
    "flag_name",
    "load_settings",
    "settings_from_args",
]

S = TypeVar("S")


class SettingsError(ValueError):
    """A setting with an unusable value; the message is one line meant for a human."""


@dataclasses.dataclass(frozen=True)
class ServiceSettings:
    """What every informer-bus service shares: where Redis is, the key layout, probes, logs.

    Services subclass it (their own fields follow these) and call ``super().__post_init__()``.
    """

    redis_url: str = dataclasses.field(
        default="redis://127.0.0.1:6379/0",
        metadata={
            "help": "Redis holding the shard streams (redis:// or rediss://)",
            "metavar": "URL",
        },
    )
    redis_username: str | None = dataclasses.field(
        default=None, metadata={"help": "Redis ACL user to log in as", "metavar": "NAME"}
    )
    redis_password_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "file holding the Redis password (or set INFORMER_BUS_REDIS_PASSWORD;"
                  " never put a password on the command line, where ps shows it)",
                  "metavar": "PATH"},
    )  # fmt: skip
    redis_tls_ca_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "CA certificates (PEM) that verify the Redis server with rediss:// "
                  "(default: the system's)", "metavar": "PATH"},
    )  # fmt: skip
    redis_tls_cert_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "client certificate (PEM) for a Redis that requires one (rediss://)",
                  "metavar": "PATH"},
    )  # fmt: skip
    redis_tls_key_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "private key (PEM) of --redis-tls-cert-file", "metavar": "PATH"},
    )
    redis_cluster: bool = dataclasses.field(
        default=False,
        metadata={"help": "Redis is a Redis Cluster: --redis-url names any one of its nodes, "
                  "the others are discovered (shards spread over the primaries)"},
    )  # fmt: skip
    prefix: str = dataclasses.field(default="ib", metadata={"help": "prefix of every Redis key"})
    shard_count: int = dataclasses.field(
        default=16,
        metadata={"help": "shards per resource: fixed, like partitions, and the same for the "
                  "reflector and every processor", "metavar": "N"},
    )  # fmt: skip
    http_host: str = dataclasses.field(
        default="0.0.0.0", metadata={"help": "metrics/health bind address"}
    )
    http_port: int = dataclasses.field(
        default=8080, metadata={"help": "metrics/health port (/metrics, /healthz, /readyz)"}
    )
    log_level: str = dataclasses.field(
        default="info", metadata={"help": "debug, info, warning, error"}
    )
    log_json: bool = dataclasses.field(default=False, metadata={"help": "log JSON lines"})

    def __post_init__(self) -> None:
        if self.shard_count < 1:
            raise SettingsError(f"shard_count must be >= 1, got {self.shard_count}")
        if not 0 <= self.http_port <= 65535:
            raise SettingsError(f"http_port must be within 0..65535, got {self.http_port}")
        check_key_prefix(self.prefix)


def check_key_prefix(prefix: str) -> None:
    """Refuse a key prefix that would break the Cluster hash tags or the key layout (braces,
    whitespace) or is empty: every tool that names Redis keys checks it the same way."""
    if not prefix or any(c in prefix for c in "{} \t"):
        raise SettingsError(f"invalid key prefix {prefix!r}")


def env_name(prefix: str, field_name: str) -> str:
    """``("INFORMER_BUS_", "redis_url")`` -> ``INFORMER_BUS_REDIS_URL``."""
    return prefix + field_name.upper()


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _field_kind(cls: type[Any], field: dataclasses.Field[Any]) -> tuple[type[Any], bool]:
    """The scalar type of a field and whether it is a repeatable tuple."""
    hint = typing.get_type_hints(cls)[field.name]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return str, True
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0], False
    if isinstance(hint, type):
        return hint, False
    raise TypeError(f"unsupported settings field type {hint!r} for {field.name}")


def _parse_scalar(kind: type[Any], raw: str, source: str) -> Any:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind is int:
            return int(raw)
        if kind is float:
            return float(raw)
        return raw
    except ValueError:
        raise SettingsError(f"{source}: invalid {kind.__name__} value {raw!r}") from None


def load_settings(
    cls: type[S],
    env_prefix: str,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> S:
    """Defaults, then env vars, then ``overrides`` whose value is not ``None``.

    Validation lives in the dataclass's ``__post_init__``, which should raise
    :class:`SettingsError`; a ``TypeError``/``ValueError`` from construction is turned into one.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        source = env_name(env_prefix, field.name)
        raw = env.get(source)
        if raw is None or raw == "":
            continue
        kind, repeated = _field_kind(cls, field)
        if repeated:
            values[field.name] = tuple(part.strip() for part in raw.split(",") if part.strip())
        else:
            values[field.name] = _parse_scalar(kind, raw, source)
    values.update({name: value for name, value in overrides.items() if value is not None})
    try:
        return cls(**values)
    except SettingsError:
        raise
    except (TypeError, ValueError) as exc:
        raise SettingsError(str(exc)) from None


def add_flags(parser: argparse.ArgumentParser, cls: type[Any], env_prefix: str) -> None:
    """One flag per field, its help showing the default and the env var."""
    for field in dataclasses.fields(cls):
        kind, repeated = _field_kind(cls, field)
        default = field.default if field.default is not dataclasses.MISSING else None
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if isinstance(default, float) and math.isinf(default):
            shown: object = "unlimited"
        elif repeated:
            shown = ", ".join(default) if default else "none"
        else:
            shown = default
        text = str(field.metadata.get("help", ""))
        full_help = f"{text} (default: {shown}; env {env_name(env_prefix, field.name)})"
        if kind is bool:
            parser.add_argument(
                flag_name(field.name),
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=full_help,
            )
        elif repeated:
            parser.add_argument(
                flag_name(field.name),
                dest=field.name,
                action="append",
                default=None,
                metavar=str(field.metadata.get("metavar", field.name.split("_")[-1].upper())),
                help=full_help + "; repeatable",
            )
        else:
            parser.add_argument(
                flag_name(field.name),
                dest=field.name,
                type=kind,
                default=None,
                metavar=str(field.metadata.get("metavar", field.name.split("_")[-1].upper())),
                help=full_help,
            )


def settings_from_args(cls: type[S], env_prefix: str, args: argparse.Namespace) -> S:
    """The settings for a parsed command line: flags over env vars over defaults."""
    overrides: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        value = getattr(args, field.name, None)
        if isinstance(value, list):
            value = tuple(value)
        overrides[field.name] = value
    return load_settings(cls, env_prefix, **overrides)
