"""Redis credentials and where Redis is: every client's user, password and TLS, checked once.

Every client -- the services' command clients, the lease clients, the processors' blocking
readers (which copy their pool's settings), ``status`` -- is built from the keyword arguments
:func:`connection_kwargs` returns, so credentials and TLS cannot differ between them.

Credentials: an ACL user (``--redis-username``) and a password, read from
``--redis-password-file`` or the ``INFORMER_BUS_REDIS_PASSWORD`` environment variable, never
from a flag of its own: command lines are visible to every local user (``ps``). A password
inside ``--redis-url`` still works (redis-py reads it), but :func:`command_line_password_warning`
produces a warning for it. Whatever the source, the password is handed to the log redactor
(:func:`redis_secrets`) and every message meant for people shows the URL through
:func:`redacted_url`.

TLS: a ``rediss://`` URL verifies the server's certificate and host name against
``--redis-tls-ca-file`` (or the system's CAs); ``--redis-tls-cert-file``/``--redis-tls-key-file``
present a client certificate to a server started with ``tls-auth-clients yes``. TLS files with
a plain ``redis://`` URL are refused rather than silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

from common.redis_sentinel import SentinelTarget
from common.settings import RedisConnection, SettingsError

__all__ = [
    "PASSWORD_ENV",
    "command_line_password_warning",
    "connection_kwargs",
    "redacted_url",
    "redis_location",
    "redis_password",
    "redis_secrets",
]

PASSWORD_ENV: Final = "INFORMER_BUS_REDIS_PASSWORD"
"""The environment variable that may hold the Redis password (there is deliberately no flag)."""

_SCHEMES: Final = ("redis", "rediss", "unix")


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, fit for messages and logs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # an unparsable URL may still hold a secret: show none of its netloc
        return "<unparsable Redis URL>"
    if not password:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _url_credentials(url: str) -> tuple[str | None, str | None]:
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return None, None
    return (unquote(user) if user else None), (unquote(password) if password else None)


def redis_password(target: RedisConnection, environ: Mapping[str, str] | None = None) -> str | None:
    """The password from ``--redis-password-file``, else ``INFORMER_BUS_REDIS_PASSWORD``, else
    ``None`` (a password in the URL is left to redis-py). One trailing newline of the file is
    dropped, since editors and ``echo`` add one."""
    env = os.environ if environ is None else environ
    if target.password_file:
        path = Path(target.password_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc)
            raise SettingsError(f"cannot read --redis-password-file {path}: {reason}") from None
        password = text[:-1] if text.endswith("\n") else text
        password = password[:-1] if password.endswith("\r") else password
        if not password:
            raise SettingsError(f"--redis-password-file {path} is empty")
        return password
    return env.get(PASSWORD_ENV) or None


def _readable_file(flag: str, value: str) -> str:
    if not os.access(value, os.R_OK) or not Path(value).is_file():
        raise SettingsError(f"{flag} {value}: not a readable file")
    return value


def connection_kwargs(
    target: RedisConnection, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Keyword arguments for :func:`redis_client` (``target.url``, ``**kwargs``): the ACL user,
    the password, the TLS files and, with ``--redis-sentinel``, the :class:`SentinelTarget`
    (the rest are ``redis.Redis.from_url``'s), checked; raises :class:`SettingsError` (one
    line) for a contradiction (TLS files with ``redis://``, two different passwords) or an
    unreadable file.

    Only what is set is returned, so a password in the URL keeps working; redis-py lets URL
    values win over keyword arguments, which is why two different values are refused here.
    """
    url = target.url
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in _SCHEMES:
        raise SettingsError(
            f"--redis-url must start with redis://, rediss:// or unix://, got {redacted_url(url)}"
        )
    url_user, url_password = _url_credentials(url)
    kwargs: dict[str, Any] = {}
    password = redis_password(target, environ)
    if password is not None:
        if url_password is not None and url_password != password:
            raise SettingsError(
                "two different Redis passwords: one in --redis-url and one from "
                f"--redis-password-file/{PASSWORD_ENV}; keep only the file or the variable"
            )
        kwargs["password"] = password
    if target.username:
        if url_user is not None and url_user != target.username:
            raise SettingsError(
                f"two different Redis users: {url_user!r} in --redis-url and "
                f"{target.username!r} from --redis-username"
            )
        kwargs["username"] = target.username
    tls_files = {
        "--redis-tls-ca-file": target.tls_ca_file,
        "--redis-tls-cert-file": target.tls_cert_file,
        "--redis-tls-key-file": target.tls_key_file,
    }
    given = {flag: value for flag, value in tls_files.items() if value}
    if given and scheme != "rediss":
        raise SettingsError(
            f"{', '.join(given)} given but --redis-url is {scheme}://: use rediss:// for TLS"
        )
    if target.tls_key_file and not target.tls_cert_file:
        raise SettingsError("--redis-tls-key-file needs --redis-tls-cert-file")
    if scheme == "rediss":
        # redis-py's defaults, stated so that nobody weakens them by accident elsewhere.
        kwargs.update(ssl_cert_reqs="required", ssl_check_hostname=True)
        if target.tls_ca_file:
            kwargs["ssl_ca_certs"] = _readable_file("--redis-tls-ca-file", target.tls_ca_file)
        if target.tls_cert_file:
            kwargs["ssl_certfile"] = _readable_file("--redis-tls-cert-file", target.tls_cert_file)
        if target.tls_key_file:
            kwargs["ssl_keyfile"] = _readable_file("--redis-tls-key-file", target.tls_key_file)
    return kwargs | _sentinel_kwargs(target)


def _sentinel_kwargs(target: RedisConnection) -> dict[str, Any]:
    if target.sentinel is None:
        return {}
    return {
        "sentinel": SentinelTarget(
            target.sentinel_addresses(), target.sentinel_master, target.sentinel_auth
        )
    }


def redis_location(target: RedisConnection) -> str:
    """Where ``target`` points, for messages, password masked: the URL, or the master name
    and the sentinels with ``--redis-sentinel``."""
    if target.sentinel is None:
        return redacted_url(target.url)
    return SentinelTarget(target.sentinel_addresses(), target.sentinel_master).describe()


def redis_secrets(target: RedisConnection, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every Redis password these settings could send (URL, file, environment), for the log
    redactor; an unreadable password file contributes nothing (its error names only the path)."""
    secrets = [password for password in (_url_credentials(target.url)[1],) if password]
    try:
        password = redis_password(target, environ)
    except SettingsError:
        password = None
    if password:
        secrets.append(password)
    return secrets


def command_line_password_warning(url_flag: str | None) -> str | None:
    """The warning to log when the ``--redis-url`` *flag* (not the environment variable) holds a
    password, which every local user can read with ``ps``; ``None`` otherwise."""
    if not url_flag or _url_credentials(url_flag)[1] is None:
        return None
    return (
        "the Redis password was given on the command line (--redis-url), where other local "
        f"users can read it: use --redis-password-file or {PASSWORD_ENV} instead"
    )
