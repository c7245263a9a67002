"""Handlers that record every call they get, for the tests that check what handlers saw.

* :class:`Recorder`: in the test's own process (a shard worker, a dispatcher or a processor
  service started by the test), the calls in memory in call order; it can hold every call on a
  ``gate``, sleep ``delay`` seconds in each, or raise.
* :class:`FileRecorder`: in a processor child process, for the chaos tests, one JSON line per
  call in a file, with the shard's lease as read at the start of the call.

Both record the same facts per call: the kind (``add`` / ``update`` / ``delete``), the key, the
resourceVersion(s), the initial-list flag of an add and whether a deletion was a tombstone.

``python -m processor_svc --handler tests.support.recording_handler:FileRecorder`` (with
``/work/main`` as the working directory, or on ``PYTHONPATH``). :class:`FileRecorder` is a
factory (it takes the :class:`~processor_svc.handlers.HandlerContext`) and appends one JSON line
per call to the file named by ``IB_RECORD_FILE``:

``t`` / ``end``
    ``time.time()`` when the call started / when it was about to return.
``member``, ``pid``
    ``IB_MEMBER`` (default: the processor's ``--member-id``) and this process's id.
``kind``, ``initial``, ``key``, ``rv``, ``old_rv``, ``tombstone``
    ``add`` / ``update`` / ``delete``; ``is_in_initial_list`` of an add; the object's key and
    resourceVersion (a tombstone's: that of the last known state it carries, ``""`` if none);
    an update's old resourceVersion; whether the deletion was a ``DeletedFinalStateUnknown``.
``shard``
    ``common.sharding.shard_for(key, shard_count)``.
``holder``, ``epoch``, ``mine``
    The shard's ownership lease (``ib:{R:S}:lease``) read at the start of the call, and whether
    it named this very process. A processor may call handlers for a shard only while it holds
    the shard's lease, so ``mine`` must always be true, and ``epoch`` tells the ownership
    periods of a shard apart (every acquisition gets a new, higher epoch).
``lease_read``, ``unread_since``
    ``True`` and ``null`` here. :class:`bench.chaos.recorder.OutageRecorder`, which records
    through Redis outages, sets them when the lease could not be read (see there).
``parts``, ``old_parts``
    What the handler was handed of the object (an update's new one, a tombstone's last state)
    and of an update's old one: the top-level members, and ``metadata.managedFields`` when
    present (:func:`parts_of`), so that a group's projection can be checked on every call.

Each line is written with a single ``os.write`` on an ``O_APPEND`` descriptor before the call
returns, so a call that returned is on disk even if the process is killed with SIGKILL right
after (the page cache survives the process), and a killed process never leaves half a line.
``IB_RECORD_DELAY`` (seconds, default 0) makes every call sleep that long: a slow handler, so
that entries are in flight when the processor is killed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key
from common.redis_config import redis_client
from common.redis_layout import ShardKeys
from common.sharding import shard_for

__all__ = ["Event", "FileRecorder", "Recorder", "parts_of"]


def _rv(obj: Obj | None) -> str:
    if not obj:
        return ""
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def parts_of(obj: Obj | None) -> list[str]:
    """The parts of ``obj`` a projection decides on: its top-level members, and
    ``metadata.managedFields`` when present (``--project metadata`` keeps ``apiVersion``,
    ``kind`` and ``metadata`` without it)."""
    if not obj:
        return []
    parts = sorted(obj)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        parts.append("metadata.managedFields")
    return parts


Event = tuple[Any, ...]
"""What a :class:`Recorder` saw: ``("add", key, rv, initial)``, ``("update", key, old_rv,
new_rv)``, ``("delete", key, rv, is_tombstone)`` (a tombstone's rv: its last known state's, or
``""``)."""


@dataclass
class Recorder:
    """Records every handler call in :attr:`events`; optionally blocks on ``gate``, sleeps
    ``delay`` seconds or raises (after recording the call). Appending is one list operation,
    so the worker threads of several shards may share one recorder."""

    gate: threading.Event = field(default_factory=threading.Event)
    fail: bool = False
    delay: float = 0.0
    events: list[Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gate.set()

    def _record(self, event: Event) -> None:
        self.events.append(event)
        if self.delay:
            time.sleep(self.delay)
        self.gate.wait()
        if self.fail:
            raise RuntimeError(f"boom on {event[1]}")

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self._record(("add", meta_namespace_key(obj), _rv(obj), is_in_initial_list))

    def on_update(self, old: Obj, new: Obj) -> None:
        self._record(("update", meta_namespace_key(new), _rv(old), _rv(new)))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self._record(("delete", obj.key, _rv(obj.obj), True))
        else:
            self._record(("delete", meta_namespace_key(obj), _rv(obj), False))

    def live(self) -> list[Event]:
        """Everything but the initial list."""
        return [e for e in self.events if not (e[0] == "add" and e[3])]

    def initial(self) -> list[Event]:
        return [e for e in self.events if e[0] == "add" and e[3]]

    def per_key(self) -> dict[str, list[tuple[str, str, bool]]]:
        """Per key, in call order: ``(kind, rv, flag)`` with the version the call left the key
        at (an update's new one) and the add's initial-list flag or the deletion's tombstone
        flag (``False`` for an update)."""
        grouped: dict[str, list[tuple[str, str, bool]]] = {}
        for kind, key, first, second in list(self.events):
            if kind == "update":
                grouped.setdefault(key, []).append((kind, second, False))
            else:
                grouped.setdefault(key, []).append((kind, first, second))
        return grouped


class FileRecorder:
    """Records every handler call in ``IB_RECORD_FILE``; see the module docstring."""

    def __init__(self, context: Any) -> None:
        settings = context.settings
        path = os.environ.get("IB_RECORD_FILE")
        if not path:
            raise ValueError("set IB_RECORD_FILE to the file to record handler calls in")
        self._member = os.environ.get("IB_MEMBER") or str(settings.member_id)
        self._pid = os.getpid()
        # The processor's lease holder is unique_holder(member_id): "<member_id>/<pid>/<random>".
        self._holder_prefix = f"{settings.member_id}/{self._pid}/"
        self._delay = float(os.environ.get("IB_RECORD_DELAY", "0") or 0)
        self._shard_count = int(settings.shard_count)
        self._leases = [
            ShardKeys(settings.prefix, context.resource, shard).for_group(settings.group).lease
            for shard in range(self._shard_count)
        ]
        self._redis: redis.Redis = redis_client(
            settings.redis.url, cluster=settings.redis.cluster, socket_timeout=10
        )
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    # --- ResourceEventHandler ---------------------------------------------------------------

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        self._record("add", meta_namespace_key(obj), obj, initial=is_in_initial_list)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._record("update", meta_namespace_key(new), new, old=old)

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self._record("delete", obj.key, obj.obj, tombstone=True)
        else:
            self._record("delete", meta_namespace_key(obj), obj)

    def stop(self, timeout: float | None = None) -> bool:
        """Called by the processor at shutdown (after the last event was delivered)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        self._redis.close()
        return True

    # --- recording --------------------------------------------------------------------------

    def _lease(self, shard: int, now: float) -> tuple[str | None, int | None, float | None]:
        """``(holder, epoch, unread_since)`` of ``shard``'s lease, read now (``unread_since``
        is ``None``: it was read)."""
        holder, epoch = self._redis.hmget(self._leases[shard], "holder", "epoch")
        holder_text = holder.decode() if isinstance(holder, bytes) else holder
        return holder_text, int(epoch) if epoch is not None else None, None

    def _is_mine(self, holder: str | None) -> bool:
        return holder is not None and holder.startswith(self._holder_prefix)

    def _record(
        self,
        kind: str,
        key: str,
        obj: Obj | None,
        *,
        initial: bool = False,
        old: Obj | None = None,
        tombstone: bool = False,
    ) -> None:
        started = time.time()
        shard = shard_for(key, self._shard_count)
        holder_text, epoch, unread_since = self._lease(shard, started)
        if self._delay > 0:
            time.sleep(self._delay)
        record = {
            "t": started,
            "end": time.time(),
            "member": self._member,
            "pid": self._pid,
            "kind": kind,
            "initial": initial,
            "key": key,
            "rv": _rv(obj),
            "old_rv": _rv(old),
            "tombstone": tombstone,
            "shard": shard,
            "holder": holder_text,
            "epoch": epoch,
            "mine": self._is_mine(holder_text),
            "lease_read": unread_since is None,
            "unread_since": unread_since,
            "parts": parts_of(obj),
            "old_parts": parts_of(old),
        }
        os.write(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())
