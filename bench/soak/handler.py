"""The soak's handler: counts calls and keeps no per-event state, so its process's memory
measures the processor, not the test.

``--handler bench.soak.handler:SoakCounter`` with ``IB_SOAK_DIR`` naming a directory shared with
the runner. A recording handler that kept every call (``tests.support.recording_handler``
keeps them on disk, at the price of a Redis read per call) would either grow by itself or slow
the processor down at 2k events/s. This one keeps:

``<member>-<pid>.counts.json``
    call counts (``add``, ``initial``, ``update``, ``delete``), rewritten every second and at
    stop: what a process handled, even if it is killed (then up to a second is missing).
``<member>-<pid>.deletes``
    one line ``<key> <rv> <tombstone 0/1>`` per ``on_delete``, appended with one ``os.write``
    (a killed process never leaves half a line): deletions are checked one by one, and a file
    costs no memory.
``<member>-<pid>.adds``
    one line ``<key>`` per ``on_add``, written the same way: which objects the group's
    handlers were told of, so that exactly their deletions are owed to them.
``<member>-<pid>.cache.json``
    written when the runner asks (``dump-request`` holds a new token): the owned shards and
    ``{key: resourceVersion}`` of the processor's real stores, read through the lister, so
    "final caches equal the ground truth" is checked on the caches themselves.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from common.object_keys import DeletedFinalStateUnknown, Obj, meta_namespace_key

__all__ = ["DUMP_REQUEST", "SoakCounter"]

DUMP_REQUEST = "dump-request"
"""The file in ``IB_SOAK_DIR`` the runner writes a token into to ask for a cache dump."""

_POLL_SECONDS = 0.2
_COUNTS_EVERY = 5  # polls: about a second


def _rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))


def _append_only(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _write_atomically(path: Path, document: Any) -> None:
    """Readers never see half a file: write beside it, then rename over it."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(document, separators=(",", ":")))
    partial.replace(path)


class SoakCounter:
    """Bounded-state handler; see the module docstring."""

    def __init__(self, context: Any) -> None:
        directory = os.environ.get("IB_SOAK_DIR")
        if not directory:
            raise ValueError("set IB_SOAK_DIR to the soak's working directory")
        self._directory = Path(directory)
        self._lister = context.lister
        name = f"{context.settings.member_id}-{os.getpid()}"
        self._counts_path = self._directory / f"{name}.counts.json"
        self._cache_path = self._directory / f"{name}.cache.json"
        self._deletes_fd = _append_only(self._directory / f"{name}.deletes")
        self._adds_fd = _append_only(self._directory / f"{name}.adds")
        self._lock = threading.Lock()  # handler calls may come from several shard threads
        self._counts = {"add": 0, "initial": 0, "update": 0, "delete": 0}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="soak-counter", daemon=True)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._write_counts()
        for fd in (self._deletes_fd, self._adds_fd):
            if fd >= 0:
                os.close(fd)
        self._deletes_fd = self._adds_fd = -1
        return not self._thread.is_alive()

    # --- ResourceEventHandler ---------------------------------------------------------------

    def on_add(self, obj: Obj, is_in_initial_list: bool) -> None:
        os.write(self._adds_fd, f"{meta_namespace_key(obj)}\n".encode())
        self._count("initial" if is_in_initial_list else "add")

    def on_update(self, old: Obj, new: Obj) -> None:
        self._count("update")

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            line = f"{obj.key} {_rv(obj.obj)} 1\n"
        else:
            line = f"{meta_namespace_key(obj)} {_rv(obj)} 0\n"
        os.write(self._deletes_fd, line.encode())
        self._count("delete")

    # --- bookkeeping ------------------------------------------------------------------------

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def _write_counts(self) -> None:
        with self._lock:
            counts = dict(self._counts)
        _write_atomically(self._counts_path, counts)

    def _serve(self) -> None:
        """Every second the counts; a cache dump whenever the request token changes."""
        answered = ""
        polls = 0
        while not self._stopping.wait(_POLL_SECONDS):
            polls += 1
            if polls % _COUNTS_EVERY == 0:
                self._write_counts()
            try:
                token = (self._directory / DUMP_REQUEST).read_text()
            except FileNotFoundError:
                continue
            if token and token != answered:
                self._dump(token)
                answered = token

    def _dump(self, token: str) -> None:
        shards = self._lister.shards()
        objects = {meta_namespace_key(obj): _rv(obj) for obj in self._lister.list()}
        _write_atomically(
            self._cache_path,
            {
                "token": token,
                "shards": shards,
                "synced": self._lister.has_synced(),
                "objects": objects,
            },
        )
