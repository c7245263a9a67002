"""The chaos checks read the recording logs of processors that are still running."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.processor_ha import read_calls

RECORD = {
    "member": "p1", "pid": 1, "t": 1.0, "end": 1.1, "kind": "add", "initial": False,
    "key": "ns/a", "rv": "5", "old_rv": "", "tombstone": False, "shard": 3, "holder": "p1/1",
    "epoch": 2, "mine": True,
}  # fmt: skip


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    line = json.dumps(RECORD).encode() + b"\n"
    log = tmp_path / "p1.jsonl"
    log.write_bytes(line + line[:17])  # the second call's write is half visible
    calls = read_calls(tmp_path)
    assert [(c.seq, c.key, c.epoch) for c in calls] == [(0, "ns/a", 2)]
    log.write_bytes(line + line)
    assert [c.seq for c in read_calls(tmp_path)] == [0, 1]
