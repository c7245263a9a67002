"""common.throttled_log: one warning per stretch of failures, and one line when they end."""

from __future__ import annotations

import logging

import pytest

from common.rate_limiters import FakeClock
from common.throttled_log import ThrottledLog

LOGGER = "tests.throttled"


def test_failures_are_logged_once_per_interval_and_the_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    errors = ThrottledLog(logging.getLogger(LOGGER), clock, interval=30.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(3):
            errors.failure("renew failed", ConnectionError("down"), {"shard": 1})
            clock.step(10.0)
        errors.failure("renew failed", ConnectionError("down"), {"shard": 1})  # 30 s later
        errors.success("Redis answers again", {"shard": 1})
        errors.success("Redis answers again", {"shard": 1})  # nothing failed since
    assert [r.getMessage() for r in caplog.records] == [
        "renew failed: ConnectionError('down')",
        "renew failed: ConnectionError('down') (2 similar failures not logged)",
        "Redis answers again after 4 failed calls",
    ]
    assert all(getattr(r, "shard", None) == 1 for r in caplog.records)
