"""The reflector's door to the Kubernetes API: client loading and raw requests.

Why raw: the official client turns every object into model instances (~1 ms per Pod) and its
``Watch`` decodes every line twice. We keep what it does well (kubeconfig/in-cluster loading,
auth headers and token refresh, TLS settings, the urllib3 connection pool) and read the bytes
ourselves: ``orjson`` on the LIST body and on each watch line, objects stay plain dicts.

Why no automatic retries: urllib3 (and the client's retry options) would retry 429s with
Retry-After and refused connections silently; the reflector must see them to back off with
jitter and to count them. Every request here passes ``retries=False``.

Failures come out as the typed errors of :mod:`reflector_svc.api_errors`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, Final
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import config as _kube_config
from kubernetes.client import ApiClient, Configuration
from urllib3.exceptions import HTTPError, ReadTimeoutError

from reflector_svc.api_errors import (
    ApiUnavailableError,
    MalformedResponseError,
    SourceConfigError,
    WatchInactiveError,
    error_from_status,
    one_line,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "discard",
    "get_json",
    "load_api_client",
    "raise_for_status",
    "read_all",
    "request_timeout",
    "send",
    "shutdown",
]

kube_config: Any = _kube_config  # the loaders are untyped; one Any here beats ignores below

DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds to establish a TCP (and TLS) connection before :class:`ApiUnavailableError`."""

_USER_AGENT: Final = "informer-bus-reflector/0.1"
_ERROR_BODY_LIMIT: Final = 1 << 20


def load_api_client(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    in_cluster: bool = False,
    url: str | None = None,
) -> Any:
    """A ``kubernetes.client.ApiClient`` with its own fresh ``Configuration`` (never the
    process-wide default, so several sources in one process cannot clobber each other).

    Typed ``Any`` on purpose: the client's methods are unannotated, so under strict mypy every
    call on a precisely typed ``ApiClient`` (even ``close()``) would be an error for callers.

    Exactly one source: ``url`` (plain, no auth: the simulator or a ``kubectl proxy``),
    ``in_cluster`` (service account), or a kubeconfig (``kubeconfig``, else ``$KUBECONFIG``,
    else ``~/.kube/config``; ``context`` picks a context, default the current one).
    Anything unusable raises :class:`SourceConfigError` with a one-line message.
    """
    if url is not None and in_cluster:
        raise SourceConfigError("choose one source: an explicit URL or in-cluster config")
    if (url is not None or in_cluster) and (kubeconfig or context):
        raise SourceConfigError(
            "kubeconfig/context cannot be combined with an explicit URL or in-cluster config"
        )
    configuration = Configuration()
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SourceConfigError(f"API URL {url!r} must look like http(s)://host:port")
        configuration.host = url.rstrip("/")
    elif in_cluster:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except Exception as exc:  # ConfigException, OSError: all mean "not usable here"
            raise SourceConfigError(f"in-cluster config: {one_line(exc)}") from None
    else:
        _load_kubeconfig(configuration, kubeconfig, context)
    client = ApiClient(configuration)
    client.user_agent = _USER_AGENT
    return client


def _load_kubeconfig(configuration: Any, kubeconfig: str | None, context: str | None) -> None:
    # Resolved here, not by the loader: it reads $KUBECONFIG once, at import time.
    paths = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    existing = [p for p in paths.split(os.pathsep) if p and os.path.isfile(os.path.expanduser(p))]
    if not existing:
        raise SourceConfigError(f"kubeconfig not found: {paths}")
    where = f"kubeconfig {paths}" + (f" context {context!r}" if context else "")
    try:
        kube_config.load_kube_config(
            config_file=paths,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except Exception as exc:  # ConfigException, YAML and OS errors from the loader
        raise SourceConfigError(f"{where}: {one_line(exc)}") from None
    if not configuration.host:
        raise SourceConfigError(f"{where}: no server address")
    configuration.host = configuration.host.rstrip("/")


def send(
    api_client: ApiClient,
    path: str,
    query: list[tuple[str, str]],
    timeout: urllib3.Timeout,
    *,
    watch: bool = False,
) -> urllib3.BaseHTTPResponse:
    """GET ``path`` through the client's pool with its auth headers; body left unread.

    ``param_serialize`` applies the client's default headers and bearer token (calling the
    token refresh hook of exec/in-cluster credentials); the pool manager carries TLS, client
    certificates and proxy settings. ``retries=False`` keeps 429s and refused connections
    visible.
    """
    try:
        _, url, headers, _, _ = api_client.param_serialize(
            "GET",
            path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
    except Exception as exc:  # a failed credential refresh is transient: retry later
        raise ApiUnavailableError(f"cannot prepare GET {path}: {one_line(exc)}") from exc
    pool: urllib3.PoolManager = api_client.rest_client.pool_manager
    try:
        return pool.request(
            "GET", url, headers=headers, timeout=timeout, preload_content=False, retries=False
        )
    except ReadTimeoutError as exc:
        if watch:
            raise WatchInactiveError(
                f"GET {path}: no response within {timeout.read_timeout}s"
            ) from exc
        raise ApiUnavailableError(
            f"GET {path}: no response within {timeout.read_timeout}s"
        ) from exc
    except (HTTPError, OSError) as exc:
        raise ApiUnavailableError(f"GET {path}: {one_line(exc)}") from exc


def discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Close a response whose connection may hold unread bytes, and give the (closed)
    connection back to the pool so its slot is not lost."""
    resp.close()
    resp.release_conn()


def read_all(resp: urllib3.BaseHTTPResponse, path: str) -> bytes:
    """The whole body of a 2xx response; the connection goes back to the pool either way."""
    try:
        data = resp.read()
    except ReadTimeoutError as exc:
        discard(resp)
        raise ApiUnavailableError(f"GET {path}: read timed out") from exc
    except (HTTPError, OSError) as exc:
        discard(resp)
        raise ApiUnavailableError(f"GET {path}: connection lost: {one_line(exc)}") from exc
    resp.release_conn()
    return data


def raise_for_status(
    resp: urllib3.BaseHTTPResponse,
    *,
    continue_requested: bool = False,
    watch_list_requested: bool = False,
) -> None:
    """Raise the typed error of a non-2xx response (its body read up to 1 MiB, then closed)."""
    if 200 <= resp.status < 300:
        return
    try:
        body = resp.read(_ERROR_BODY_LIMIT)
    except (HTTPError, OSError):
        body = b""
    finally:
        discard(resp)
    raise error_from_status(
        resp.status,
        body,
        retry_after=resp.headers.get("Retry-After"),
        continue_requested=continue_requested,
        watch_list_requested=watch_list_requested,
    )


def request_timeout(connect: float, read: float) -> urllib3.Timeout:
    """A request's timeouts: ``read`` for each read, and never longer than it to connect."""
    return urllib3.Timeout(connect=min(connect, read), read=read)


def get_json(
    api_client: ApiClient,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    timeout: float = 30.0,
) -> Any:
    """GET ``path`` and decode it with orjson (discovery documents, small reads).

    Errors are typed like every other request; a body that is not JSON raises
    :class:`MalformedResponseError`.
    """
    resp = send(api_client, path, query or [], request_timeout(DEFAULT_CONNECT_TIMEOUT, timeout))
    raise_for_status(resp)
    data = read_all(resp, path)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponseError(f"GET {path}: body is not JSON: {exc}") from None


def shutdown(resp: urllib3.BaseHTTPResponse) -> None:
    """Shut the response's socket down so that a read blocked in another thread returns."""
    try:
        resp.shutdown()
    except (OSError, ValueError, RuntimeError):
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
