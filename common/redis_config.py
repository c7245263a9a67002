"""How every informer-bus Redis client authenticates and encrypts, decided in one place.

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

:func:`check_redis_access` turns the failures a person must fix (wrong password, untrusted
server certificate, missing client certificate) into :class:`RedisAccessError`, one line that
names the cause, so the services can exit with status 2 at startup instead of retrying forever.

Redis Cluster (``--redis-cluster``): :func:`redis_client` builds every client, a standalone one
or a :class:`ClusterClient` that discovers the nodes from the URL's node and follows ``MOVED``
redirections, with the same options. Keys of one shard share a hash tag, so every script and
``MULTI`` stays within one slot; :func:`node_client` names the node that serves a key, for the
connections that must sit on it (the processors' blocking reads, ``CLIENT UNBLOCK``).

Redis Sentinel (``--redis-sentinel``): every client is then a sentinel-managed one
(``redis.sentinel.Sentinel.master_for``) whose pool asks the sentinels for the primary on every
new connection and drops connections to a primary that was replaced (or that answers
``READONLY`` after a demotion), so the same client object follows a failover without a restart.
``--redis-url`` then gives only the scheme and db; the sentinels get the same TLS and, unless
``--no-redis-sentinel-auth``, the same user and password. :class:`MasterNotFoundError`'s message
says which of three things happened: no sentinel answered, they do not know the master name,
or they report it down (a failover under way).
"""

from __future__ import annotations

import dataclasses
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import SSLConnection, parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from common.settings import LeaseTiming, RedisConnection, SettingsError

__all__ = [
    "PASSWORD_ENV",
    "ClusterClient",
    "MasterDownError",
    "MasterUnknownError",
    "NoSentinelError",
    "RedisAccessError",
    "SentinelTarget",
    "check_redis_access",
    "command_line_password_warning",
    "connect",
    "connection_kwargs",
    "describe_redis_error",
    "is_cluster",
    "lease_client",
    "lease_client_for",
    "node_client",
    "redacted_url",
    "redis_client",
    "redis_location",
    "redis_password",
    "redis_secrets",
]

PASSWORD_ENV: Final = "INFORMER_BUS_REDIS_PASSWORD"
"""The environment variable that may hold the Redis password (there is deliberately no flag)."""

_SCHEMES: Final = ("redis", "rediss", "unix")


class RedisAccessError(ValueError):
    """Redis refused us for a reason a person must fix; the message is one line, secret-free."""


READ_ONLY_HINT: Final = "point --redis-url at the primary or use --redis-sentinel"


@dataclasses.dataclass(frozen=True)
class SentinelTarget:
    """Where the sentinels are and which master to ask them for (``--redis-sentinel``,
    ``--redis-sentinel-master``); ``auth``: send the data nodes' user and password to them."""

    addresses: tuple[tuple[str, int], ...]
    master: str
    auth: bool = True

    def describe(self) -> str:
        """``master 'mymaster' via sentinels h1:26379,h2:26379``, for messages."""
        where = ",".join(f"{host}:{port}" for host, port in self.addresses)
        return f"master {self.master!r} via sentinels {where}"


class NoSentinelError(MasterNotFoundError):
    """None of the sentinels answered (down, wrong address, not a sentinel)."""


class MasterUnknownError(MasterNotFoundError):
    """Sentinels answered but none monitors a master by that name."""


class MasterDownError(MasterNotFoundError):
    """The sentinels know the master but report it down: a failover is likely under way."""


class _Sentinels(Sentinel):
    """A ``Sentinel`` whose failed master lookup says why (:class:`NoSentinelError`,
    :class:`MasterUnknownError`, :class:`MasterDownError`, one line each): redis-py's own
    says only "No master found", the same for a typo in the name and a failover under way."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        unreachable: list[str] = []
        answered: list[str] = []
        monitored: set[str] = set()
        down = False
        for index, sentinel in enumerate(self.sentinels):
            where = _node_address(sentinel)
            try:
                masters: Any = sentinel.sentinel_masters()
            except redis.AuthenticationError as exc:
                raise type(exc)(f"sentinel {where}: {_one_line(exc)}") from None
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                unreachable.append(f"{where}: {_one_line(exc)}")
                continue
            except redis.ResponseError as exc:
                unreachable.append(f"{where} is not a sentinel ({_one_line(exc)})")
                continue
            answered.append(where)
            monitored.update(masters)
            state = masters.get(service_name)
            if state is None:
                continue
            untyped: Any = self  # redis-py leaves Sentinel unannotated
            if untyped.check_master_state(state, service_name):
                # Ask this sentinel first next time, as redis-py does.
                self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]
                return str(state["ip"]), int(state["port"])
            down = True
        others = f"; unreachable: {', '.join(unreachable)}" if unreachable else ""
        if down:
            raise MasterDownError(
                f"sentinels report master {service_name!r} down (a failover may be under way)"
                + others
            )
        if answered:
            raise MasterUnknownError(
                f"master {service_name!r} unknown to sentinels {','.join(answered)} (they "
                f"monitor: {', '.join(sorted(monitored)) or 'nothing'}; see "
                "--redis-sentinel-master)" + others
            )
        raise NoSentinelError(
            f"no sentinel answers for master {service_name!r}: {', '.join(unreachable)}"
        )


def _node_address(client: redis.Redis) -> str:
    options = client.connection_pool.connection_kwargs
    return f"{options.get('host')}:{options.get('port')}"


class SentinelManagedRedis(redis.Redis):
    """The client :func:`redis_client` returns with a :class:`SentinelTarget`: a ``redis.Redis``
    on a ``SentinelConnectionPool`` whose :meth:`close` also closes the clients of the
    sentinels it asked (``Sentinel`` leaves them open, to be found by the garbage collector)."""

    def close(self) -> None:
        pool: Any = self.connection_pool
        try:
            super().close()
        finally:
            manager = getattr(pool, "sentinel_manager", None)
            if manager is not None:
                manager.close()


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
                f"{_one_line(exc)} (--no-redis-sentinel-auth if only the data nodes have one)"
            )
        if "invalid username-password pair" in text or "invalid password" in text:
            return "Redis refused the credentials (WRONGPASS: wrong user or password)"
        return f"Redis requires a password (NOAUTH): set --redis-password-file or {PASSWORD_ENV}"
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return f"the Redis user may not run a command it needs (NOPERM): {_one_line(exc)}"
    tls = _ssl_error(exc)
    if tls is None:
        return None
    if isinstance(tls, ssl.SSLCertVerificationError):
        reason = tls.verify_message or tls.reason or _one_line(tls)
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
    return f"TLS with the Redis server failed: {tls.reason or _one_line(tls)}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def check_redis_access(
    target: RedisConnection, environ: Mapping[str, str] | None = None, *, timeout: float = 5.0
) -> None:
    """PING Redis once with the configured credentials and TLS; raises
    :class:`RedisAccessError` for a failure a person must fix (see
    :func:`describe_redis_error`). An unreachable Redis passes: services retry until it is up."""
    client = redis.Redis.from_url(
        target.url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **connection_kwargs(target, environ),
    ) if target.sentinel is None else redis_client(
        target.url,
        sentinel_timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **connection_kwargs(target, environ),
    )  # fmt: skip
    where = redis_location(target)
    try:
        client.ping()
        if target.sentinel is None and not target.cluster and _is_replica(client):
            raise RedisAccessError(f"{where} is a read-only replica; {READ_ONLY_HINT}")
    except redis.RedisError as exc:
        cause = describe_redis_error(exc, client_cert=bool(target.tls_cert_file))
        if cause is not None:
            raise RedisAccessError(f"{cause} [{where}]") from None
    finally:
        client.close()


def _is_replica(client: redis.Redis) -> bool:
    """Whether ``client``'s server is a replica (``ROLE``); ``False`` when the user may not
    run ``ROLE``, leaving the ``READONLY`` replies to say it later."""
    try:
        untyped: Any = client  # redis-py leaves execute_command unannotated
        role: Any = untyped.execute_command("ROLE")
    except (redis.exceptions.NoPermissionError, redis.ResponseError):
        return False
    first = role[0] if role else b""
    return (first.decode() if isinstance(first, bytes) else str(first)) in ("slave", "replica")


class ClusterClient(RedisCluster):
    """A ``RedisCluster`` that also offers the one ``redis.Redis`` attribute the services read
    besides commands: ``connection_pool``, whose settings (timeouts, retries, decoding, TLS) are
    those of every node's pool, since all are built from the same keyword arguments."""

    @property
    def connection_pool(self) -> redis.ConnectionPool:
        untyped: Any = self  # redis-py leaves get_default_node unannotated
        pool: redis.ConnectionPool = self.get_redis_connection(
            untyped.get_default_node()
        ).connection_pool
        return pool

    def close(self) -> None:
        """Also disconnect every node's pool: ``RedisCluster.close`` only closes the node
        clients, and those never close a pool they were handed, which is how redis-py builds
        them from a URL. Their sockets would be left for the garbage collector."""
        untyped: Any = self  # redis-py leaves disconnect_connection_pools unannotated
        try:
            untyped.disconnect_connection_pools()
        finally:
            super().close()


def redis_client(
    url: str,
    *,
    cluster: bool = False,
    sentinel: SentinelTarget | None = None,
    sentinel_timeout: float | None = None,
    **kwargs: Any,
) -> redis.Redis:
    """A client for ``url``: standalone, or with ``cluster`` a :class:`ClusterClient` that
    reads the cluster's slot map from the URL's node at once (so an unreachable cluster, or a
    node that is not in cluster mode, raises :class:`RedisAccessError` here, one line).

    Typed ``redis.Redis`` on purpose: ``RedisCluster`` offers the same command methods
    (key-based ones routed by slot, ``SCAN`` over every primary), which is all the services
    call; the few places that need a particular node use :func:`node_client`. A ``retry`` in
    ``kwargs`` becomes the cluster client's own retry policy (redis-py refuses it per node).

    ``sentinel``: a :class:`SentinelManagedRedis` for the master the sentinels name (the URL's
    host is ignored); ``sentinel_timeout`` bounds the connect and the reply of each sentinel
    asked (default: ``socket_connect_timeout``, else 5 s).
    """
    if sentinel is not None:
        if cluster:
            raise SettingsError("choose one of --redis-sentinel and --redis-cluster")
        return _sentinel_client(url, sentinel, sentinel_timeout, kwargs)
    if not cluster:
        client: redis.Redis = redis.Redis.from_url(url, **kwargs)
        return client
    if url.startswith("unix://"):
        raise SettingsError("--redis-cluster needs a redis:// or rediss:// URL, not unix://")
    try:
        cluster_client = ClusterClient.from_url(url, **kwargs)
    except (RedisClusterException, redis.RedisError) as exc:
        raise RedisAccessError(
            f"cannot use the Redis Cluster at {redacted_url(url)}: {_one_line(exc)}"
        ) from None
    return cluster_client  # type: ignore[return-value]  # same command API, see the docstring


def _sentinel_client(
    url: str, target: SentinelTarget, timeout: float | None, kwargs: dict[str, Any]
) -> redis.Redis:
    """The master's client: the URL's options (db, credentials, TLS) over ``kwargs``, as
    ``from_url`` would merge them, on a pool that asks the sentinels for the master's address.

    The sentinels are asked without retries (the next sentinel is the retry, and the master
    pool's own retry policy repeats the whole lookup), with the same TLS and, if
    ``target.auth``, the same credentials."""
    if url.startswith("unix://"):
        raise SettingsError("--redis-sentinel needs a redis:// or rediss:// --redis-url")
    from_url: Any = parse_url  # redis-py leaves parse_url unannotated
    options: dict[str, Any] = {**kwargs, **from_url(url)}
    options.pop("host", None)
    options.pop("port", None)
    if options.pop("connection_class", None) is SSLConnection:
        options["ssl"] = True
    if timeout is None:
        timeout = float(kwargs.get("socket_connect_timeout") or 5.0)
    sentinel_options: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
    }
    sentinel_options.update(
        (name, value) for name, value in options.items() if name == "ssl" or name.startswith("ssl_")
    )
    if target.auth:
        sentinel_options.update(
            (name, options[name]) for name in ("username", "password") if options.get(name)
        )
    sentinels: Any = _Sentinels  # redis-py leaves Sentinel unannotated
    manager = sentinels(list(target.addresses), sentinel_kwargs=sentinel_options)
    client: redis.Redis = manager.master_for(
        target.master, redis_class=SentinelManagedRedis, **options
    )
    return client


def connect(
    target: RedisConnection, environ: Mapping[str, str] | None = None, **kwargs: Any
) -> redis.Redis:
    """A client for ``target`` (URL, credentials, TLS, Cluster mode), checked as
    :func:`connection_kwargs` checks it; ``kwargs`` (timeouts, ...) go to :func:`redis_client`."""
    return redis_client(
        target.url, cluster=target.cluster, **connection_kwargs(target, environ), **kwargs
    )


def is_cluster(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (a :func:`redis_client` with ``cluster``)."""
    return isinstance(client, RedisCluster)


def node_client(client: redis.Redis, key: str) -> redis.Redis:
    """The client of the node that serves ``key`` now: ``client`` itself when standalone, else
    that primary's own ``redis.Redis`` (its pool is shared with the cluster client). The slot
    map is the cluster client's last known one; it is refreshed by the ``MOVED`` replies its
    own commands get, so callers look the node up again after an error."""
    if not is_cluster(client):
        return client
    cluster: Any = client  # redis-py leaves get_node_from_key unannotated
    node: redis.Redis = cluster.get_redis_connection(cluster.get_node_from_key(key))
    return node


def lease_client_for(
    url: str, *, timing: LeaseTiming, calls_per_renewal: int = 1, **kwargs: Any
) -> redis.Redis:
    """A :func:`lease_client` whose calls always end between the renew deadline and the lease
    expiry (a call takes up to about ``2 * timeout``), so a holder that gives up at its
    deadline never still writes after someone else could have taken the lease.
    ``calls_per_renewal``: how many calls one renewal makes one after the other (a processor
    owning shard *N* of several co-sharded resources renews one lease per resource), which
    share the margin. ``kwargs`` (credentials, TLS: ``connection_kwargs``) go to
    :func:`lease_client`."""
    margin = timing.lease_duration - timing.renew_deadline  # > 0: LeaseTiming's rule
    # Through sentinels a call may first spend up to one more timeout asking for the master.
    calls = (3.5 if kwargs.get("sentinel") is not None else 2.5) * max(1, calls_per_renewal)
    return lease_client(url, timeout=min(2.0, margin / calls), **kwargs)


def lease_client(
    url: str, *, timeout: float = 2.0, cluster: bool = False, **kwargs: Any
) -> redis.Redis:
    """A Redis client fit for leases: every call gives up after about ``2 * timeout`` seconds.

    ``timeout`` bounds the connect and each read (``socket_connect_timeout``/``socket_timeout``)
    and there are no retries: a lease operation is retried by the elector's loop, every retry
    period, where the renew deadline is checked between attempts. With the defaults (2 s timeout,
    15 s lease, 10 s deadline) a call that started just before the deadline still ends before
    the lease can expire. ``cluster``: a Redis Cluster client (no cluster-level retries either;
    ``redis_client``). ``sentinel``: the master through sentinels, which are asked with
    ``timeout / (2 * sentinels)`` each, so the lookup a new connection makes adds at most one
    ``timeout`` (about ``3 * timeout`` per call). Extra ``kwargs`` go to
    ``redis.Redis.from_url`` (e.g. ``password``).
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0, got {timeout!r}")
    sentinel: SentinelTarget | None = kwargs.pop("sentinel", None)
    return redis_client(
        url,
        cluster=cluster,
        sentinel=sentinel,
        sentinel_timeout=(
            None if sentinel is None else timeout / (2 * max(1, len(sentinel.addresses)))
        ),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        **kwargs,
    )
