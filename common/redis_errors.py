"""What a person must fix when Redis refuses us: one line naming the cause.

:func:`describe_redis_error` turns the failures a person must fix (wrong password, untrusted
server certificate, missing client certificate, a read-only replica, a missing ACL permission)
into one line that names the cause; :class:`RedisAccessError` carries it, so the services can
exit with status 2 at startup instead of retrying forever. Anything else (Redis down, a
timeout) is worth retrying and is left alone.
"""

from __future__ import annotations

import ssl
from typing import Final

import redis

from common.redis_credentials import PASSWORD_ENV

__all__ = ["READ_ONLY_HINT", "RedisAccessError", "describe_redis_error", "one_line"]


class RedisAccessError(ValueError):
    """Redis refused us for a reason a person must fix; the message is one line, secret-free."""


READ_ONLY_HINT: Final = "point --redis-url at the primary or use --redis-sentinel"


def _ssl_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a redis-py error (redis-py keeps it as the context, not the cause)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def describe_redis_error(exc: BaseException, *, client_cert: bool = False) -> str | None:
    """One line naming what a person must fix when ``exc`` comes from bad credentials or a TLS
    failure; ``None`` for anything else (Redis down, a timeout), which is worth retrying."""
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return f"the Redis server is a read-only replica; {READ_ONLY_HINT}"
    if isinstance(exc, redis.AuthenticationError):
        text = " ".join(str(exc).split())
        if "without any password configured" in text:
            return (
                "a password was sent to a Redis (or sentinel) that has none: "
                f"{one_line(exc)} (--no-redis-sentinel-auth if only the data nodes have one)"
            )
        if "invalid username-password pair" in text or "invalid password" in text:
            return "Redis refused the credentials (WRONGPASS: wrong user or password)"
        return f"Redis requires a password (NOAUTH): set --redis-password-file or {PASSWORD_ENV}"
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return f"the Redis user may not run a command it needs (NOPERM): {one_line(exc)}"
    tls = _ssl_error(exc)
    if tls is None:
        return None
    if isinstance(tls, ssl.SSLCertVerificationError):
        reason = tls.verify_message or tls.reason or one_line(tls)
        return (
            f"TLS verification of the Redis server failed: {reason} "
            "(is --redis-tls-ca-file the CA that signed the server's certificate?)"
        )
    alert = (tls.reason or "").lower()
    if isinstance(tls, ssl.SSLEOFError) or "certificate" in alert or "alert" in alert:
        hint = (
            "the server did not accept the client certificate"
            if client_cert
            else "it may require a client certificate: --redis-tls-cert-file/--redis-tls-key-file"
        )
        return f"the Redis server ended the TLS session ({hint})"
    return f"TLS with the Redis server failed: {tls.reason or one_line(tls)}"


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (its type when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__
