"""What the Kubernetes API hands the reflector: LIST pages and watch events, as plain data.

The neutral ground between the API side (:mod:`reflector_svc.lister_watcher` and the modules
behind it) and the reflector, whose :class:`~reflector_svc.reflector.ListerWatcher` protocol
speaks in these types: neither side imports the other for them, and a fake source
(``tests/support/fake_source.py``) builds them without a socket.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from common.object_keys import Obj

__all__ = ["INITIAL_EVENTS_END", "ListPage", "WatchEvent"]

INITIAL_EVENTS_END: Final = "k8s.io/initial-events-end"
"""The BOOKMARK annotation that ends the initial events of a watch-list (KEP-3157)."""


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a LIST: ``items`` as plain dicts (with ``kind``/``apiVersion`` stamped on,
    since LIST items omit them), the list ``resource_version``, the ``continue_token`` for the
    next page (``None`` on the last), and the server's ``remaining_item_count`` hint."""

    items: list[Obj]
    resource_version: str
    continue_token: str | None
    remaining_item_count: int | None


class WatchEvent(NamedTuple):
    """One watch event: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK; ``obj`` the object.

    A NamedTuple because a watch burst creates one per event and tuples are the cheapest
    immutable record Python has.
    """

    type: str
    obj: Obj
