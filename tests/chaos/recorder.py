"""The recording handler of the processor chaos tests, made to outlast a Redis outage.

:class:`tests.support.recording_handler.Recorder` reads the shard's lease from Redis at the
start of every call (to record whether the caller held it). While Redis restarts, that read
fails, the call raises and its line is never written, so a delta the processor did deliver
would look lost. :class:`PatientRecorder` retries that read until Redis answers again (at most
``IB_RECORD_PATIENCE`` seconds, default 60): the processor still decides what to deliver and
when; only the bookkeeping waits.

``--handler tests.chaos.recorder:PatientRecorder`` with ``IB_RECORD_FILE`` set, as for
``Recorder``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from tests.support.recording_handler import Recorder

__all__ = ["PatientRecorder"]


class _PatientRedis(redis.Redis):
    """A client whose ``HMGET`` (the recorder's only command) retries while Redis is away."""

    patience = 60.0

    def hmget(self, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                return super().hmget(*args, **kwargs)
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


class PatientRecorder(Recorder):
    """:class:`Recorder` whose lease reads wait for Redis to come back (module docstring)."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self._redis.close()
        patient = _PatientRedis.from_url(context.settings.redis_url, socket_timeout=2)
        patient.patience = float(os.environ.get("IB_RECORD_PATIENCE", "60") or 60)
        self._redis = patient
