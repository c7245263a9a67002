"""Running the layout's Lua scripts: one way to send them, one way to recover from ``NOSCRIPT``.

A script is sent by its SHA1 (``EVALSHA``), computed here once per process from its text, so
the text crosses the network only when Redis lost it (a restart, a failover, ``SCRIPT
FLUSH``): Redis then answers ``NOSCRIPT``, the script is loaded and the call runs once more.
Every script of the layout is idempotent or only reads, which is what makes running it again
safe. Outside this package nobody registers, loads or evaluates a script
(``tests/common/test_redis_conversations.py`` checks it).

Three shapes, one per kind of caller:

* :func:`run`: one call, alone;
* :func:`run_pipelined`: many calls in one pipelined round trip (the reflector's shards), each
  routed by its keys on a Redis Cluster, optionally ended with a ``WAIT`` on the same
  connection (:class:`~common.replica_wait.ReplicaWait`); after a ``NOSCRIPT`` every script of
  the round trip is loaded and the whole round trip runs again. Not through redis-py's
  ``Script`` in a pipeline, which sends a blocking ``SCRIPT EXISTS`` before every execution (a
  second round trip), and whose ``EVALSHA`` redis-py's Cluster pipeline refuses;
* :func:`queue_source`: into a caller's pipeline that holds other commands, which
  cannot simply be sent again: the script goes with its text (``EVAL``), so there is no
  ``NOSCRIPT`` to recover from. Only for short scripts (a heartbeat).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis
from redis.exceptions import NoScriptError

from common.redis_config import is_cluster, node_client

__all__ = [
    "Call",
    "ScriptCall",
    "ScriptText",
    "Waiter",
    "queue",
    "queue_source",
    "run",
    "run_pipelined",
    "run_then_wait",
]


class ScriptText(Protocol):
    """A script as it is sent: a :class:`~common.redis_layout.lua.LuaScript` (or redis-py's
    ``Script``, until its last user moves here)."""

    @property
    def sha(self) -> str: ...

    @property
    def script(self) -> Any: ...


def run(
    client: redis.Redis, script: ScriptText, keys: Sequence[str], args: Sequence[Any] = ()
) -> Any:
    """``script``'s reply, run on ``client`` (routed by ``keys`` on a Cluster); a script Redis
    lost is loaded and run once more. Raises what Redis raises."""
    call: Any = client.evalsha  # redis-py's return type is a union with Awaitable
    try:
        return call(script.sha, len(keys), *keys, *args)
    except NoScriptError:
        client.script_load(script.script)
        return call(script.sha, len(keys), *keys, *args)


def queue(pipe: Any, script: ScriptText, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Add an ``EVALSHA`` of ``script`` to ``pipe`` (see :func:`run_pipelined` for the
    ``NOSCRIPT`` recovery this needs). ``execute_command`` rather than ``pipe.evalsha``, which
    redis-py's Cluster pipeline refuses outright; both route by the keys."""
    send: Any = pipe.execute_command  # unannotated in redis-py
    send("EVALSHA", script.sha, len(keys), *keys, *args)


def queue_source(pipe: Any, script: ScriptText, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Add an ``EVAL`` of ``script``'s text to ``pipe``: for a pipeline that holds other
    commands too (no ``NOSCRIPT`` can come back, so nothing needs sending again)."""
    send: Any = pipe.execute_command  # unannotated in redis-py
    send("EVAL", script.script, len(keys), *keys, *args)


class ScriptCall(Protocol):
    """One script call of a round trip: which script, on which keys, with which arguments."""

    @property
    def script(self) -> ScriptText: ...

    @property
    def keys(self) -> Sequence[str]: ...

    @property
    def args(self) -> Sequence[Any]: ...


@dataclass(frozen=True, slots=True)
class Call:
    """A plain :class:`ScriptCall`."""

    script: ScriptText
    keys: Sequence[str]
    args: Sequence[Any]


class Waiter(Protocol):
    """What the runner needs of a :class:`~common.replica_wait.ReplicaWait`: whether it waits,
    and how it adds its ``WAIT`` to a pipeline."""

    @property
    def enabled(self) -> bool: ...

    def queue(self, pipe: Any) -> None: ...


def run_pipelined(
    client: redis.Redis, calls: Sequence[ScriptCall], wait: Waiter | None = None
) -> tuple[list[Any], list[Any]]:
    """Run ``calls`` in one pipelined round trip; ``(their replies in order, the replies of the
    WAITs that followed them)``. Errors are left in place of replies (the caller knows which
    call failed and what that means); ``NOSCRIPT`` is recovered from here.

    With an enabled ``wait``, each pipeline ends with its ``WAIT``, on the connection that
    carried the writes it confirms: one pipeline on a single Redis, one per primary serving
    the calls on a Cluster (a cluster pipeline cannot route a command without keys, and only
    that primary's replicas matter for its writes)."""
    if not calls:
        return [], []
    replies, waited = _execute_all(client, calls, wait)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        _load(client, calls)
        replies, waited = _execute_all(client, calls, wait)
    return replies, waited


def run_then_wait(
    client: redis.Redis, script: ScriptText, keys: Sequence[str], args: Sequence[Any], wait: Waiter
) -> tuple[Any, Any]:
    """Run ``script`` then ``WAIT`` in one pipeline on the node serving ``keys[0]``; ``(script
    reply, WAIT reply)``. The script's error is raised; the ``WAIT`` reply is left for the
    caller to check (only it knows whether this write needs confirming). A script Redis lost
    is loaded and the pair runs once more."""
    node = node_client(client, keys[0])
    for attempt in (1, 2):
        pipe = node.pipeline(transaction=False)
        queue(pipe, script, keys, args)
        wait.queue(pipe)
        reply, waited = pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError) and attempt == 1:
            node.script_load(script.script)
            continue
        if isinstance(reply, BaseException):
            raise reply
        return reply, waited
    raise AssertionError("unreachable")  # pragma: no cover


def _load(client: redis.Redis, calls: Sequence[ScriptCall]) -> None:
    """Load every script of ``calls`` (each once) through ``client`` (every primary on a
    Cluster)."""
    for script in {call.script.sha: call.script for call in calls}.values():
        client.script_load(script.script)


def _execute_all(
    client: redis.Redis, calls: Sequence[ScriptCall], wait: Waiter | None
) -> tuple[list[Any], list[Any]]:
    if wait is None or not wait.enabled:
        replies: list[Any] = _queued(client, calls).execute(raise_on_error=False)
        return replies, []
    if is_cluster(client):
        return _execute_per_node(client, calls, wait)
    pipe = _queued(client, calls)
    wait.queue(pipe)  # same connection, after every call: confirms them all
    *replies, waited = pipe.execute(raise_on_error=False)
    return replies, [waited]


def _queued(client: redis.Redis, calls: Sequence[ScriptCall]) -> Any:
    """A pipeline on ``client`` holding ``calls``."""
    pipe = client.pipeline(transaction=False)
    for call in calls:
        queue(pipe, call.script, call.keys, call.args)
    return pipe


def _execute_per_node(
    client: redis.Redis, calls: Sequence[ScriptCall], wait: Waiter
) -> tuple[list[Any], list[Any]]:
    by_node: dict[int, tuple[redis.Redis, list[int]]] = {}
    for index, call in enumerate(calls):
        node = node_client(client, call.keys[0])
        by_node.setdefault(id(node), (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    waited: list[Any] = []
    for node, indexes in by_node.values():
        pipe = _queued(node, [calls[index] for index in indexes])
        wait.queue(pipe)
        *node_replies, node_waited = pipe.execute(raise_on_error=False)
        for index, reply in zip(indexes, node_replies, strict=True):
            replies[index] = reply
        waited.append(node_waited)
    return replies, waited
