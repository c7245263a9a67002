"""The handler calls that :class:`tests.support.recording_handler.FileRecorder` wrote, read
back: one :class:`Call` per line of each processor's ``.jsonl`` log (the fields are described
in that module).

The chaos tests of ``tests/processor/ha`` check ownership and stream order with these; the
group tests (``tests/support/held_objects.py``) replay them into what a group's handlers hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Call", "read_calls"]


@dataclass(frozen=True, slots=True)
class Call:
    """One recorded handler call (a line of a ``.jsonl`` log; ``seq``: its line number)."""

    member: str
    pid: int
    seq: int
    t: float
    end: float
    kind: str
    initial: bool
    key: str
    rv: str
    old_rv: str
    tombstone: bool
    shard: int
    holder: str | None
    epoch: int | None
    mine: bool
    lease_read: bool = True
    """``False``: Redis did not answer, ``holder`` and ``epoch`` are this process's own lease of
    the shard as last observed (``bench/chaos/recorder.py``)."""
    unread_since: float | None = None
    """When the recorder's lease reads started failing (with ``lease_read`` false)."""
    parts: tuple[str, ...] = ()
    """What the handler was handed of the object (an update's new one; a tombstone's last
    state): its top-level members, and ``metadata.managedFields`` when present."""
    old_parts: tuple[str, ...] = ()
    """The same of an update's old object (empty for the other calls)."""

    @property
    def rv_int(self) -> int:
        return int(self.rv) if self.rv else -1

    def __str__(self) -> str:
        flags = ("initial " if self.initial else "") + ("tombstone " if self.tombstone else "")
        return (
            f"{self.member}#{self.seq} {flags}{self.kind} {self.key}@{self.rv} shard {self.shard} "
            f"epoch {self.epoch} at {self.t:.3f}"
        )


def read_calls(directory: Path) -> list[Call]:
    """Every processor's recorded calls, each log in its order (one process per log).

    A line is a call once its newline is there. Each is one ``os.write``, but a reader of a
    live process's log can still meet one half copied (a write that spans a page boundary
    becomes visible page by page), so the unterminated tail, if any, is left for the next
    read."""
    calls: list[Call] = []
    for path in sorted(directory.glob("*.jsonl")):
        *complete, _unterminated = path.read_bytes().split(b"\n")
        for seq, line in enumerate(complete):
            record = json.loads(line)
            for name in ("parts", "old_parts"):
                record[name] = tuple(record.get(name, ()))
            calls.append(Call(seq=seq, **record))
    return calls
