"""Settings come from defaults, then INFORMER_BUS_* env vars, then flags."""

from __future__ import annotations

import argparse
import functools
import re
from dataclasses import dataclass, field

import pytest

from common.resource_ids import ResourceSpec, check_resource_id, likely_meant, resource_id_from
from common.settings import (
    ENV_PREFIX,
    Durability,
    LeaseTiming,
    RedisConnection,
    ServiceSettings,
    SettingsError,
    add_flags,
    grouped,
    load_settings,
    settings_from_args,
    settings_of,
)
from processor_svc.settings import ProcessorSettings
from reflector_svc.settings import ReflectorSettings

PREFIX = "INFORMER_BUS_TEST_"


@dataclass(frozen=True)
class Example:
    redis_url: str = field(default="redis://localhost:6379/0", metadata={"help": "where Redis is"})
    shards: int = field(default=16, metadata={"help": "shard count"})
    lease: float = field(default=15.0, metadata={"help": "lease seconds"})
    verbose: bool = field(default=False, metadata={"help": "chatty"})
    namespace: str | None = field(default=None, metadata={"help": "one namespace"})
    resource: tuple[str, ...] = field(default=(), metadata={"help": "resources"})

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise SettingsError(f"shards must be >= 1, got {self.shards}")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser, Example, PREFIX)
    return parser.parse_args(argv)


def test_defaults_when_nothing_is_set() -> None:
    assert load_settings(Example, PREFIX, environ={}) == Example()


def test_env_vars_override_defaults_with_types() -> None:
    environ = {
        "INFORMER_BUS_TEST_SHARDS": "8",
        "INFORMER_BUS_TEST_LEASE": "2.5",
        "INFORMER_BUS_TEST_VERBOSE": "yes",
        "INFORMER_BUS_TEST_NAMESPACE": "shop",
        "INFORMER_BUS_TEST_RESOURCE": "pods, configmaps",
    }
    settings = load_settings(Example, PREFIX, environ=environ)
    assert settings == Example(
        shards=8, lease=2.5, verbose=True, namespace="shop", resource=("pods", "configmaps")
    )


def test_flags_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFORMER_BUS_TEST_SHARDS", "8")
    monkeypatch.setenv("INFORMER_BUS_TEST_RESOURCE", "secrets")
    args = parse(["--shards", "4", "--resource", "pods", "--resource", "nodes", "--no-verbose"])
    settings = settings_from_args(Example, PREFIX, args)
    assert settings.shards == 4
    assert settings.resource == ("pods", "nodes")
    assert settings.verbose is False


def test_bad_env_value_is_a_one_line_error_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="INFORMER_BUS_TEST_SHARDS: invalid int value 'many'"):
        load_settings(Example, PREFIX, environ={"INFORMER_BUS_TEST_SHARDS": "many"})


def test_validation_errors_surface_as_settings_errors() -> None:
    with pytest.raises(SettingsError, match="shards must be >= 1"):
        load_settings(Example, PREFIX, environ={}, shards=0)


def test_help_names_default_and_env_var(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--help"])
    out = capsys.readouterr().out
    assert "--redis-url" in out and "INFORMER_BUS_TEST_REDIS_URL" in out
    assert "default: 16" in out
    assert "repeatable" in out


def test_service_settings_are_shared_and_validated_once() -> None:
    from common.settings import ServiceSettings
    from processor_svc.settings import ProcessorSettings
    from reflector_svc.settings import ReflectorSettings

    assert issubclass(ReflectorSettings, ServiceSettings)
    assert issubclass(ProcessorSettings, ServiceSettings)
    assert ProcessorSettings().http_port != ReflectorSettings().http_port, "they can share a host"
    # Issue 34: metrics and probes on loopback unless asked (containers ask for 0.0.0.0).
    assert ProcessorSettings().http_host == ReflectorSettings().http_host == "127.0.0.1"
    for cls in (ReflectorSettings, ProcessorSettings):
        with pytest.raises(SettingsError, match="shard_count"):
            cls(shard_count=0)
        with pytest.raises(SettingsError, match="prefix"):
            cls(prefix="a{b")


@pytest.mark.parametrize("text", ["pods", "deployments.apps", "widgets.example.com@shop", "a-1"])
def test_a_resource_id_is_what_a_reflector_names_its_keys(text: str) -> None:
    assert check_resource_id(text) == text == resource_id_from(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("x!!bogus", "resource name 'x!!bogus' is not a lowercase DNS label"),
        ("Pods", "resource name 'Pods' is not a lowercase DNS label"),
        ("pods@", "empty namespace after '@'"),
        ("po ds", "resource name 'po ds' is not a lowercase DNS label"),
        ("{pods}", "resource name '{pods}' is not a lowercase DNS label"),
    ],
)
def test_every_tool_refuses_a_malformed_resource_for_the_same_reason(
    text: str, reason: str
) -> None:
    """The processor (ids), the reflector and the reading tools (specs) share one rule."""
    for check in (check_resource_id, resource_id_from, ResourceSpec.parse):
        with pytest.raises(ValueError, match=re.escape(f"invalid resource {text!r}: {reason}")):
            check(text)
    with pytest.raises(SettingsError, match=re.escape(reason)):
        settings_of(ProcessorSettings, resource=text)


def test_a_spec_is_a_readers_resource_but_no_services_id() -> None:
    assert resource_id_from("deployments.v1.apps") == "deployments.apps"
    assert resource_id_from("pods@shop?labelSelector=app%3Dweb") == "pods@shop"
    with pytest.raises(ValueError, match=r"the id of this spec is 'deployments\.apps'"):
        check_resource_id("deployments.v1.apps")
    with pytest.raises(SettingsError, match="the id of this spec is 'pods@shop'"):
        settings_of(ProcessorSettings, resource="pods@shop?labelSelector=app%3Dweb")


# --- groups: settings that belong together, one rule each ------------------------------------


@dataclass(frozen=True)
class Grouped:
    redis: RedisConnection = field(
        default_factory=RedisConnection, metadata=grouped("Redis", flag_prefix="redis_")
    )
    lease: LeaseTiming = field(
        default_factory=LeaseTiming,
        metadata=grouped("leases", helps={"lease_duration": "how long a test lease lasts"}),
    )
    name: str = field(default="x", metadata={"help": "a plain field beside the groups"})


def test_a_groups_fields_are_flat_flags_and_env_vars_under_their_heading(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser(prog="t")
    add_flags(parser, Grouped, PREFIX)
    monkeypatch.setenv("INFORMER_BUS_TEST_REDIS_CLUSTER", "yes")
    monkeypatch.setenv("INFORMER_BUS_TEST_RENEW_DEADLINE", "5")
    args = parser.parse_args(["--redis-url", "redis://h:1/0", "--lease-duration", "6"])
    settings = settings_from_args(Grouped, PREFIX, args)
    assert settings.redis == RedisConnection(url="redis://h:1/0", cluster=True)
    assert settings.lease == LeaseTiming(lease_duration=6.0, renew_deadline=5.0)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = capsys.readouterr().out
    help_part = text[text.index("Redis:") :]
    assert help_part.index("--redis-url URL") < help_part.index("leases:")
    assert "how long a test lease lasts" in " ".join(text.split())


def test_a_whole_group_can_be_given_and_unknown_names_are_refused() -> None:
    given = RedisConnection(url="redis://g:1/0")
    assert load_settings(Grouped, PREFIX, environ={}, redis=given).redis is given
    with pytest.raises(TypeError, match="no setting lease_duraton"):
        load_settings(Grouped, PREFIX, environ={}, lease_duraton=3.0)


def test_settings_of_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFORMER_BUS_REDIS_URL", "redis://operator:1/0")
    assert settings_of(ProcessorSettings, member_ttl=9.0).redis.url == RedisConnection().url
    assert settings_of(ProcessorSettings, member_ttl=9.0).membership.member_ttl == 9.0


@pytest.mark.parametrize(
    ("timing", "message"),
    [
        ({"lease_duration": 0.0}, "lease_duration must be > 0"),
        ({"renew_deadline": 15.0}, "renew_deadline must be shorter than lease_duration"),
        ({"retry_period": 8.5}, r"retry_period must be shorter than renew_deadline / 1\.2"),
    ],
)
def test_client_gos_lease_rule_is_one_rule_for_every_service(
    timing: dict[str, float], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        LeaseTiming(**timing)
    for service in (ProcessorSettings, ReflectorSettings):
        with pytest.raises(SettingsError, match=message):
            settings_of(service, **timing)


def test_scaled_timing_keeps_client_gos_proportions() -> None:
    assert LeaseTiming.scaled(15.0) == LeaseTiming()
    assert LeaseTiming.scaled(3.0).flags() == [
        "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.4",
    ]  # fmt: skip


def test_waiting_for_replicas_is_one_group_for_the_reflector_and_the_processor() -> None:
    env = {"INFORMER_BUS_REDIS_WAIT_REPLICAS": "2"}
    for cls in (ReflectorSettings, ProcessorSettings):
        assert settings_of(cls).durability == Durability(0, 1000)  # off: no WAIT at all
        loaded = load_settings(cls, "INFORMER_BUS_", environ=env, redis_wait_timeout_ms=250)
        assert loaded.durability == Durability(2, 250)
    with pytest.raises(SettingsError, match="redis_wait_replicas must be >= 0"):
        settings_of(ReflectorSettings, redis_wait_replicas=-1)
    with pytest.raises(SettingsError, match="redis_wait_timeout_ms must be >= 1"):
        settings_of(ProcessorSettings, redis_wait_timeout_ms=0)  # WAIT's 0 blocks forever


def test_the_heartbeat_must_come_within_the_member_ttl() -> None:
    with pytest.raises(SettingsError, match="heartbeat_interval must be shorter than member_ttl"):
        settings_of(ProcessorSettings, heartbeat_interval=5.0)


def test_the_kubernetes_api_has_one_source_for_the_reflector_and_the_processor() -> None:
    from processor_svc.settings import ProcessorSettings
    from reflector_svc.settings import ReflectorSettings

    for kind in (ReflectorSettings, ProcessorSettings):
        with pytest.raises(SettingsError, match="choose one of --kube-url, --in-cluster"):
            settings_of(kind, kube_url="http://127.0.0.1:8001", in_cluster=True)
        assert settings_of(kind, kube_url="http://x:1").kube.kube_url == "http://x:1"


def test_the_processor_caches_compact_by_default_and_plain_on_request() -> None:
    assert settings_of(ProcessorSettings).cache == "compact"
    assert settings_of(ProcessorSettings).compact
    plain = load_settings(ProcessorSettings, "INFORMER_BUS_", {"INFORMER_BUS_CACHE": "plain"})
    assert plain.cache == "plain" and not plain.compact
    with pytest.raises(SettingsError, match="cache must be one of compact, plain, got 'dicts'"):
        settings_of(ProcessorSettings, cache="dicts")


@pytest.mark.parametrize(
    ("environ", "flags", "cache"),
    [
        ({"INFORMER_BUS_COMPACT_CACHE": "0"}, [], "plain"),
        ({"INFORMER_BUS_COMPACT_CACHE": "1"}, [], "compact"),
        ({}, ["--no-compact-cache"], "plain"),
        ({}, ["--compact-cache"], "compact"),
        ({"INFORMER_BUS_COMPACT_CACHE": "1"}, ["--cache", "compact"], "compact"),
        ({"INFORMER_BUS_COMPACT_CACHE": "0"}, ["--cache", "plain"], "plain"),
    ],
)
def test_the_deprecated_compact_cache_switch_keeps_its_meaning(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], flags: list[str], cache: str
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_flags(parser, ProcessorSettings, "INFORMER_BUS_")
    settings = settings_from_args(ProcessorSettings, "INFORMER_BUS_", parser.parse_args(flags))
    assert settings.cache == cache


def test_the_deprecated_switch_cannot_contradict_cache() -> None:
    with pytest.raises(SettingsError, match="--cache plain contradicts the deprecated"):
        settings_of(ProcessorSettings, cache="plain", compact_cache=True)


def test_the_redis_url_falls_back_on_redis_url_after_the_commands_own_variable() -> None:
    """Issue 34: one rule for every command: the flag, the command's variable, $REDIS_URL."""
    load = functools.partial(load_settings, ServiceSettings, ENV_PREFIX)
    assert load(environ={}).redis.url == "redis://127.0.0.1:6379/0"
    assert load(environ={"REDIS_URL": "redis://a:1/0"}).redis.url == "redis://a:1/0"
    both = {"REDIS_URL": "redis://a:1/0", "INFORMER_BUS_REDIS_URL": "redis://b:2/0"}
    assert load(environ=both).redis.url == "redis://b:2/0"
    empty = {"REDIS_URL": "redis://a:1/0", "INFORMER_BUS_REDIS_URL": ""}
    assert load(environ=empty).redis.url == "redis://a:1/0"
    assert load(environ=both, redis_url="redis://c:3/0").redis.url == "redis://c:3/0"
    assert settings_of(ServiceSettings).redis.url == "redis://127.0.0.1:6379/0"  # no env at all


@pytest.mark.parametrize(
    ("wanted", "known", "meant"),
    [
        ("widgets", ["pods", "widgets.example.com"], ["widgets.example.com"]),
        ("pod", ["pods", "configmaps"], ["pods"]),
        ("podz", ["pods", "configmaps"], ["pods"]),
        ("widget.example.com", ["widgets.example.com"], ["widgets.example.com"]),
        ("pods", ["pods@shop", "pods"], ["pods@shop"]),
        ("secrets", ["pods", "configmaps"], []),
    ],
)
def test_the_one_rule_for_what_a_missing_resource_is_likely_a_slip_of(
    wanted: str, known: list[str], meant: list[str]
) -> None:
    assert likely_meant(wanted, known) == meant


@pytest.mark.parametrize("linger", [-1, 1001])
def test_a_read_linger_outside_0_to_1000_ms_is_one_line_error(linger: int) -> None:
    with pytest.raises(SettingsError, match=r"^read_linger_ms must be between 0 and 1000, got"):
        settings_of(ProcessorSettings, read_linger_ms=linger)
    assert settings_of(ProcessorSettings, read_linger_ms=0).read_linger_ms == 0
