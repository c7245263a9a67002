"""A Redis conversation written once, run by a blocking client or by an asyncio one.

A reader that exists for both ``redis.Redis`` and ``redis.asyncio.Redis`` (the subscriptions)
would otherwise spell every command sequence twice, once with ``await``, and the two copies
would drift. Here a conversation is a generator: it yields what to send -- :class:`Commands`
(one pipeline, or one call on its own), a :class:`Pause`, a :class:`Scan` -- receives the
replies, decides, and finally returns its result. :func:`converse` runs it on a blocking
client, :func:`converse_async` on an asyncio one; neither knows what is said.

Commands are named by their redis-py method (``"xreadgroup"``), with redis-py's arguments, so a
conversation reads like the blocking code it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from common.redis_replies import as_text

__all__ = [
    "Call",
    "Commands",
    "Conversation",
    "Pause",
    "Recorder",
    "Scan",
    "call",
    "converse",
    "converse_async",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One command: redis-py's method name and its arguments."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    return Call(method, args, kwargs)


@dataclass(frozen=True, slots=True)
class Commands:
    """Calls sent together; the reply is the list of their replies, in order.

    ``alone``: one call sent by itself rather than in a pipeline (a blocking read, a command a
    Cluster pipeline cannot route). ``transaction``: a ``MULTI`` pipeline. ``raise_on_error``:
    as redis-py's ``execute`` (false: failed commands' exceptions are replies)."""

    calls: tuple[Call, ...]
    transaction: bool = False
    raise_on_error: bool = True
    alone: bool = False

    @classmethod
    def one(cls, method: str, *args: Any, **kwargs: Any) -> Commands:
        return cls((Call(method, args, kwargs),), alone=True)


class Recorder:
    """Stands in for a pipeline: the calls made on it are recorded, not sent, so a helper
    written for redis-py's pipelines (``queue_listed(pipe, keys)``) adds its commands to a
    conversation's :class:`Commands` (:meth:`commands`) as well."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def __getattr__(self, method: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Recorder:
            self.calls.append(Call(method, args, kwargs))
            return self

        return record

    def commands(self, *, transaction: bool = False, raise_on_error: bool = True) -> Commands:
        return Commands(tuple(self.calls), transaction=transaction, raise_on_error=raise_on_error)


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds`` (a poll interval); the reply is ``None``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Scan:
    """Every key name matching ``pattern`` (``SCAN``; every primary of a Cluster); the reply
    is the list of names as text."""

    pattern: str
    count: int = 1000


Step = Commands | Pause | Scan
T = TypeVar("T")
Conversation = Generator[Step, Any, T]
"""Yields steps, is sent each step's reply (or thrown the step's exception), returns ``T``."""


def _run_blocking(client: Any, step: Step) -> Any:
    if isinstance(step, Pause):
        time.sleep(step.seconds)
        return None
    if isinstance(step, Scan):
        return [as_text(key) for key in client.scan_iter(match=step.pattern, count=step.count)]
    if step.alone:
        (only,) = step.calls
        return [getattr(client, only.method)(*only.args, **only.kwargs)]
    with client.pipeline(transaction=step.transaction) as pipe:
        for one in step.calls:
            getattr(pipe, one.method)(*one.args, **one.kwargs)
        return pipe.execute(raise_on_error=step.raise_on_error)


async def _run_async(client: Any, step: Step) -> Any:
    if isinstance(step, Pause):
        await asyncio.sleep(step.seconds)
        return None
    return await _uncut(_send_async(client, step))


async def _uncut(command: Coroutine[Any, Any, Any]) -> Any:
    """``await command``, which a cancellation does not cut short: it waits for the reply
    (a blocking read's ``block_ms`` at most), then raises. redis-py drops a connection whose
    command it cancels, and a cancellation landing in its read was seen lost now and then
    (redis-py 8.2, Python 3.11: the cancelled subscriber read on, in one test run of ten); a
    command that always completes leaves neither a dropped connection nor a lost
    cancellation."""
    running = asyncio.ensure_future(command)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        running.add_done_callback(_retrieve)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({running})  # cancelled again: it ends on its own, soon
        raise


def _retrieve(done: asyncio.Future[Any]) -> None:
    """Nobody reads a cancelled caller's reply: take its error so asyncio does not log it."""
    if not done.cancelled():
        done.exception()


async def _send_async(client: Any, step: Commands | Scan) -> Any:
    if isinstance(step, Scan):
        scan = client.scan_iter(match=step.pattern, count=step.count)
        return [as_text(key) async for key in scan]
    if step.alone:
        (only,) = step.calls
        return [await getattr(client, only.method)(*only.args, **only.kwargs)]
    async with client.pipeline(transaction=step.transaction) as pipe:
        for one in step.calls:
            getattr(pipe, one.method)(*one.args, **one.kwargs)
        return await pipe.execute(raise_on_error=step.raise_on_error)


def converse(client: Any, conversation: Conversation[T]) -> T:
    """Run ``conversation`` on a blocking client (``redis.Redis`` or a Cluster client). A
    step's exception is thrown into the conversation, which may handle it."""
    try:
        step = next(conversation)
        while True:
            try:
                reply = _run_blocking(client, step)
            except Exception as exc:  # the conversation decides
                step = conversation.throw(exc)
            else:
                step = conversation.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        conversation.close()


async def converse_async(client: Any, conversation: Conversation[T]) -> T:
    """Run ``conversation`` on a ``redis.asyncio`` client, as :func:`converse`. A cancellation
    lets the command in flight finish (a blocking read's ``block_ms`` at most), then closes the
    conversation and propagates; it is never thrown into the conversation."""
    try:
        step = next(conversation)
        while True:
            try:
                reply = await _run_async(client, step)
            except Exception as exc:  # the conversation decides
                step = conversation.throw(exc)
            else:
                step = conversation.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    finally:
        conversation.close()
