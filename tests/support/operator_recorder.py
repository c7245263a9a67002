"""The example operator, recording every reconcile of this process (for the operator tests).

``RecordingWidgetOperator`` is :class:`informer_bus.examples.widget_operator.WidgetOperator`
whose ``reconcile`` appends one JSON line per call to ``$IB_RECORD_FILE``:
``{"member", "pid", "key", "start", "end", "error"}`` with wall-clock unix seconds (one
machine, so the lines of several processes can be compared), written and flushed when the call
ends; a line ``{"member", "pid", "key", "start"}`` is written when it starts, so a reconcile
cut short by ``kill -9`` still shows when it began. ``$IB_RECONCILE_DELAY`` (seconds, default 0)
makes every reconcile take that much longer, after its writes: a slow reconcile, so hand-overs
find some running.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import IO

from informer_bus import HandlerContext
from informer_bus.examples.widget_operator import WidgetOperator

__all__ = ["RecordingWidgetOperator"]


class RecordingWidgetOperator(WidgetOperator):
    def __init__(self, context: HandlerContext) -> None:
        super().__init__(context)
        self._member = os.environ.get("IB_MEMBER", "")
        self._delay = float(os.environ.get("IB_RECONCILE_DELAY", "0"))
        self._lock = threading.Lock()
        self._file: IO[str] = open(  # noqa: SIM115 - closed in stop()
            os.environ["IB_RECORD_FILE"], "a", buffering=1, encoding="utf-8"
        )

    def _write(self, line: dict[str, object]) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write(json.dumps(line) + "\n")

    def reconcile(self, key: str) -> None:
        record: dict[str, object] = {"member": self._member, "pid": os.getpid(), "key": key}
        start = time.time()
        self._write({**record, "start": start})
        error = None
        try:
            super().reconcile(key)
            if self._delay:
                time.sleep(self._delay)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._write({**record, "start": start, "end": time.time(), "error": error})

    def stop(self, timeout: float | None = None) -> bool:
        stopped = super().stop(timeout)
        with self._lock:
            self._file.close()
        return stopped
