"""Handlers that need only keys, and the notifications that carry nothing else.

Decoding an object is the largest cost a processor pays per entry (a Pod's JSON parse, and the
replaced object's for ``on_update``'s ``old``): about a third of a processor's CPU with a
handler that reads nothing of them (``bench/processor_cpu.py``). A handler that only needs to
know *which* key changed (it queues the key and reads the cache later, as a controller does)
says so by implementing :class:`KeyEventHandler`. When every handler of a resource does, the
group has no view and the store's only index is the namespace index, the shard worker decodes
an entry's header alone: the store keeps the entry's bytes as they came, indexed by the
header's namespace, and each handler gets ``on_key_event(key, change, False)``. The initial
list, takeovers and resyncs still call ``on_add``/``on_update``/``on_delete`` with objects, so a
key handler is a whole :class:`~common.handlers.ResourceEventHandler` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, Protocol, TypeAlias, runtime_checkable

from common.handlers import ResourceEventHandler

__all__ = ["ADD", "DELETE", "UPDATE", "Change", "KeyEventHandler", "KeyNotification"]

Change: TypeAlias = Literal["add", "update", "delete"]
ADD: Final[Change] = "add"
UPDATE: Final[Change] = "update"
DELETE: Final[Change] = "delete"


@runtime_checkable
class KeyEventHandler(ResourceEventHandler, Protocol):
    """Optional: a handler told only the key of a live change (module docstring).

    ``change`` is ``"add"`` (the key was not in the cache), ``"update"`` or ``"delete"``;
    ``is_in_initial_list`` is false for live changes (the initial list comes through
    ``on_add``). The cache (``context.lister``) already holds the new state when it is called.
    """

    def on_key_event(self, key: str, change: Change, is_in_initial_list: bool) -> None: ...


@dataclass(slots=True)
class KeyNotification:
    """``on_key_event(key, change, False)``."""

    key: str
    change: Change

    def apply(self, handler: ResourceEventHandler) -> None:
        assert isinstance(handler, KeyEventHandler)  # sent only when every handler is one
        handler.on_key_event(self.key, self.change, False)

    def describe(self) -> str:
        return f"{self.change} of {self.key}"
