"""Redis Sentinel (``--redis-sentinel``): a client that follows the primary through failovers.

Every client is then a sentinel-managed one (``redis.sentinel.Sentinel.master_for``) whose pool
asks the sentinels for the primary on every new connection and drops connections to a primary
that was replaced (or that answers ``READONLY`` after a demotion), so the same client object
follows a failover without a restart. ``--redis-url`` then gives only the scheme and db; the
sentinels get the same TLS and, unless ``--no-redis-sentinel-auth``, the same user and
password. :class:`MasterNotFoundError`'s message says which of three things happened: no
sentinel answered, they do not know the master name, or they report it down (a failover under
way).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import SSLConnection, parse_url
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from common.settings import SettingsError

__all__ = [
    "MasterDownError",
    "MasterUnknownError",
    "NoSentinelError",
    "SentinelManagedRedis",
    "SentinelTarget",
    "sentinel_client",
]


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


def sentinel_client(
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


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
