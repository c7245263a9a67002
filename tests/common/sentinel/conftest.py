"""A :class:`tests.support.redis_topologies.SentinelGroup` for the sentinel tests: one per module
for the tests that leave it as they found it, a fresh one for each failover test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_topologies import SentinelGroup


@pytest.fixture(scope="module")
def sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelGroup]:
    """A primary, one replica and three sentinels that no test fails over."""
    with SentinelGroup(Path(tmp_path_factory.mktemp("sentinel"))) as group:
        yield group


@pytest.fixture
def failover_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    """A group of its own for a test that kills or pauses the primary."""
    with SentinelGroup(tmp_path / "sentinel") as group:
        yield group
