"""Turning settings into Redis credentials and TLS options (common.redis_config), without Redis."""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from common.redis_config import (
    PASSWORD_ENV,
    command_line_password_warning,
    connection_kwargs,
    describe_redis_error,
    redacted_url,
    redis_secrets,
)
from common.settings import (
    RedisConnection,
    ServiceSettings,
    SettingsError,
    add_flags,
    load_settings,
)

SECRET = "p@ss:w/rd-8812"


@pytest.fixture
def pem(tmp_path: Path) -> Path:
    path = tmp_path / "file.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def password_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "password"
    path.write_text(text)
    return path


def test_a_plain_url_needs_nothing_more() -> None:
    assert connection_kwargs(RedisConnection(url="redis://127.0.0.1:1/0"), {}) == {}


def test_the_password_file_wins_over_the_environment_and_loses_its_newline(
    tmp_path: Path,
) -> None:
    settings = RedisConnection(
        password_file=str(password_file(tmp_path, SECRET + "\n")), username="app"
    )
    kwargs = connection_kwargs(settings, {PASSWORD_ENV: "from-env"})
    assert kwargs == {"password": SECRET, "username": "app"}
    assert connection_kwargs(RedisConnection(), {PASSWORD_ENV: "from-env"}) == {
        "password": "from-env"
    }


@pytest.mark.parametrize(
    ("content", "expected"), [(None, "cannot read --redis-password-file"), ("\n", "is empty")]
)
def test_an_unusable_password_file_is_a_one_line_settings_error(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "password"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError, match=expected) as caught:
        connection_kwargs(RedisConnection(password_file=str(path)), {})
    assert "\n" not in str(caught.value)


def test_two_different_passwords_or_users_are_refused_without_showing_them(
    tmp_path: Path,
) -> None:
    url = "redis://alice:url-secret-1@127.0.0.1:1/0"
    with pytest.raises(SettingsError, match="two different Redis passwords") as caught:
        connection_kwargs(RedisConnection(url=url), {PASSWORD_ENV: "env-secret-2"})
    assert "secret" not in str(caught.value)
    with pytest.raises(SettingsError, match="two different Redis users"):
        connection_kwargs(RedisConnection(url=url, username="bob"), {})
    same = RedisConnection(url=url, username="alice")
    assert connection_kwargs(same, {PASSWORD_ENV: "url-secret-1"})["password"] == "url-secret-1"


def test_tls_files_need_a_rediss_url_and_are_checked(pem: Path, tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"use rediss:// for TLS"):
        connection_kwargs(RedisConnection(tls_ca_file=str(pem)), {})
    tls = "rediss://127.0.0.1:1/0"
    with pytest.raises(SettingsError, match="needs --redis-tls-cert-file"):
        connection_kwargs(RedisConnection(url=tls, tls_key_file=str(pem)), {})
    missing = str(tmp_path / "absent.pem")
    with pytest.raises(SettingsError, match=r"--redis-tls-ca-file .*absent\.pem: not a readable"):
        connection_kwargs(RedisConnection(url=tls, tls_ca_file=missing), {})
    settings = RedisConnection(
        url=tls, tls_ca_file=str(pem), tls_cert_file=str(pem),
        tls_key_file=str(pem),
    )  # fmt: skip
    assert connection_kwargs(settings, {}) == {
        "ssl_cert_reqs": "required", "ssl_check_hostname": True, "ssl_ca_certs": str(pem),
        "ssl_certfile": str(pem), "ssl_keyfile": str(pem),
    }  # fmt: skip


def test_verification_is_on_by_default_for_rediss() -> None:
    url = "rediss://127.0.0.1:1/0"
    pool = redis.ConnectionPool.from_url(url, **connection_kwargs(RedisConnection(url=url), {}))
    made = pool.connection_class(**pool.connection_kwargs)  # built, never connected
    assert made.cert_reqs == ssl.CERT_REQUIRED
    assert made.check_hostname
    pool.disconnect()


def test_unknown_schemes_are_refused_without_showing_the_password() -> None:
    with pytest.raises(SettingsError, match="must start with redis://") as caught:
        connection_kwargs(RedisConnection(url="http://u:hunter2@host/0"), {})
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("rediss://:s3cr%40t@h:1/0", "rediss://:***@h:1/0"),
        ("rediss://app:s3cret@h:1/0", "rediss://app:***@h:1/0"),
        ("redis://app:s3cret@[::1", "<unparsable Redis URL>"),
    ],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_every_password_source_is_handed_to_the_log_redactor(tmp_path: Path) -> None:
    settings = RedisConnection(
        url="redis://:in-url@h:1/0", password_file=str(password_file(tmp_path, "in-file\n"))
    )
    assert redis_secrets(settings, {}) == ["in-url", "in-file"]
    assert redis_secrets(RedisConnection(), {PASSWORD_ENV: "in-env"}) == ["in-env"]
    unreadable = RedisConnection(password_file=str(tmp_path / "absent"))
    assert redis_secrets(unreadable, {}) == []


def test_a_password_on_the_command_line_is_warned_about_without_repeating_it() -> None:
    assert command_line_password_warning(None) is None
    assert command_line_password_warning("redis://h:1/0") is None
    warning = command_line_password_warning(f"redis://app:{quote(SECRET, safe='')}@h:1/0")
    assert warning is not None and "--redis-password-file" in warning
    assert "8812" not in warning


def test_there_is_no_password_flag_and_every_new_setting_has_an_env_var() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_flags(parser, ServiceSettings, "INFORMER_BUS_")
    assert not any("password" in o and "file" not in o for o in parser._option_string_actions)
    settings = load_settings(
        ServiceSettings, "INFORMER_BUS_",
        {"INFORMER_BUS_REDIS_USERNAME": "app", "INFORMER_BUS_REDIS_TLS_CA_FILE": "/ca.pem",
         "INFORMER_BUS_REDIS_PASSWORD_FILE": "/pw"},
    )  # fmt: skip
    assert (settings.redis.username, settings.redis.tls_ca_file) == ("app", "/ca.pem")
    assert settings.redis.password_file == "/pw"


def test_errors_worth_retrying_are_not_described_as_mistakes() -> None:
    assert describe_redis_error(redis.ConnectionError("Error 111 connecting")) is None
    assert describe_redis_error(redis.TimeoutError("Timeout reading")) is None
    wrong = describe_redis_error(redis.AuthenticationError("invalid username-password pair"))
    assert wrong == "Redis refused the credentials (WRONGPASS: wrong user or password)"
