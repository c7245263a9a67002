"""Service settings: one frozen dataclass per service, filled from defaults, then
``INFORMER_BUS_*`` environment variables, then command-line flags (in rising priority).

Flags and env var names are derived from the fields (``redis_url`` is ``--redis-url`` and
``INFORMER_BUS_REDIS_URL``), so the CLI, the environment, the Python API and ``--help`` never
disagree; each field documents itself (``metadata={"help": ...}``). Types: ``bool``, ``int``,
``float``, ``str``, their ``X | None``, and ``tuple[str, ...]`` (repeatable; comma-separated).

The Redis URL has one rule for every command: ``--redis-url``, else the command's variable, else
``REDIS_URL``, else the default (a field opts in with ``metadata={"fallback_env": NAME}``).
Settings that belong together are small dataclasses held as one field (:func:`grouped`:
:class:`RedisConnection`, :class:`LeaseTiming`, :class:`MembershipTiming`, :class:`Durability`),
each checking its own rules once; their flags stay flat under the group's ``--help`` heading.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import socket
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Final, TypeVar

from common.redis_layout.key_names import DEFAULT_PREFIX

__all__ = [
    "ENV_PREFIX",
    "JITTER_FACTOR",
    "REDIS_URL_ENV",
    "BusSettings",
    "Durability",
    "KubeConnection",
    "LeaseTiming",
    "MembershipTiming",
    "RedisConnection",
    "ServiceSettings",
    "SettingsError",
    "add_flags",
    "check_key_prefix",
    "env_name",
    "flag_name",
    "grouped",
    "hostname_identity",
    "load_settings",
    "parse_sentinel_addresses",
    "require_positive",
    "same_as",
    "settings_from_args",
    "settings_of",
]

S = TypeVar("S")

ENV_PREFIX: Final = "INFORMER_BUS_"
"""Where every service and tool reads its environment: ``--redis-url`` is
``INFORMER_BUS_REDIS_URL`` for all of them (the simulator and the demo add a word of their
own, ``INFORMER_BUS_SIM_``, ``INFORMER_BUS_DEMO_``)."""


def hostname_identity(role: str) -> str:
    """``<hostname>-<role>``: a default name for a replica that says where it runs."""
    return f"{socket.gethostname()}-{role}"


class SettingsError(ValueError):
    """A setting with an unusable value; the message is one line meant for a human."""


def require_positive(settings: object, *names: str) -> None:
    """Raise :class:`SettingsError` for the first of ``names`` whose value is not above 0."""
    for name in names:
        value = getattr(settings, name)
        if not value > 0:
            raise SettingsError(f"{name} must be > 0, got {value:g}")


REDIS_URL_ENV: Final = "REDIS_URL"
"""The Redis URL's last resort before the default, for every command (module docstring)."""

JITTER_FACTOR: Final = 1.2
"""client-go's JitterFactor: a candidate waits up to ``retry_period * (1 + 1.2)`` between tries,
which is why ``retry_period * 1.2`` must stay below the renew deadline (:class:`LeaseTiming`)."""


@dataclasses.dataclass(frozen=True)
class RedisConnection:
    """Where Redis is and how to log in: the same ``--redis-*`` flags for every service and tool.

    Only the values are checked here; :func:`common.redis_config.connection_kwargs` checks how
    they combine (TLS files need ``rediss://``, one password) when a client is built.
    """

    url: str = dataclasses.field(
        default="redis://127.0.0.1:6379/0",
        metadata={
            "help": "Redis holding the shard streams (redis:// or rediss://)",
            "metavar": "URL",
            "fallback_env": REDIS_URL_ENV,
        },
    )
    username: str | None = dataclasses.field(
        default=None, metadata={"help": "Redis ACL user to log in as", "metavar": "NAME"}
    )
    password_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "file holding the Redis password (or set INFORMER_BUS_REDIS_PASSWORD;"
                  " never put a password on the command line, where ps shows it)",
                  "metavar": "PATH"},
    )  # fmt: skip
    tls_ca_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "CA certificates (PEM) that verify the Redis server with rediss:// "
                  "(default: the system's)", "metavar": "PATH"},
    )  # fmt: skip
    tls_cert_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "client certificate (PEM) for a Redis that requires one (rediss://)",
                  "metavar": "PATH"},
    )  # fmt: skip
    tls_key_file: str | None = dataclasses.field(
        default=None,
        metadata={"help": "private key (PEM) of --redis-tls-cert-file", "metavar": "PATH"},
    )
    cluster: bool = dataclasses.field(
        default=False,
        metadata={"help": "Redis is a Redis Cluster: --redis-url names any one of its nodes, "
                  "the others are discovered (shards spread over the primaries)"},
    )  # fmt: skip
    sentinel: str | None = dataclasses.field(
        default=None,
        metadata={"help": "Redis Sentinel addresses: clients ask them for the primary of "
                  "--redis-sentinel-master and follow a failover without a restart; "
                  "--redis-url then gives only the scheme (rediss:// for TLS to the primary, "
                  "replicas and sentinels alike) and the db number, its host is ignored",
                  "metavar": "HOST:PORT[,HOST:PORT...]"},
    )  # fmt: skip
    sentinel_master: str = dataclasses.field(
        default="mymaster",
        metadata={"help": "the master name the sentinels monitor (with --redis-sentinel)",
                  "metavar": "NAME"},
    )  # fmt: skip
    sentinel_auth: bool = dataclasses.field(
        default=True,
        metadata={"help": "log in to the sentinels with the same Redis user and password as "
                  "the data nodes (--no-redis-sentinel-auth for sentinels without a password)"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.sentinel is None:
            return
        parse_sentinel_addresses(self.sentinel)
        if self.cluster:
            raise SettingsError("choose one of --redis-sentinel and --redis-cluster")
        if not self.sentinel_master or any(c.isspace() for c in self.sentinel_master):
            raise SettingsError(f"invalid --redis-sentinel-master {self.sentinel_master!r}")
        if self.url.startswith("unix://"):
            raise SettingsError("--redis-sentinel needs a redis:// or rediss:// --redis-url")

    def sentinel_addresses(self) -> tuple[tuple[str, int], ...]:
        """The ``(host, port)`` of every sentinel; empty without ``--redis-sentinel``."""
        return () if self.sentinel is None else parse_sentinel_addresses(self.sentinel)


def parse_sentinel_addresses(text: str) -> tuple[tuple[str, int], ...]:
    """``"h1:26379,[::1]:26380"`` -> ``(("h1", 26379), ("::1", 26380))``; raises
    :class:`SettingsError` naming the first address that is not ``HOST:PORT`` (port 1-65535)."""
    addresses = []
    for item in (part.strip() for part in text.split(",")):
        host, colon, port = item.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise SettingsError(
                f"--redis-sentinel: {item!r} is not HOST:PORT with a port within 1..65535"
            )
        addresses.append((host, int(port)))
    if len(set(addresses)) != len(addresses):
        raise SettingsError(f"--redis-sentinel names an address twice: {text}")
    return tuple(addresses)


@dataclasses.dataclass(frozen=True)
class KubeConnection:
    """Where the Kubernetes API is: the same flags for the reflector, which lists and watches,
    and for processors whose controllers write (an operator). At most one source; none means
    ``$KUBECONFIG`` or ``~/.kube/config``."""

    kube_url: str | None = dataclasses.field(
        default=None,
        metadata={"help": "Kubernetes API URL without auth (a simulator or kubectl proxy)"},
    )
    kubeconfig: str | None = dataclasses.field(
        default=None, metadata={"help": "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"}
    )
    context: str | None = dataclasses.field(
        default=None, metadata={"help": "kubeconfig context to use"}
    )
    in_cluster: bool = dataclasses.field(
        default=False, metadata={"help": "use the pod's service account (in-cluster config)"}
    )

    def __post_init__(self) -> None:
        sources = sum((self.kube_url is not None, self.in_cluster, self.kubeconfig is not None))
        if sources > 1:
            raise SettingsError("choose one of --kube-url, --in-cluster, --kubeconfig")


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    """client-go's leader-election timing, for every lease informer-bus holds.

    A holder renews every ``retry_period``, gives up after failing to renew for
    ``renew_deadline``, and the lease lapses ``lease_duration`` after its last renewal. The rule
    ``0 < retry_period * 1.2 < renew_deadline < lease_duration`` is client-go's: a jittered
    retry still fits before the deadline, and a holder that gives up at its deadline stops
    before anyone else can take the lease. It is checked here and nowhere else.
    """

    lease_duration: float = dataclasses.field(
        default=15.0, metadata={"help": "a lease not renewed this long lapses, seconds"}
    )
    renew_deadline: float = dataclasses.field(
        default=10.0, metadata={"help": "give a lease up after failing to renew it this long"}
    )
    retry_period: float = dataclasses.field(
        default=2.0, metadata={"help": "how often holders renew and candidates retry, seconds"}
    )

    def __post_init__(self) -> None:
        require_positive(self, "lease_duration", "renew_deadline", "retry_period")
        if not self.renew_deadline < self.lease_duration:
            raise SettingsError(
                "renew_deadline must be shorter than lease_duration, got "
                f"{self.renew_deadline:g} and {self.lease_duration:g}"
            )
        if not self.retry_period * JITTER_FACTOR < self.renew_deadline:
            raise SettingsError(
                "retry_period must be shorter than renew_deadline / 1.2 (a jittered retry must "
                f"fit before the deadline), got {self.retry_period:g} and {self.renew_deadline:g}"
            )

    @classmethod
    def scaled(cls, lease_duration: float) -> LeaseTiming:
        """``lease_duration`` with client-go's proportions (15 s lease, 10 s deadline, 2 s
        retry), for a shorter or longer lease that keeps the same safety margins."""
        return cls(lease_duration, lease_duration * 2 / 3, lease_duration * 2 / 15)

    def flags(self) -> list[str]:
        """These timings as the command-line flags of a service (for a supervisor's children)."""
        return [
            "--lease-duration", f"{self.lease_duration:g}",
            "--renew-deadline", f"{self.renew_deadline:g}",
            "--retry-period", f"{self.retry_period:g}",
        ]  # fmt: skip


@dataclasses.dataclass(frozen=True)
class MembershipTiming:
    """How processors tell each other they are alive: a heartbeat every ``heartbeat_interval``;
    a member whose last heartbeat is ``member_ttl`` old is gone. ``status`` needs the same TTL
    to turn heartbeat deadlines into ages, so it is one setting for both."""

    heartbeat_interval: float = dataclasses.field(
        default=1.0, metadata={"help": "membership heartbeat, s"}
    )
    member_ttl: float = dataclasses.field(
        default=5.0, metadata={"help": "a member missing heartbeats this long is gone, s"}
    )

    def __post_init__(self) -> None:
        require_positive(self, "heartbeat_interval", "member_ttl")
        if not self.heartbeat_interval < self.member_ttl:
            raise SettingsError(
                "heartbeat_interval must be shorter than member_ttl, got "
                f"{self.heartbeat_interval:g} and {self.member_ttl:g}"
            )


@dataclasses.dataclass(frozen=True)
class Durability:
    """How many replicas must hold a write before a service acts on it (Redis ``WAIT``).

    Redis replicates asynchronously: a primary that fails right after acknowledging a write may
    take it with it, and the replica promoted in its place never saw it. With ``replicas`` >= 1
    the writes that matter -- each publish round trip of the reflector, its checkpoint and fence
    writes, a processor's fenced acknowledgements, every lease acquisition and release -- are
    followed by ``WAIT replicas timeout_ms``; a write fewer replicas confirmed counts as not
    done and is retried (docs/reliability.md, "Durability you can choose"). 0 waits for nothing
    and costs nothing (no extra command).
    """

    replicas: int = dataclasses.field(
        default=0,
        metadata={"help": "replicas that must confirm each publish, acknowledgement and lease "
                  "change before it counts (Redis WAIT); 0: none, no extra round trip",
                  "metavar": "N"},
    )  # fmt: skip
    timeout_ms: int = dataclasses.field(
        default=1000,
        metadata={"help": "how long one WAIT may block for the replicas, ms (a lease's WAIT is "
                  "also kept under half its client's socket timeout)", "metavar": "MS"},
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.replicas < 0:
            raise SettingsError(f"redis_wait_replicas must be >= 0, got {self.replicas}")
        if self.timeout_ms < 1:
            # WAIT's 0 means "block forever": a lost replica would stall every write.
            raise SettingsError(f"redis_wait_timeout_ms must be >= 1, got {self.timeout_ms}")


def grouped(
    title: str, *, flag_prefix: str = "", helps: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The metadata of a settings field holding a group (:class:`RedisConnection`, ...):
    ``field(default_factory=RedisConnection, metadata=grouped("Redis", flag_prefix="redis_"))``.

    The group's fields become flags and env vars of their own, named ``flag_prefix`` + field
    name (``redis_`` + ``url`` is ``--redis-url``, ``INFORMER_BUS_REDIS_URL``), listed under
    ``title`` in ``--help``; ``helps`` rewords a field's help for this service (a reflector's
    lease is a leader lease).
    """
    return {"group_title": title, "flag_prefix": flag_prefix, "help_overrides": helps or {}}


def same_as(owner: type[Any], name: str, help_text: str = "") -> Any:
    """A settings field with the default, help and metavar of ``owner``'s field ``name`` (and
    so the same flag and env var), for a tool that must be pointed at Redis exactly like the
    services it reads (``status``, ``subscribe``). ``help_text`` rewords the help."""
    original = next(f for f in dataclasses.fields(owner) if f.name == name)
    metadata = dict(original.metadata)
    if help_text:
        metadata["help"] = help_text
    return dataclasses.field(default=original.default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class BusSettings:
    """Where the bus is (Redis connection, key prefix) for every service and tool, with the
    same flags everywhere; subclasses add fields and call ``super().__post_init__()``."""

    redis: RedisConnection = dataclasses.field(
        default_factory=RedisConnection, metadata=grouped("Redis", flag_prefix="redis_")
    )
    prefix: str = dataclasses.field(
        default=DEFAULT_PREFIX, metadata={"help": "prefix of every Redis key"}
    )

    def __post_init__(self) -> None:
        check_key_prefix(self.prefix)


@dataclasses.dataclass(frozen=True)
class ServiceSettings(BusSettings):
    """What every service shares (the bus, the shard count, probes, logs); services subclass
    it and call ``super().__post_init__()``."""

    shard_count: int = dataclasses.field(
        default=16,
        metadata={"help": "shards per resource: fixed, like partitions, and the same for the "
                  "reflector and every processor", "metavar": "N"},
    )  # fmt: skip
    http_host: str = dataclasses.field(
        default="127.0.0.1",
        metadata={"help": "metrics/health bind address: loopback unless asked; 0.0.0.0 (or ::) "
                  "for probes and a Prometheus on other hosts, as in a container"},
    )  # fmt: skip
    http_port: int = dataclasses.field(
        default=8080, metadata={"help": "metrics/health port (/metrics, /healthz, /readyz)"}
    )
    log_level: str = dataclasses.field(
        default="info", metadata={"help": "debug, info, warning, error"}
    )
    log_json: bool = dataclasses.field(default=False, metadata={"help": "log JSON lines"})
    durability: Durability = dataclasses.field(
        default_factory=Durability,
        metadata=grouped("Redis durability", flag_prefix="redis_wait_"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shard_count < 1:
            raise SettingsError(f"shard_count must be >= 1, got {self.shard_count}")
        if not 0 <= self.http_port <= 65535:
            raise SettingsError(f"http_port must be within 0..65535, got {self.http_port}")


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


@dataclasses.dataclass(frozen=True, slots=True)
class _Setting:
    """One flag / env var: a field of the settings class or of one of its groups."""

    name: str
    """The flag's field name (``redis_url``): unique across the class and its groups."""
    field: dataclasses.Field[Any]
    owner: type[Any]
    """The dataclass declaring :attr:`field` (the settings class, or a group's class)."""
    group: str | None
    """The settings field holding the group, ``None`` for a field of the class itself."""
    help: str


def _settings(cls: type[Any]) -> Iterator[_Setting]:
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            prefix = str(field.metadata.get("flag_prefix", ""))
            overrides: Mapping[str, str] = field.metadata.get("help_overrides", {})
            for inner in dataclasses.fields(kind):
                text = overrides.get(inner.name, str(inner.metadata.get("help", "")))
                yield _Setting(prefix + inner.name, inner, kind, field.name, text)
        else:
            yield _Setting(field.name, field, cls, None, str(field.metadata.get("help", "")))


def _groups(cls: type[Any]) -> dict[str, tuple[type[Any], str]]:
    """Group field name -> (its class, its ``--help`` title)."""
    hints = typing.get_type_hints(cls)
    return {
        field.name: (hints[field.name], str(field.metadata.get("group_title", field.name)))
        for field in dataclasses.fields(cls)
        if isinstance(hints[field.name], type) and dataclasses.is_dataclass(hints[field.name])
    }


def _field_kind(setting: _Setting) -> tuple[type[Any], bool]:
    """The scalar type of a setting and whether it is a repeatable tuple."""
    hint = typing.get_type_hints(setting.owner)[setting.field.name]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return str, True
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return args[0], False
    if isinstance(hint, type):
        return hint, False
    raise TypeError(f"unsupported settings field type {hint!r} for {setting.name}")


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

    ``overrides`` are named like the flags (``redis_url=``, ``lease_duration=``); a whole group
    may be given too (``redis=RedisConnection(...)``), replacing its flags. Validation lives in
    the dataclasses' ``__post_init__``, which should raise :class:`SettingsError`; a
    ``TypeError``/``ValueError`` from construction is turned into one.
    """
    env = os.environ if environ is None else environ
    groups = _groups(cls)
    values: dict[str, Any] = {}
    grouped: dict[str, dict[str, Any]] = {name: {} for name in groups}
    known = set(groups)
    for setting in _settings(cls):
        known.add(setting.name)
        into = values if setting.group is None else grouped[setting.group]
        source = env_name(env_prefix, setting.name)
        raw = env.get(source)
        fallback = setting.field.metadata.get("fallback_env")
        if not raw and fallback:
            source, raw = fallback, env.get(fallback)
        if raw is not None and raw != "":
            kind, repeated = _field_kind(setting)
            if repeated:
                into[setting.field.name] = tuple(p.strip() for p in raw.split(",") if p.strip())
            else:
                into[setting.field.name] = _parse_scalar(kind, raw, source)
        override = overrides.get(setting.name)
        if override is not None:
            into[setting.field.name] = override
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(unknown)}")
    try:
        for name, (group_cls, _) in groups.items():
            given = overrides.get(name)
            values[name] = given if given is not None else group_cls(**grouped[name])
        return cls(**values)
    except SettingsError:
        raise
    except (TypeError, ValueError) as exc:
        raise SettingsError(str(exc)) from None


def settings_of(cls: type[S], **values: Any) -> S:
    """Settings from flag-named ``values`` and defaults only, never the environment: for code
    and tests that build settings themselves (``settings_of(ReflectorSettings, redis_url=...,
    lease_duration=2.0)``) and must not pick up an operator's ``INFORMER_BUS_*`` variables."""
    return load_settings(cls, "", environ={}, **values)


def describe_command(
    parser: argparse.ArgumentParser, description: str, cls: type[Any], env_prefix: str
) -> None:
    """A command's ``--help`` description, with the one sentence about env vars, and flags."""
    parser.description = (
        f"{description} Every flag can also be set with the {env_prefix}<NAME> environment "
        "variable shown in its help; flags win over the environment."
    )
    add_flags(parser, cls, env_prefix)


def add_flags(parser: argparse.ArgumentParser, cls: type[Any], env_prefix: str) -> None:
    """One flag per setting (help: default, env var); a group's under its own heading."""
    headings = {name: parser.add_argument_group(title) for name, (_, title) in _groups(cls).items()}
    for setting in _settings(cls):
        field = setting.field
        target: Any = parser if setting.group is None else headings[setting.group]
        kind, repeated = _field_kind(setting)
        default = field.default if field.default is not dataclasses.MISSING else None
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        if isinstance(default, float) and math.isinf(default):
            shown: object = "unlimited"
        elif repeated:
            shown = ", ".join(default) if default else "none"
        else:
            shown = default
        fallback = field.metadata.get("fallback_env")
        env_text = env_name(env_prefix, setting.name) + (f", else {fallback}" if fallback else "")
        full_help = f"{setting.help} (default: {shown}; env {env_text})"
        metavar = str(field.metadata.get("metavar", setting.name.split("_")[-1].upper()))
        flag = flag_name(setting.name)
        if kind is bool:
            target.add_argument(
                flag,
                dest=setting.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=full_help,
            )
        elif repeated:
            target.add_argument(
                flag,
                dest=setting.name,
                action="append",
                default=None,
                metavar=metavar,
                help=full_help + "; repeatable",
            )
        else:
            target.add_argument(
                flag, dest=setting.name, type=kind, default=None, metavar=metavar, help=full_help
            )


def settings_from_args(cls: type[S], env_prefix: str, args: argparse.Namespace) -> S:
    """The settings for a parsed command line: flags over env vars over defaults."""
    overrides: dict[str, Any] = {}
    for setting in _settings(cls):
        value = getattr(args, setting.name, None)
        if isinstance(value, list):
            value = tuple(value)
        overrides[setting.name] = value
    return load_settings(cls, env_prefix, **overrides)
