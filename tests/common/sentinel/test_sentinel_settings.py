"""--redis-sentinel and --redis-sentinel-master: parsed from flags and the environment, each
rule checked once (RedisConnection), and the one-line descriptions of what a person must fix."""

from __future__ import annotations

import argparse

import pytest
import redis

from common.redis_config import (
    SentinelTarget,
    connection_kwargs,
    describe_redis_error,
    redis_location,
)
from common.settings import (
    BusSettings,
    RedisConnection,
    SettingsError,
    add_flags,
    load_settings,
    parse_sentinel_addresses,
    settings_from_args,
)


def parsed(*argv: str) -> BusSettings:
    parser = argparse.ArgumentParser()
    add_flags(parser, BusSettings, "INFORMER_BUS_")
    return settings_from_args(BusSettings, "INFORMER_BUS_", parser.parse_args(argv))


def test_flags_set_the_sentinels_and_the_master_name() -> None:
    settings = parsed("--redis-sentinel", "s1:26379, s2:26380", "--redis-sentinel-master", "m")
    assert settings.redis.sentinel_addresses() == (("s1", 26379), ("s2", 26380))
    assert settings.redis.sentinel_master == "m"
    assert settings.redis.sentinel_auth is True
    assert parsed("--no-redis-sentinel-auth").redis.sentinel_auth is False


def test_the_environment_sets_them_too_and_the_master_defaults_to_mymaster() -> None:
    settings = load_settings(
        BusSettings, "INFORMER_BUS_", environ={"INFORMER_BUS_REDIS_SENTINEL": "[::1]:26379"}
    )
    assert settings.redis.sentinel_addresses() == (("::1", 26379),)
    assert settings.redis.sentinel_master == "mymaster"
    assert RedisConnection().sentinel_addresses() == ()


@pytest.mark.parametrize(
    "text", ["sentinel", "h:0", "h:65536", "h:port", ":26379", "h:1,", "h:1,h:1"]
)
def test_an_address_that_is_not_host_and_port_is_one_line(text: str) -> None:
    with pytest.raises(SettingsError, match="--redis-sentinel") as caught:
        parse_sentinel_addresses(text)
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError):
        RedisConnection(sentinel=text)


def test_sentinel_excludes_cluster_unix_sockets_and_an_empty_master() -> None:
    with pytest.raises(SettingsError, match="one of --redis-sentinel and --redis-cluster"):
        parsed("--redis-sentinel", "h:1", "--redis-cluster")
    with pytest.raises(SettingsError, match="needs a redis:// or rediss://"):
        RedisConnection(url="unix:///tmp/redis.sock", sentinel="h:1")
    with pytest.raises(SettingsError, match="invalid --redis-sentinel-master"):
        RedisConnection(sentinel="h:1", sentinel_master="my master")


def test_help_names_the_flags_and_their_env_vars_under_the_redis_heading() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, BusSettings, "INFORMER_BUS_")
    text = " ".join(parser.format_help().split())
    redis_part = text.split("Redis:", 1)[1]
    assert "--redis-sentinel HOST:PORT[,HOST:PORT...]" in redis_part
    assert "env INFORMER_BUS_REDIS_SENTINEL" in redis_part
    assert "--redis-sentinel-master NAME" in redis_part
    assert "--redis-sentinel-auth, --no-redis-sentinel-auth" in redis_part


def test_connection_kwargs_carry_the_sentinels_and_messages_name_them() -> None:
    target = RedisConnection(url="redis://:pw@ignored:1/3", sentinel="a:1,b:2", sentinel_master="m")
    kwargs = connection_kwargs(target, {})
    assert kwargs["sentinel"] == SentinelTarget((("a", 1), ("b", 2)), "m", True)
    assert redis_location(target) == "master 'm' via sentinels a:1,b:2"
    assert "sentinel" not in connection_kwargs(RedisConnection(), {})
    assert redis_location(RedisConnection(url="redis://:pw@h:1/0")) == "redis://:***@h:1/0"


def test_a_readonly_reply_and_a_password_for_a_passwordless_sentinel_are_named() -> None:
    readonly = redis.exceptions.ReadOnlyError("You can't write against a read only replica.")
    assert describe_redis_error(readonly) == (
        "the Redis server is a read-only replica; point --redis-url at the primary or use "
        "--redis-sentinel"
    )
    no_password = redis.AuthenticationError(
        "AUTH <password> called without any password configured for the default user."
    )
    assert "--no-redis-sentinel-auth" in (describe_redis_error(no_password) or "")
